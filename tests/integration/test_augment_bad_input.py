"""`raypipe augment` on Ray Data with corrupted shards (issue 18): a row of invalid UTF-8, a bad row
repeating a good row's id and an over-long output each go to rejects/ with file, row and reason,
and the job goes on. Algorithm 3's model steps are left out (no critic, no index): what is under test
is the read -> validate -> render -> write path where the crash happened, in real Ray Data."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raypipe.augment import pipeline
from raypipe.config import load_config
from raypipe.jobs.augment import run_augment

pytestmark = pytest.mark.slow


def _row(row_id: str, output: bytes) -> dict:
    return {"id": row_id, "instruction": f"Question {row_id}?", "input": "", "output": output,
            "task": "qa", "dataset": "world", "meta": "{}"}


@pytest.fixture
def bad_shards(tmp_path):
    rows = [_row("g1", b"One."), _row("g2", b"Two."), _row("u1", b"Caf\xe9 bad bytes."),
            _row("g3", b"Three."), _row("g2", b""), _row("long", b"x" * 2000), _row("g4", b"Four.")]
    columns = {name: [r[name] for r in rows] for name in rows[0]}
    # the output column holds raw bytes viewed as strings, as a non-validating writer leaves them
    columns["output"] = pa.array(columns["output"], type=pa.binary()).view(pa.string())
    folder = tmp_path / "instances"
    folder.mkdir()
    pq.write_table(pa.table(columns), folder / "part-a.parquet")
    pq.write_table(pa.table({k: [v] for k, v in _row("g5", "Five.").items()}), folder / "part-b.parquet")
    return folder


def test_corrupted_rows_go_to_rejects_and_the_job_goes_on(bad_shards, tmp_path, ray_cluster, monkeypatch):
    monkeypatch.setattr(pipeline, "algorithm_steps", lambda *args, **kwargs: [])
    out = tmp_path / "gen"
    cfg = load_config(None, [f"augment.instances={bad_shards}", f"augment.out_dir={out}", "augment.batch_size=4",
                             "augment.sampling.drop_no_retrieval=0", "limits.max_output_chars=1000"])
    stats = run_augment(cfg)

    rejects = [json.loads(x) for x in (out / "rejects" / "part-a.rejects.jsonl").read_text().split("\n") if x]
    source = str(bad_shards / "part-a.parquet")
    assert [(r["file"], r["row"], r["id"], r["reason"], r["field"]) for r in rejects] == [
        (source, 3, "u1", "invalid_utf8", "output"),
        (source, 5, "g2", "empty_output", "output"),
        (source, 6, "long", "too_long", "output"),
    ]
    assert rejects[2]["detail"] == "'output' has 2,000 characters (limit 1,000)"
    kept = pq.read_table(out / "data" / "part-a.parquet").column("id").to_pylist()
    assert kept == ["g1", "g2", "g3", "g4"]  # g2 survives its bad namesake
    assert pq.read_table(out / "data" / "part-b.parquet").column("id").to_pylist() == ["g5"]
    assert stats["rejects"] == {"invalid_utf8": 1, "empty_output": 1, "too_long": 1}
    assert stats["row_counts"]["input"] == 8 and stats["row_counts"]["rejected"] == 3


def test_a_jsonl_shard_in_the_input_folder_stops_the_job_before_any_work(bad_shards, tmp_path):
    (bad_shards / "extra.jsonl").write_text(json.dumps({"id": "j1", "instruction": "q", "output": "a"}) + "\n")
    cfg = load_config(None, [f"augment.instances={bad_shards}", f"augment.out_dir={tmp_path / 'gen'}"])
    with pytest.raises(pipeline.DataError, match=r"parquet shards only.*extra\.jsonl"):
        run_augment(cfg)
    assert not (tmp_path / "gen" / "data").exists()
