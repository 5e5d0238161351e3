"""`raypipe crag train-evaluator` end to end on the session's world (CRAG §4.2, App. B.3): pairs from the
world's ground truth, a MiniLM cross-encoder regressed to +1 / -1 on Ray Train, the exported folder,
the held-out report (Table 4's accuracy with its confusion matrix), and a rerun that resumes from the
run's checkpoint instead of starting over."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from raypipe.config import RaypipeConfig
from raypipe.data.io import list_data_files
from raypipe.jobs.evaluator import run_train_evaluator
from raypipe.prompts import as_document
from raypipe.retrieval.cross_encoder import CrossEncoderRetrievalEvaluator
from raypipe.settings.crag_tools import CRAGConfig, EvaluatorTrainConfig
from raypipe.settings.data import WorldConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.training.classifier import steps_per_epoch
from raypipe.training.finished import SUCCESS
from tests.cluster_faults import flat_index

pytestmark = pytest.mark.slow


def _config(world_dir: Path, work: Path, retrieval: RetrievalConfig, epochs: float) -> RaypipeConfig:
    train = EvaluatorTrainConfig(data_dir=str(work / "pairs"), out_dir=str(work / "evaluator"), questions=24,
                                 retrieve_k=5, negatives=2, epochs=epochs, batch_size=8, max_length=48, lr=1e-4,
                                 checkpoint_every=3, keep_checkpoints=5,
                                 keep_checkpoints_after_export=True)  # the resume below starts from them
    return RaypipeConfig(world=WorldConfig(out_dir=str(world_dir)), retrieval=retrieval, crag=CRAGConfig(train=train))


def test_train_evaluator_exports_a_scorer_reports_heldout_accuracy_and_resumes(ray_cluster, world_dir, tmp_path):
    retrieval = flat_index(list_data_files(world_dir / "passages")[0], tmp_path / "index", top_k=5)
    first = run_train_evaluator(_config(world_dir, tmp_path, retrieval, epochs=1.0))
    out = tmp_path / "evaluator"
    train_rows = pq.read_table(tmp_path / "pairs" / "train.parquet").num_rows
    per_epoch = steps_per_epoch(train_rows, 1, 8)
    assert first["steps"] == per_epoch and first["resumed_from_step"] is None
    assert first["pairs_train"] == train_rows and (out / SUCCESS).exists()

    # the report scores every held-out pair once, and its matrix adds up to them
    report = json.loads((out / "report.json").read_text())
    heldout = pq.read_table(tmp_path / "pairs" / "heldout.parquet").to_pylist()
    matrix = report["confusion"]
    assert report["n"] == len(heldout) == sum(v for row in matrix.values() for v in row.values())
    assert sum(matrix["relevant"].values()) == sum(r["label"] > 0 for r in heldout)

    # the exported folder is a scorer in [-1, 1], and training moved it towards the labels: on the
    # training pairs the positives now score above the negatives
    evaluator = CrossEncoderRetrievalEvaluator(out, max_length=48)
    rows = pq.read_table(tmp_path / "pairs" / "train.parquet").to_pylist()
    scores = evaluator.score([(r["query"], as_document(r["title"], r["text"])) for r in rows])
    assert all(-1.0 <= s <= 1.0 for s in scores)
    pos = [s for s, r in zip(scores, rows, strict=True) if r["label"] > 0]
    neg = [s for s, r in zip(scores, rows, strict=True) if r["label"] < 0]
    assert sum(pos) / len(pos) > sum(neg) / len(neg)

    # a finished folder is skipped; with it cleared and more epochs asked, the run resumes from its
    # last checkpoint (the finished step) instead of starting over
    assert run_train_evaluator(_config(world_dir, tmp_path, retrieval, epochs=1.0))["skipped"]
    (out / SUCCESS).unlink()
    second = run_train_evaluator(_config(world_dir, tmp_path, retrieval, epochs=2.0))
    assert second["resumed_from_step"] == per_epoch and second["steps"] == 2 * per_epoch
