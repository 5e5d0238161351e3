"""The LM critic on the vLLM engine gives the HF engine's group distributions, in fp32 to 1e-5, and
the same labels whatever the rows batched with it: what a resumed augmentation's byte-identical
output rests on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample

EXAMPLES = [
    CriticExample(Aspect.RETRIEVE_INPUT, "Who founded the Calder Library?"),
    CriticExample(Aspect.IS_REL, "Who founded the Calder Library?",
                  evidence="Calder Library\nThe Calder Library was founded in 1884 by Ruth Calder."),
    CriticExample(Aspect.IS_USE, "Add the numbers.", input="2 and 3", output="The sum is 5."),
    CriticExample(Aspect.IS_SUP, "Who founded the Calder Library?", output="Ruth Calder founded it.",
                  evidence="Calder Library\nThe Calder Library was founded in 1884 by Ruth Calder."),
]

pytestmark = pytest.mark.slow


def test_vllm_critic_matches_the_hf_critic(tiny_model_dir, vllm_engines):
    from raypipe.critic.predict import CriticPredictor
    from raypipe.inference.engines.hf import HFEngine

    on_vllm = CriticPredictor(vllm_engines(tiny_model_dir))
    on_hf = CriticPredictor(HFEngine(tiny_model_dir, device="cpu", dtype=torch.float32))
    for ex, got, want in zip(EXAMPLES, on_vllm.predict(EXAMPLES), on_hf.predict(EXAMPLES), strict=True):
        assert list(got) == list(ASPECT_LABELS[ex.aspect])
        assert sum(got.values()) == pytest.approx(1.0, abs=1e-9)
        np.testing.assert_allclose(list(got.values()), list(want.values()), atol=1e-5)


def test_vllm_critic_labels_do_not_depend_on_the_batch(tiny_model_dir, vllm_engines):
    from raypipe.critic.predict import CriticPredictor

    critic = CriticPredictor(vllm_engines(tiny_model_dir))
    together = critic.distributions(EXAMPLES * 3)
    alone = [critic.distributions([ex])[0] for ex in EXAMPLES]
    for i, row in enumerate(together):
        assert row.tobytes() == alone[i % len(EXAMPLES)].tobytes()  # bit for bit, not merely close
