"""The collapse check (`raypipe.augment.collapse`): D_gen rows written by hand, as a healthy critic (its
labels are the world's ground truth) and as a collapsed one (the majority label everywhere) would
have written them, relabelled by the noiseless oracle teacher. The expected shares are counted by hand
from the rows below."""

from __future__ import annotations

import json
import logging
import random

import pyarrow as pa
import pytest

from raypipe import tokens as T
from raypipe.augment.collapse import DGenRow, announce, collapse_report, is_collapsed, run_collapse_check
from raypipe.augment.state import InstanceState, SegmentState
from raypipe.config import RaypipeConfig
from raypipe.critic.oracle import CriticOracle
from raypipe.data.io import write_parquet
from raypipe.errors import RaypipeError
from raypipe.retrieval.types import Passage
from raypipe.settings.augment import CollapseCheckConfig

N = 10  # rows of each kind: with retrieval (two sentences, two passages each) and without


def _gold(i: int) -> Passage:
    return Passage(f"g{i}", f"Ada Quill{i}", f"Ada Quill{i} was born in 1900 and painted boats.", 0.9)


def _lookalike(i: int) -> Passage:
    return Passage(f"l{i}", f"Ada Quill{i}e", f"Ada Quill{i}e was a sailor.", 0.8)


def _retrieval_row(i: int, healthy: bool) -> DGenRow:
    """Sentence 0 is fully supported by the gold passage (the oracle's Retrieve: [Continue to Use
    Evidence], rendered [Retrieval] as the first insertion), sentence 1 partly ([Retrieval])."""
    texts = [f"Ada Quill{i} was born in 1900. ", f"Ada Quill{i} painted boats."]
    meta = {"needs_retrieval": True, "relevant_passages": [f"g{i}"], "utility": 5 if i % 2 else 4,
            "sentences": [{"text": texts[0].strip(), "needs_retrieval": True, "support": {f"g{i}": "full"}},
                          {"text": texts[1], "needs_retrieval": True, "support": {f"g{i}": "partial"}}]}
    segments = []
    for t, text in enumerate(texts):
        support = (T.FULLY_SUPPORTED, T.PARTIALLY_SUPPORTED)[t]
        segments.append(SegmentState(
            text=text, decision=T.RETRIEVAL, passages=[_gold(i), _lookalike(i)],
            is_rel=[T.RELEVANT, T.IRRELEVANT] if healthy else [T.IRRELEVANT, T.IRRELEVANT],
            is_sup=[support, None] if healthy else [None, None], chosen=0))
    utility = T.utility_token(meta["utility"]) if healthy else T.utility_token(5)
    state = InstanceState(retrieve=True, initial_passages=[_gold(i)], segments=segments, utility=utility)
    return DGenRow(f"r{i:02d}", f"Write about Ada Quill{i}.", "", state, meta)


def _plain_row(i: int) -> DGenRow:
    output = f"{i} plus {i} is {2 * i}."
    meta = {"needs_retrieval": False, "relevant_passages": [], "utility": 5,
            "sentences": [{"text": output, "needs_retrieval": False, "support": {}}]}
    state = InstanceState(retrieve=False, segments=[SegmentState(text=output)], utility=T.utility_token(5))
    return DGenRow(f"n{i:02d}", f"What is {i} plus {i}?", "", state, meta)


def _rows(healthy: bool) -> list[DGenRow]:
    return [_retrieval_row(i, healthy) for i in range(N)] + [_plain_row(i) for i in range(N)]


def _report(rows: list[DGenRow], sample_rows: int = 2 * N, **check) -> dict:
    return collapse_report(rows, CollapseCheckConfig(**check), sample_rows, CriticOracle(error_rate=0.0))


def test_a_healthy_d_gen_matches_the_teacher_and_is_not_flagged(caplog):
    report = _report(_rows(healthy=True))
    assert report["collapsed"] == [] and report["rows"] == report["sample_rows"] == 2 * N
    aspects = report["aspects"]
    for aspect, r in aspects.items():
        assert r["dgen"] == r["teacher"] and r["agreement"] == 1.0, aspect
    assert aspects["is_rel"]["dgen"] == {T.RELEVANT: 0.5, T.IRRELEVANT: 0.5} and aspects["is_rel"]["dgen_n"] == 4 * N
    assert aspects["is_sup"]["teacher"][T.FULLY_SUPPORTED] == 0.5 and aspects["is_sup"]["teacher_n"] == 2 * N
    # every segment retrieves, by the teacher's labels too: one label for all of them is not a collapse
    assert aspects["retrieve"]["dgen"][T.RETRIEVAL] == 1.0 and not aspects["retrieve"]["collapsed"]
    assert aspects["is_use"]["teacher"] == {**dict.fromkeys(T.UTILITY, 0.0), "[Utility:4]": 0.25, "[Utility:5]": 0.75}
    with caplog.at_level(logging.INFO, logger="raypipe.augment.collapse"):
        announce(report, CollapseCheckConfig(fail=True), "oracle")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_collapsed_d_gen_warns_naming_the_aspects_and_the_fix(caplog):
    report = _report(_rows(healthy=False))
    assert report["collapsed"] == ["is_rel", "is_sup", "is_use"]
    aspects = report["aspects"]
    assert aspects["is_rel"]["dgen"][T.IRRELEVANT] == 1.0 and aspects["is_rel"]["teacher"][T.RELEVANT] == 0.5
    assert aspects["is_rel"]["agreement"] == 0.5
    # the critic never said [Relevant], so D_gen has no IsSup label where the teacher has 2N
    assert aspects["is_sup"]["dgen_n"] == 0 and aspects["is_sup"]["teacher_n"] == 2 * N
    assert aspects["is_sup"]["agreement"] is None
    with caplog.at_level(logging.WARNING, logger="raypipe.augment.collapse"):
        announce(report, CollapseCheckConfig(), "oracle")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m.split(":")[0] for m in warned] == [f"CRITIC COLLAPSE in {a}" for a in ("is_rel", "is_sup", "is_use")]
    assert "100% of D_gen's labels are [Irrelevant]" in warned[0] and "training.critic.kind=encoder" in warned[0]
    assert "none of D_gen's labels" in warned[1]


def test_fail_makes_a_collapse_an_error():
    report = _report(_rows(healthy=False))
    with pytest.raises(RaypipeError, match="collapsed in is_rel, is_sup, is_use"):
        announce(report, CollapseCheckConfig(fail=True), "oracle")


def test_without_a_teacher_sample_a_one_label_aspect_warns_as_unchecked(caplog):
    report = collapse_report(_rows(healthy=False), CollapseCheckConfig(), 0, None)
    assert report["collapsed"] == [] and report["sample_rows"] == 0
    assert report["aspects"]["is_rel"]["teacher_n"] == 0 and report["aspects"]["is_rel"]["dgen_n"] == 4 * N
    with caplog.at_level(logging.WARNING, logger="raypipe.augment.collapse"):
        announce(report, CollapseCheckConfig(fail=True), "openai")  # unchecked: never an error
    assert any(r.getMessage().startswith("is_rel: 100% of D_gen's labels are [Irrelevant], unchecked")
               for r in caplog.records)


def test_the_sample_is_drawn_by_id_not_by_row_order():
    rows = _rows(healthy=True)
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    first, second = _report(rows, sample_rows=5), _report(shuffled, sample_rows=5)
    assert first == second and first["sample_rows"] == 5
    # D_gen's shares are over every row, the teacher's over the sample only
    assert first["aspects"]["is_use"]["dgen_n"] == 2 * N
    assert first["aspects"]["is_use"]["teacher_n"] == 5


def test_the_rule():
    assert is_collapsed({"a": 96, "b": 4}, {"a": 60, "b": 40}, 0.95)
    assert not is_collapsed({"a": 95, "b": 5}, {"a": 60, "b": 40}, 0.95)
    assert not is_collapsed({"a": 100}, {"a": 97, "b": 3}, 0.95)  # the teacher is one-label too
    assert is_collapsed({}, {"a": 1, "b": 1}, 0.95)
    assert not is_collapsed({"a": 100}, {}, 0.95)


def test_the_job_reads_the_shards_and_the_instances_meta(tmp_path):
    """`run_collapse_check` over written files: D_gen shards (up-sampled, contrast and unsupported
    copies left out) and the instance shards that hold the oracle's ground truth."""
    rows = _rows(healthy=False)
    dgen = [{"id": r.id, "instruction": r.instruction, "input": r.input, "state": r.state.to_json()} for r in rows]
    dgen += [{**dgen[0], "id": f"{rows[0].id}{copy}"} for copy in ("#up1", "#contrast", "#unsupported")]
    write_parquet(pa.Table.from_pylist(dgen), tmp_path / "gen" / "data" / "part-0.parquet")
    instances = [{"id": r.id, "meta": json.dumps(r.meta)} for r in rows]
    write_parquet(pa.Table.from_pylist(instances), tmp_path / "instances.parquet")
    cfg = RaypipeConfig.model_validate({"label": {"teacher": {"error_rate": 0.0}}})
    check, teacher = cfg.augment.collapse_check, cfg.label.teacher
    report = run_collapse_check(check, teacher, tmp_path / "gen", [str(tmp_path / "instances.parquet")])
    assert report["teacher"] == "oracle" and report["rows"] == 2 * N and report["sample_rows"] == 2 * N
    assert report["collapsed"] == ["is_rel", "is_sup", "is_use"]
    # rows whose instance has no ground truth cannot be judged by the oracle: left out and counted
    write_parquet(pa.Table.from_pylist([{**x, "meta": "{}"} if x["id"].startswith("n") else x for x in instances]),
                  tmp_path / "instances.parquet")
    report = run_collapse_check(check, teacher, tmp_path / "gen", [str(tmp_path / "instances.parquet")])
    assert report["sample_rows"] == N and report["skipped"] == {"no_ground_truth": N}
    assert report["aspects"]["retrieve_input"]["teacher"][T.RETRIEVAL] == 1.0
