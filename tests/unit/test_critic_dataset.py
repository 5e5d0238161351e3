"""`run_label` on the synthetic world with the oracle teacher: D_critic's layout, labels that follow
the world's ground truth, the instance-level train/dev split, stats, reruns and bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from raypipe import tokens
from raypipe.config import RaypipeConfig
from raypipe.critic.dataset import read_split, split_examples
from raypipe.errors import DataError
from raypipe.jobs.label import run_label
from raypipe.prompts import ASPECT_LABELS, Aspect, critic_prompt
from raypipe.settings.teachers import NEGATIVE_KINDS


def _cfg(world: Path, out: Path, **label) -> RaypipeConfig:
    base = {"instances": str(world / "instances"), "passages": str(world / "passages"), "out_dir": str(out),
            "per_aspect": 60, "dev_fraction": 0.2, "teacher": {"error_rate": 0.0}}
    return RaypipeConfig.model_validate({"label": {**base, **label}})


@pytest.fixture(scope="module")
def labeled(world_dir, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("critic_data")
    return out, run_label(_cfg(world_dir, out))


def _rows(out: Path, split: str) -> list[dict]:
    return pq.read_table(out / split).to_pylist()


def _world(world_dir: Path, kind: str) -> dict[str, dict]:
    return {r["id"]: r for r in pq.read_table(world_dir / kind).to_pylist()}


def test_layout_and_columns(labeled):
    out, stats = labeled
    assert (out / "_SUCCESS").exists()
    assert json.loads((out / "stats.json").read_text()) == stats
    for split in ("train", "dev"):
        assert sorted(p.name for p in (out / split).iterdir()) == ["part-00000.parquet"]
        assert pq.read_schema(out / split / "part-00000.parquet").names == [
            "id", "instance_id", "aspect", "prompt", "target", "example"]


def test_example_fields_rebuild_the_prompt_of_their_row(labeled):
    """The encoder critic reads `example`, the LM critic `prompt`: both must be the same judgement."""
    out, _ = labeled
    for split in ("train", "dev"):
        table = read_split(out, split)
        examples = split_examples(table)
        assert [critic_prompt(ex) for ex in examples] == table.column("prompt").to_pylist()
        assert [ex.aspect.value for ex in examples] == table.column("aspect").to_pylist()
        # every aspect's judged fields are there, not just the instruction
        by_aspect = {ex.aspect: ex for ex in examples}
        assert set(by_aspect) == set(Aspect)
        assert by_aspect[Aspect.IS_SUP].evidence and by_aspect[Aspect.IS_SUP].output
        assert by_aspect[Aspect.IS_USE].output and not by_aspect[Aspect.IS_USE].evidence


def test_every_aspect_is_sampled_with_a_mix_of_labels(labeled):
    out, stats = labeled
    rows = _rows(out, "train") + _rows(out, "dev")
    for aspect in Aspect:
        targets = [r["target"] for r in rows if r["aspect"] == aspect.value]
        assert len(targets) == 60
        assert set(targets) <= set(ASPECT_LABELS[aspect])
        assert len(set(targets)) >= 2, aspect
    assert len({r["id"] for r in rows}) == len(rows)


def test_labels_follow_the_ground_truth_when_the_teacher_is_noiseless(labeled, world_dir):
    out, _ = labeled
    instances = _world(world_dir, "instances")
    for row in _rows(out, "train") + _rows(out, "dev"):
        instance_id, aspect, sentence, passage = row["id"].split("|")
        meta = json.loads(instances[instance_id]["meta"])
        if aspect == "retrieve_input":
            assert row["target"] == (tokens.RETRIEVAL if meta["needs_retrieval"] else tokens.NO_RETRIEVAL)
        elif aspect == "is_rel":
            assert (row["target"] == tokens.RELEVANT) == (passage in meta["relevant_passages"])
        elif aspect == "is_sup":
            level = meta["sentences"][int(sentence)]["support"].get(passage)
            assert (row["target"] == tokens.NO_SUPPORT) == (level is None)
        elif aspect == "is_use":
            assert row["target"] == f"[Utility:{meta['utility']}]"


def test_prompts_carry_the_instance_and_the_evidence_passage(labeled, world_dir):
    out, _ = labeled
    instances, passages = _world(world_dir, "instances"), _world(world_dir, "passages")
    for row in _rows(out, "train"):
        instance_id, aspect, _, passage = row["id"].split("|")
        assert row["prompt"].startswith("### Instruction:\n") and row["prompt"].endswith("### Response:\n")
        assert instances[instance_id]["instruction"] in row["prompt"]
        if aspect in ("retrieve", "is_rel", "is_sup"):
            p = passages[passage]
            assert f"{p['title']}\n{p['text']}" in row["prompt"]
        else:
            assert passage == "-"


def test_sentence_aspects_show_the_preceding_sentences_and_is_rel_shows_none(labeled, world_dir):
    out, _ = labeled
    instances = _world(world_dir, "instances")
    seen_preceding = False
    for row in _rows(out, "train") + _rows(out, "dev"):
        instance_id, aspect, sentence, _ = row["id"].split("|")
        if aspect == "is_rel":
            assert sentence == "-" and "Preceding sentences:" not in row["prompt"]
        elif aspect in ("retrieve", "is_sup"):
            texts = [x["text"] for x in json.loads(instances[instance_id]["meta"])["sentences"]]
            k = int(sentence)
            assert f"Output: {texts[k]}" in row["prompt"]
            if k > 0:
                assert f"Preceding sentences: {' '.join(texts[:k])}" in row["prompt"]
                seen_preceding = True
    assert seen_preceding


def test_no_instance_is_in_both_splits(labeled):
    out, stats = labeled
    train = {r["instance_id"] for r in _rows(out, "train")}
    dev = {r["instance_id"] for r in _rows(out, "dev")}
    assert train and dev and not train & dev
    assert stats["dev"] == len(_rows(out, "dev")) and stats["train"] == len(_rows(out, "train"))


def test_stats_count_labels_and_splits_per_aspect(labeled):
    out, stats = labeled
    rows = _rows(out, "train") + _rows(out, "dev")
    for aspect, s in stats["aspects"].items():
        mine = [r for r in rows if r["aspect"] == aspect]
        assert s["labeled"] == len(mine) == s["train"] + s["dev"] == sum(s["labels"].values())
        assert s["labels"] == {t: sum(r["target"] == t for r in mine) for t in s["labels"]}
        assert s["discarded"] == 0 and s["failed"] == 0


def test_a_finished_folder_is_skipped_on_rerun(labeled, world_dir):
    out, stats = labeled
    before = (out / "train" / "part-00000.parquet").stat().st_mtime_ns
    again = run_label(_cfg(world_dir, out))
    assert again == {**stats, "skipped": True}
    assert (out / "train" / "part-00000.parquet").stat().st_mtime_ns == before


def test_same_config_gives_the_same_data_set(labeled, world_dir, tmp_path):
    out, _ = labeled
    run_label(_cfg(world_dir, tmp_path))
    for split in ("train", "dev"):
        assert pq.read_table(tmp_path / split).equals(pq.read_table(out / split))


def test_aspect_sizes_override_per_aspect(world_dir, tmp_path):
    stats = run_label(_cfg(world_dir, tmp_path, per_aspect=10, aspect_sizes={"is_use": 0, "is_rel": 25}))
    assert sorted(stats["aspects"]) == ["is_rel", "is_sup", "retrieve", "retrieve_input"]
    assert stats["aspects"]["is_rel"]["labeled"] == 25 and stats["aspects"]["is_sup"]["labeled"] == 10


def test_an_evidence_aspect_asked_for_more_than_the_instances_takes_a_second_passage_from_each(world_dir, tmp_path):
    n_instances = len(_world(world_dir, "instances"))
    sizes = {"is_rel": 2 * n_instances, "is_use": 2 * n_instances, "retrieve_input": 0, "retrieve": 0, "is_sup": 0}
    stats = run_label(_cfg(world_dir, tmp_path, aspect_sizes=sizes))
    rows = _rows(tmp_path, "train") + _rows(tmp_path, "dev")
    is_rel = [r for r in rows if r["aspect"] == "is_rel"]
    per_instance = Counter(r["instance_id"] for r in is_rel)
    assert len(is_rel) > 1.5 * n_instances and max(per_instance.values()) >= 2
    assert len({r["id"] for r in is_rel}) == len(is_rel)              # never the same passage twice
    assert sum(stats["aspects"]["is_rel"]["evidence"].values()) == len(is_rel)
    # an instance-level judgement has nothing new to draw: one per instance
    assert stats["aspects"]["is_use"]["labeled"] == n_instances


def test_swapped_outputs_pair_a_question_with_another_answer_about_its_subject_in_train_only(labeled, world_dir,
                                                                                                 tmp_path):
    out, _ = labeled
    stats = run_label(_cfg(world_dir, tmp_path, is_use_swapped_outputs=5))
    instances = _world(world_dir, "instances")
    swapped = [r for r in _rows(tmp_path, "train") if r["id"].count("|") == 4]
    assert len(swapped) == stats["aspects"]["is_use"]["swapped_outputs"] == 5
    assert len({r["id"] for r in swapped}) == 5
    for row in swapped:
        question, donor = instances[row["instance_id"]], instances[row["id"].rsplit("|", 1)[1]]
        q_meta, d_meta = json.loads(question["meta"]), json.loads(donor["meta"])
        assert row["example"]["output"] == donor["output"] and donor["id"] != question["id"]
        assert row["example"]["instruction"] == question["instruction"]
        assert q_meta["entity_id"] == d_meta["entity_id"] and q_meta["answer"] != d_meta["answer"]
        assert question["output"] != donor["output"] and q_meta["answer"] not in donor["output"]
        assert row["target"] == "[Utility:2]"                  # the noiseless teacher: true, but no answer
    # dev keeps the sample's mix: the same rows as without the swapped outputs
    assert pq.read_table(tmp_path / "dev").equals(pq.read_table(out / "dev"))
    assert stats["aspects"]["is_use"]["train"] == labeled[1]["aspects"]["is_use"]["train"] + 5


def _is_rel_evidence(world_dir: Path, out: Path, **label) -> dict[str, int]:
    sizes = {"retrieve_input": 0, "retrieve": 0, "is_sup": 0, "is_use": 0, "is_rel": 300}
    stats = run_label(_cfg(world_dir, out, gt_evidence_fraction=0.0, aspect_sizes=sizes, **label))
    return stats["aspects"]["is_rel"]["evidence"]


def test_evidence_weights_set_the_odds_of_the_negative_kinds(world_dir, tmp_path):
    uniform = _is_rel_evidence(world_dir, tmp_path / "uniform")
    same = _is_rel_evidence(world_dir, tmp_path / "same", evidence_weights={"same_title": 20.0})
    assert same["same_title"] > 1.5 * uniform["same_title"]  # 1/2 or 1/3 of the draws -> 20/21 or 20/22
    assert same["random"] < uniform["random"]
    none = _is_rel_evidence(world_dir, tmp_path / "none", evidence_weights={"same_title": 0.0})
    assert "same_title" not in none and sum(none.values()) == sum(uniform.values())


@pytest.mark.parametrize("label, key", [({"evidence_weights": {"same_titel": 2.0}}, "same_titel"),
                                        ({"aspect_sizes": {"isrel": 10}}, "isrel"),
                                        ({"evidence_weights": {k: 0.0 for k in NEGATIVE_KINDS}}, "more than 0")])
def test_a_misspelt_or_empty_sampling_key_is_refused(label, key):
    with pytest.raises(ValidationError, match=key):
        RaypipeConfig.model_validate({"label": label})


# --- hand-made inputs ----------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


PASSAGES = [{"id": "p1", "title": "Ada Harlow", "text": "Ada Harlow is a painter. She lives in Oslo."},
            {"id": "p2", "title": "Ada Harlowe", "text": "Ada Harlowe is a chemist."}]


def _instance(i: str, output: str, sentences: list[str], **meta) -> dict:
    truth = [{"text": s, "needs_retrieval": True, "support": {"p1": "full"}} for s in sentences]
    meta = {"needs_retrieval": True, "sentences": truth, "relevant_passages": ["p1"], "utility": 5, **meta}
    return {"id": i, "instruction": "Tell me about Ada Harlow.", "input": "", "output": output, "meta": meta}


def test_sentences_that_disagree_with_the_ground_truth_are_rejected_with_a_reason(tmp_path):
    world = tmp_path / "world"
    _write_jsonl(world / "passages" / "p.jsonl", PASSAGES)
    _write_jsonl(world / "instances" / "i.jsonl", [
        _instance("good", "Ada Harlow is a painter. She lives in Oslo.",
                  ["Ada Harlow is a painter.", "She lives in Oslo."]),
        _instance("bad", "Ada Harlow is a painter. She lives in Oslo.", ["Ada Harlow is a painter in Oslo."]),
    ])
    out = tmp_path / "out"
    stats = run_label(_cfg(world, out, aspect_sizes={"retrieve_input": 0, "is_use": 0, "is_rel": 0}))
    assert stats["sampling_rejects"] == {"sentence_mismatch": 1}
    rejects = [json.loads(x) for x in (out / "rejects" / "sampling.rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["reason"]) for r in rejects] == [("bad", "sentence_mismatch")]
    rows = _rows(out, "train") + _rows(out, "dev")
    assert {r["instance_id"] for r in rows} == {"good"}


def test_missing_ground_truth_for_the_oracle_names_the_row_and_field(tmp_path):
    world = tmp_path / "world"
    _write_jsonl(world / "passages" / "p.jsonl", PASSAGES)
    row = _instance("no-utility", "Ada Harlow is a painter.", ["Ada Harlow is a painter."])
    del row["meta"]["utility"]
    _write_jsonl(world / "instances" / "i.jsonl", [row])
    with pytest.raises(DataError) as err:
        run_label(_cfg(world, tmp_path / "out"))
    assert err.value.row_id == "no-utility" and err.value.field == "meta.utility"
    assert not (tmp_path / "out" / "_SUCCESS").exists()


class _StubRetriever:
    """Every query's nearest passages are the same two (unrelated) ones; records what it was asked."""

    def __init__(self, hits: list[str]):
        from raypipe.retrieval.types import Passage

        self.hits = [Passage(id=pid, title="t", text="x", score=1.0) for pid in hits]
        self.asked: list[tuple[list[str], int]] = []

    def search(self, queries: list[str], k: int):
        self.asked.append((queries, k))
        return [self.hits[:k] for _ in queries]


def test_retrieved_evidence_draws_negatives_from_each_instances_neighbours(world_dir, tmp_path, monkeypatch):
    import raypipe.retrieval.retriever

    passages = _world(world_dir, "passages")
    instances = _world(world_dir, "instances")
    neighbours = sorted(passages)[:2]
    stub = _StubRetriever(neighbours)
    monkeypatch.setattr(raypipe.retrieval.retriever, "load_retriever", lambda cfg: stub)
    label = {"aspect_sizes": {"retrieve_input": 0, "is_use": 0, "retrieve": 0, "is_sup": 0}, "per_aspect": 120,
             "gt_evidence_fraction": 0.0}
    stats = run_label(_cfg(world_dir, tmp_path / "with", retrieved_evidence_k=2, **label))
    (queries, k), = stub.asked
    assert k == 2 and len(queries) == len(instances)
    first = next(iter(instances.values()))
    expected = "\n".join(x for x in (first["instruction"], first["input"], first["output"]) if x)
    assert expected in queries
    kinds = stats["aspects"]["is_rel"]["evidence"]
    used = [r for split in ("train", "dev") for r in _rows(tmp_path / "with", split)
            if r["aspect"] == "is_rel" and r["id"].rsplit("|", 1)[1] in neighbours]
    assert kinds.get("retrieved", 0) > 10 and len(used) >= kinds["retrieved"]
    # without it, the same two passages are only the random pool's rare draws
    off = run_label(_cfg(world_dir, tmp_path / "without", **label))
    assert "retrieved" not in off["aspects"]["is_rel"]["evidence"]
    rare = [r for split in ("train", "dev") for r in _rows(tmp_path / "without", split)
            if r["aspect"] == "is_rel" and r["id"].rsplit("|", 1)[1] in neighbours]
    assert len(rare) < kinds["retrieved"] / 4
