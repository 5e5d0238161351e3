"""The critic stage over a Ray Data actor pool gives the same distributions as the local predictor."""

from __future__ import annotations

import numpy as np
import pytest

from raypipe.critic.predict import CriticPredictor
from raypipe.critic.stage import predict_dataset
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample, critic_prompt


def _rows() -> list[dict]:
    rows = []
    for i in range(24):
        if i % 3 == 0:
            ex = CriticExample(Aspect.RETRIEVE_INPUT, f"Who founded company number {i}?")
        elif i % 3 == 1:
            ex = CriticExample(Aspect.IS_USE, "Add the numbers.", input=f"{i} and 2", output=f"It is {i + 2}.")
        else:
            ex = CriticExample(Aspect.IS_REL, f"Tell me about item {i}.", evidence=f"Item {i}\nItem {i} is red.")
        rows.append({"id": f"r{i}", "prompt": critic_prompt(ex), "aspect": ex.aspect.value})
    return rows


@pytest.mark.slow  # actor start-up: ~15 s on a quiet 2-core machine, more under load
def test_two_actors_match_the_local_predictor(ray_cluster, tiny_model_dir):
    rows = _rows()
    ds = ray_cluster.data.from_items(rows, override_num_blocks=4)
    out = predict_dataset(ds, tiny_model_dir, actors=2, batch_size=5).take_all()
    assert sorted(r["id"] for r in out) == sorted(r["id"] for r in rows)
    local = CriticPredictor(tiny_model_dir, device="cpu")
    expected = dict(zip([r["id"] for r in rows],
                        local.predict_prompts([r["prompt"] for r in rows], [Aspect(r["aspect"]) for r in rows]),
                        strict=True))
    for r in out:
        np.testing.assert_allclose(r["probs"], expected[r["id"]], atol=1e-5)
        labels = ASPECT_LABELS[Aspect(r["aspect"])]
        assert r["label"] == labels[int(np.argmax(expected[r["id"]]))]
