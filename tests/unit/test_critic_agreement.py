"""The agreement report: per-aspect accuracy and confusion matrices of a critic against dev labels."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pytest

from raypipe import tokens
from raypipe.critic.agreement import agreement_report
from raypipe.critic.dataset import CRITIC_SCHEMA, example_column, read_split
from raypipe.critic.predictor import ReflectionPredictor
from raypipe.data.io import write_parquet
from raypipe.errors import RaypipeError
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample, critic_prompt

# (aspect, teacher label, the label the stub critic answers)
DEV = [
    ("is_rel", tokens.RELEVANT, tokens.RELEVANT),
    ("is_rel", tokens.RELEVANT, tokens.IRRELEVANT),
    ("is_rel", tokens.IRRELEVANT, tokens.IRRELEVANT),
    ("is_rel", tokens.IRRELEVANT, tokens.IRRELEVANT),
    ("is_use", "[Utility:5]", "[Utility:4]"),
    ("is_use", "[Utility:3]", "[Utility:3]"),
]


class StubCritic(ReflectionPredictor):
    """Puts 0.7 on the label named in the example's instruction, the rest spread over the group."""

    def distributions(self, examples: Sequence[CriticExample]) -> list[np.ndarray]:
        out = []
        for ex in examples:
            labels = ASPECT_LABELS[ex.aspect]
            probs = np.full(len(labels), 0.3 / (len(labels) - 1))
            probs[labels.index(ex.instruction)] = 0.7
            out.append(probs)
        return out


def _dev_rows(instruction: Callable[[str], str]) -> list[dict]:
    """D_critic rows of DEV whose examples' instruction is `instruction(answer)`."""
    rows = []
    for i, (aspect, truth, answer) in enumerate(DEV):
        example = CriticExample(aspect, instruction(answer), evidence="Title\nA passage." if aspect == "is_rel" else None,
                                output="An output." if aspect == "is_use" else "")
        rows.append({"id": f"r{i}", "instance_id": f"i{i}", "aspect": aspect, "prompt": critic_prompt(example),
                     "target": truth, "example": example_column(example)})
    return rows


@pytest.fixture
def dev_dir(tmp_path):
    write_parquet(pa.Table.from_pylist(_dev_rows(str), schema=CRITIC_SCHEMA), tmp_path / "dev" / "part-00000.parquet")
    return tmp_path


def test_accuracy_and_confusion_per_aspect(dev_dir, tmp_path, capsys):
    report = agreement_report(StubCritic(), dev_dir, out_path=tmp_path / "agreement.json")
    assert report["n"] == 6 and report["accuracy"] == pytest.approx(4 / 6)
    rel = report["aspects"]["is_rel"]
    assert rel["accuracy"] == pytest.approx(3 / 4)
    assert rel["confusion"] == {tokens.RELEVANT: {tokens.RELEVANT: 1, tokens.IRRELEVANT: 1},
                                tokens.IRRELEVANT: {tokens.RELEVANT: 0, tokens.IRRELEVANT: 2}}
    use = report["aspects"]["is_use"]
    assert use["accuracy"] == pytest.approx(0.5)
    assert use["confusion"]["[Utility:5]"]["[Utility:4]"] == 1
    assert sum(sum(row.values()) for row in use["confusion"].values()) == 2
    assert sorted(report["aspects"]) == ["is_rel", "is_use"]
    assert json.loads((tmp_path / "agreement.json").read_text()) == report
    printed = capsys.readouterr().out
    assert "75.0%" in printed and "is_use: teacher (rows) x critic (columns)" in printed


def test_accepts_the_dev_folder_itself(dev_dir):
    assert agreement_report(StubCritic(), dev_dir / "dev", show=False)["n"] == 6


def test_a_checkpoint_path_gives_a_well_formed_report(dev_dir, tiny_model_dir, tmp_path):
    rows = _dev_rows(lambda answer: f"Judge {answer}.")
    write_parquet(pa.Table.from_pylist(rows, schema=CRITIC_SCHEMA), tmp_path / "d" / "dev" / "part-00000.parquet")
    report = agreement_report(tiny_model_dir, tmp_path / "d", show=False, engine_kind="hf")
    assert report["n"] == 6 and 0.0 <= report["accuracy"] <= 1.0
    for aspect, r in report["aspects"].items():
        assert sum(sum(row.values()) for row in r["confusion"].values()) == r["n"]
        assert list(r["confusion"]) == list(ASPECT_LABELS[Aspect(aspect)])


def test_a_split_without_example_fields_names_the_fix(tmp_path):
    old = pa.schema([f for f in CRITIC_SCHEMA if f.name != "example"])
    rows = [{k: v for k, v in r.items() if k != "example"} for r in _dev_rows(str)]
    write_parquet(pa.Table.from_pylist(rows, schema=old), tmp_path / "dev" / "part-00000.parquet")
    with pytest.raises(RaypipeError, match="relabel"):
        read_split(tmp_path, "dev")
