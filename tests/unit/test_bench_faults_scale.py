"""benchmarks/faults_scale.py's figures: the digest that decides `identical`, and the summary of pairs."""

from __future__ import annotations

import pytest

from benchmarks.faults_scale import output_digest, summarize


def _output(root, files: dict[str, bytes]):
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_the_digest_changes_with_a_byte_or_a_name_and_ignores_other_folders(tmp_path):
    base = {"data/part-000.parquet": b"rows", "jsonl/part-000.jsonl": b"{}\n"}
    digest = output_digest(_output(tmp_path / "a", base))
    assert output_digest(_output(tmp_path / "b", {**base, "rejects/x.jsonl": b"r", "stats.json": b"{}"})) == digest
    assert output_digest(_output(tmp_path / "c", {**base, "data/part-000.parquet": b"rowz"})) != digest
    renamed = {"data/part-001.parquet": b"rows", "jsonl/part-000.jsonl": b"{}\n"}
    assert output_digest(_output(tmp_path / "d", renamed)) != digest


def _run(kind: str, wall: float, digest: str = "same", lost: int = 0, dup: int = 0, recovery: float | None = None):
    return {"run": kind, "wall_s": wall, "digest": digest, "rows_out": 100 - lost + dup, "lost": lost,
            "duplicates": dup, "recovery_s": recovery}


def test_the_summary_takes_medians_over_pairs_and_sums_what_went_wrong():
    pairs = [(_run("clean", 100), _run("faulted", 110, recovery=8)),
             (_run("clean", 200), _run("faulted", 260, lost=2, dup=1, recovery=20))]
    s = summarize(pairs, 100)
    assert s["overhead"] == pytest.approx((0.10 + 0.30) / 2)
    assert (s["wall_s_clean"], s["wall_s_faulted"], s["recovery_s"]) == (150, 185, 14)
    assert (s["lost"], s["duplicated"], s["rows_out"], s["identical"]) == (2, 1, 99, True)


def test_one_run_with_other_bytes_makes_the_outputs_not_identical():
    pairs = [(_run("clean", 100), _run("faulted", 110, digest="other", recovery=5))]
    assert summarize(pairs, 100)["identical"] is False
