"""The augmentation job's guards, without Ray: validation by position (issue 18: invalid UTF-8, a bad
row repeating a good row's id, over-long fields), the sentence limit at segmentation, the refusal of
non-parquet shards, and the refusal to resume an output folder with other settings."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from raypipe.augment import pipeline, stages
from raypipe.augment.stages import REJECT, REJECT_DETAIL, REJECT_FIELD
from raypipe.augment.state import InstanceState
from raypipe.config import RaypipeConfig
from raypipe.data.segment import Segmenter
from raypipe.errors import ConfigError, DataError
from raypipe.jobs.augment import augment_sections
from raypipe.settings.data import LimitsConfig, SegmentationConfig


def invalid_utf8(values: list[bytes]) -> pa.Array:
    """A string column holding bytes that are not UTF-8, as another language's parquet writer can."""
    return pa.array(values, type=pa.binary()).view(pa.string())


def shard_batch(ids, outputs: pa.Array, path="/data/part-0.parquet") -> pa.Table:
    n = len(ids)
    return pa.table({"id": ids, "instruction": [f"Question {i}?" for i in ids], "input": [""] * n,
                     "output": outputs, "dataset": ["world"] * n, "path": [path] * n})


def test_validate_rejects_bad_rows_by_position_and_hands_on_valid_text():
    ids = ["g1", "g2", "u1", "g2", "long"]
    outputs = invalid_utf8([b"One.", b"Two.", b"Caf\xe9 bad bytes.", b"   ", b"x" * 50])
    out = pipeline.validate(shard_batch(ids, outputs), LimitsConfig(max_output_chars=40))

    assert list(out[REJECT]) == ["", "", "invalid_utf8", "empty_output", "too_long"]
    assert list(out[REJECT_FIELD]) == ["", "", "output", "output", "output"]
    assert "50 characters (limit 40)" in out[REJECT_DETAIL][4]
    # the good g2 is kept although a later bad row repeats its id
    assert list(out["id"]) == ["g1", "g2", "u1", "g2", "long"]
    assert list(out["output"][:2]) == ["One.", "Two."]
    assert list(out["path"]) == ["/data/part-0.parquet"] * 5
    # every column is valid text: the numpy/pandas conversion that failed the whole batch now works
    for name, values in out.items():
        assert pa.array(list(values), type=pa.string()).to_numpy(zero_copy_only=False).tolist() == list(values), name


def test_validate_takes_shards_with_other_types_and_missing_columns():
    batch = pa.table({"id": [1, 2], "instruction": ["a?", "b?"], "output": ["A.", "B."],
                      "path": ["/d/p.parquet"] * 2})
    out = pipeline.validate(batch, LimitsConfig())
    assert list(out[REJECT]) == ["wrong_type", "wrong_type"]
    assert list(out["id"]) == ["1", "2"]
    assert set(out) >= {"id", "instruction", "input", "output", "task", "dataset", "meta", "state", REJECT}


class _Splitter:
    def __init__(self):
        self.segmenter = Segmenter(SegmentationConfig())

    def __call__(self, texts):
        return self.segmenter.split_many(texts)


def test_segmentation_rejects_outputs_over_the_sentence_limit_and_later_steps_skip_them():
    many = " ".join(f"Sentence {i} is here." for i in range(7))
    batch = {"id": np.array(["few", "many", "noret"], dtype=object),
             "instruction": np.array(["q?"] * 3, dtype=object), "input": np.array([""] * 3, dtype=object),
             "output": np.array(["One. Two.", many, many], dtype=object),
             "dataset": np.array(["world"] * 3, dtype=object),
             REJECT: np.array([""] * 3, dtype=object), REJECT_FIELD: np.array([""] * 3, dtype=object),
             REJECT_DETAIL: np.array([""] * 3, dtype=object)}
    states = [InstanceState(retrieve=True), InstanceState(retrieve=True), InstanceState(retrieve=False)]
    batch["state"] = np.array([s.to_json() for s in states], dtype=object)

    out = pipeline._on_good_rows(batch, lambda b: stages.segment_outputs(b, _Splitter(), max_sentences=5))
    assert list(out[REJECT]) == ["", "too_many_sentences", ""]
    assert out[REJECT_DETAIL][1] == "'output' has 7 sentences (limit 5)"
    assert len(InstanceState.from_json(out["state"][0]).segments) == 2
    assert InstanceState.from_json(out["state"][1]).segments == []
    # a row that is not retrieved for is not split, so it has no sentence count to exceed
    assert len(InstanceState.from_json(out["state"][2]).segments) == 1

    seen: list[str] = []

    def later_step(b):
        seen.extend(b["id"])
        return b

    pipeline._on_good_rows(out, later_step)
    assert seen == ["few", "noret"]


def test_a_non_parquet_shard_in_the_input_folder_is_an_error_naming_it(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"")
    (tmp_path / "b.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(DataError, match=r"b\.jsonl") as info:
        pipeline.parquet_shards(str(tmp_path))
    assert info.value.file == str(tmp_path)
    (tmp_path / "b.jsonl").unlink()
    assert pipeline.parquet_shards(str(tmp_path)) == [str(tmp_path / "a.parquet")]


def test_resuming_a_folder_made_with_other_settings_is_refused(tmp_path):
    demo = RaypipeConfig.model_validate({"retrieval": {"top_k": 3},
                                         "augment": {"sampling": {"upsample_irrelevant_qa": 0.5}}})
    defaults = RaypipeConfig()
    pipeline.check_settings(tmp_path, pipeline.output_settings(augment_sections(demo)), n_done=0)
    recorded = json.loads((tmp_path / pipeline.SETTINGS_FILE).read_text())
    assert recorded["top_k"] == 3

    pipeline.check_settings(tmp_path, pipeline.output_settings(augment_sections(demo)), n_done=2)  # same settings: resumes
    with pytest.raises(ConfigError, match=r"2 finished shard.*top_k: 3 there, 5 now") as info:
        pipeline.check_settings(tmp_path, pipeline.output_settings(augment_sections(defaults)), n_done=2)
    assert "sampling" in str(info.value)
    # an empty folder takes the new settings
    pipeline.check_settings(tmp_path, pipeline.output_settings(augment_sections(defaults)), n_done=0)
    assert json.loads((tmp_path / pipeline.SETTINGS_FILE).read_text())["top_k"] == 5
