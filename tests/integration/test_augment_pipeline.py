"""The augmentation job end to end on Ray Data: shards, rejects, stats, skip-on-rerun and resume.

The critic is the untrained tiny model (its labels are arbitrary but well-formed), the retriever a
small Flat index over the world's passages: what is tested is the pipeline's bookkeeping, not the
quality of the labels.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raypipe import tokens as T
from raypipe.augment import pipeline
from raypipe.config import load_config
from raypipe.jobs.augment import run_augment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_inputs(tmp_path_factory, world_dir) -> Path:
    """Two clean shards of 12 instances, and a third with an empty output and a duplicate id."""
    rows = pq.read_table(world_dir / "instances").to_pylist()
    out = tmp_path_factory.mktemp("instances")
    pq.write_table(pa.Table.from_pylist(rows[:12]), out / "part-a.parquet")
    pq.write_table(pa.Table.from_pylist(rows[12:24]), out / "part-b.parquet")
    bad = rows[24:30] + [dict(rows[30], output=""), dict(rows[31], id=rows[0]["id"])]
    pq.write_table(pa.Table.from_pylist(bad), out / "part-c.parquet")
    return out


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, world_dir, ray_cluster) -> Path:
    from raypipe.jobs.index import run_build_index

    out = tmp_path_factory.mktemp("index")
    cfg = load_config(None, [f"retrieval.index.passages={world_dir / 'passages'}",
                             f"retrieval.index.out_dir={out}"])
    run_build_index(cfg)
    return out


def _cfg(small_inputs, index_dir, tiny_model_dir, world_dir, out):
    return load_config(None, [
        f"augment.instances={small_inputs}", f"augment.critic={tiny_model_dir}", f"augment.out_dir={out}",
        "augment.critic_engine=vllm",  # the byte-identical resume below holds on vLLM's fp32 (and on HF's)
        # one fused worker: each holds a vLLM engine (~25 s to start); workers side by side are the
        # cluster tests' subject (tests/cluster_faults.py), on HF
        "augment.workers=1",
        "retrieval.top_k=2", "augment.batch_size=8", "augment.sampling.drop_no_retrieval=0.5",
        f"retrieval.index.passages={world_dir / 'passages'}", f"retrieval.index.out_dir={index_dir}",
    ])


def _read(out: Path) -> dict[str, bytes]:
    return {f"{d}/{f.name}": f.read_bytes() for d in ("data", "jsonl") for f in sorted((out / d).glob("*"))}


def test_augment_writes_valid_shards_rejects_and_resumes(small_inputs, index_dir, tiny_model_dir, world_dir,
                                                         tmp_path, ray_cluster, monkeypatch, caplog):
    out = tmp_path / "gen"
    cfg = _cfg(small_inputs, index_dir, tiny_model_dir, world_dir, out)
    caplog.set_level(logging.INFO, logger="raypipe.progress")
    stats = run_augment(cfg)
    # stderr is not a terminal here: the pass says how far it is, up to its last row
    assert [r.getMessage().split(",")[0] for r in caplog.records if r.name == "raypipe.progress"][-1] == \
        "augment: 32 of 32 (100%)"

    # one output shard (parquet + jsonl) per input shard
    assert sorted(f.name for f in (out / "data").glob("*.parquet")) == [
        "part-a.parquet", "part-b.parquet", "part-c.parquet"]
    assert stats["instances_processed"] == 32
    rows = [json.loads(line) for f in sorted((out / "jsonl").glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert rows and set(rows[0]) == {"id", "instruction", "input", "output", "dataset"}
    inputs: dict[str, dict] = {}
    for r in pq.read_table(small_inputs).to_pylist():
        inputs.setdefault(r["id"], r)  # the first occurrence of the duplicated id is the one kept
    for r in rows:
        parsed = T.parse(r["output"])  # every output is valid under the token grammar
        assert parsed.utility is not None
        source = inputs[r["id"].split("#")[0]]
        assert T.strip_reflection(r["output"]) == source["output"]  # the original output survives
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))

    # the two bad rows are in rejects with their reasons; nothing else went missing
    rejects = [json.loads(x) for x in (out / "rejects" / "part-c.rejects.jsonl").read_text().splitlines()]
    assert sorted(r["reason"].split(":")[0] for r in rejects) == ["duplicate_id", "empty_output"]
    assert stats["rejects"] == {"duplicate_id": 1, "empty_output": 1}
    counts = stats["row_counts"]
    assert counts["kept"] + counts["dropped_by_sampling"] + counts["rejected"] == 32
    assert counts["kept"] == len({i.split("#")[0] for i in ids})
    assert counts["written"] == len(ids)
    assert set(stats["retrieve_yes_share"]) <= {r["dataset"] for r in inputs.values()}

    # a rerun skips every finished shard and changes nothing
    first = _read(out)
    again = run_augment(cfg)
    assert again["shards_skipped"] == 3 and again["instances_processed"] == 0
    assert _read(out) == first

    # crash after the first shard is written, then rerun in the staged layout (one actor pool per model
    # stage, as on a GPU cluster; the layout decides how fast rows are made, not what they hold, so a
    # rerun may change it): the crashed run's shard is kept, the rest written, the same bytes as the
    # uninterrupted fused run, no duplicates
    out2 = tmp_path / "gen2"
    cfg2 = _cfg(small_inputs, index_dir, tiny_model_dir, world_dir, out2)
    real_flush = pipeline.ShardWriter.flush

    def crash_after_first(self, src):
        if self.written:
            raise RuntimeError("injected crash")
        real_flush(self, src)

    monkeypatch.setattr(pipeline.ShardWriter, "flush", crash_after_first)
    with pytest.raises(RuntimeError, match="injected crash"):
        run_augment(cfg2)
    assert len(list((out2 / "data").glob("*.parquet"))) == 1
    monkeypatch.setattr(pipeline.ShardWriter, "flush", real_flush)
    cfg2.augment.layout = "staged"
    resumed = run_augment(cfg2)
    assert resumed["shards_skipped"] == 1 and resumed["shards_written"] == 2
    assert _read(out2) == first
