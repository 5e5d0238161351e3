"""CRAG's retrieval evaluator, trained by `raypipe crag train-evaluator` (raypipe.jobs.evaluator): data
from the world, the cross-encoder on Ray Train, the held-out report (CRAG §4.2, §5.5 Table 4, App. B.3).

Layout under `crag.train.out_dir` (the conventions of `raypipe train`)::

    config.json, model.safetensors, tokenizer files, evaluator.json   the evaluator, an HF folder
    report.json                 held-out accuracy, confusion matrix, score distribution
    train_stats.json, _SUCCESS  written last; a rerun with _SUCCESS does nothing
    checkpoints/evaluator/      Ray Train run storage: model + optimizer + position, every
                                `checkpoint_every` steps; an interrupted run resumes from the latest

The run is a small classifier, as the encoder critic is (`raypipe.training.classifier`, through the one
worker loop and harness every Ray Train job shares); what is the evaluator's own is its data, its model and loss
(`raypipe.evaluator_training.task`) and the manifest beside the export.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from raypipe.disk import write_text
from raypipe.errors import ConfigError
from raypipe.evaluator_training.data import write_pairs
from raypipe.evaluator_training.report import report
from raypipe.evaluator_training.task import EvaluatorTask
from raypipe.retrieval.cross_encoder import MANIFEST, OUTPUT, CrossEncoderRetrievalEvaluator
from raypipe.settings.cluster import RayConfig
from raypipe.settings.crag_tools import EvaluatorConfig, EvaluatorTrainConfig
from raypipe.settings.data import WorldConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.training.classifier import ClassifierRun, fit_classifier
from raypipe.training.finished import finished_summary, mark_finished

logger = logging.getLogger(__name__)

REPORT_FILE = "report.json"
_RUN_NAME = "evaluator"


def _base_model(tc: EvaluatorTrainConfig) -> str:
    from raypipe.models import minilm_path

    return str(Path(tc.base_model).resolve()) if tc.base_model else str(minilm_path())


def fit(tc: EvaluatorTrainConfig, base_model: str, data: Path, out: Path) -> dict[str, Any]:
    """Train on Ray Train and export the evaluator folder to `out`."""
    run = ClassifierRun(name=_RUN_NAME, epochs=tc.epochs, lr=tc.lr, batch_size=tc.batch_size,
                        warmup_ratio=tc.warmup_ratio, weight_decay=tc.weight_decay,
                        checkpoint_every=tc.checkpoint_every, seed=tc.seed, precision=tc.precision)
    trained = fit_classifier(EvaluatorTask(tc.max_length), run, tc, base_model, data, out)
    write_text(out / MANIFEST, json.dumps({"kind": "crag-retrieval-evaluator", "output": OUTPUT,
                                           "base_model": base_model, "max_length": tc.max_length}, indent=2) + "\n")
    return trained


def train_evaluator(tc: EvaluatorTrainConfig, world: WorldConfig, retrieval: RetrievalConfig, scorer: EvaluatorConfig,
                    upper: float, lower: float, ray_cfg: RayConfig) -> dict[str, Any]:
    """Build the pairs from `world` and `retrieval`'s index (unless `tc.data_dir` holds them for these
    settings), train on the Ray instance `ray_cfg` names, report the held-out accuracy at CRAG's
    `upper` / `lower` thresholds, read with the decode-time `scorer` settings."""
    from raypipe.retrieval import load_retriever
    from raypipe.runtime import ensure_ray

    out, data = Path(tc.out_dir).resolve(), Path(tc.data_dir).resolve()
    if (done := finished_summary(out)) is not None:
        return done
    if not (Path(world.out_dir) / "_SUCCESS").exists():
        raise ConfigError(f"world.out_dir: no finished world at {world.out_dir} (run `raypipe data synth`)")
    base = _base_model(tc)
    start = time.perf_counter()
    stamp = {"world": world.model_dump(exclude={"out_dir"}), "train": tc.model_dump(
        include={"questions", "retrieve_k", "negatives", "claim_fraction", "heldout_fraction", "seed"})}
    stats_path = data / "stats.json"
    if stats_path.is_file() and json.loads(stats_path.read_text()).get("stamp") == stamp:
        data_stats = json.loads(stats_path.read_text())
        logger.info("reusing the evaluator pairs in %s", data)
    else:
        data_stats = write_pairs(world, load_retriever(retrieval),
                                 tc.model_copy(update={"data_dir": str(data)}))
        data_stats["stamp"] = stamp
        write_text(stats_path, json.dumps(data_stats, indent=2) + "\n")
    ensure_ray(ray_cfg)
    trained = fit(tc, base, data / "train.parquet", out)
    evaluator = CrossEncoderRetrievalEvaluator(out, batch_size=scorer.batch_size, max_length=tc.max_length)
    rep = report(evaluator, data / "heldout.parquet", upper, lower)
    write_text(out / REPORT_FILE, json.dumps(rep, indent=2) + "\n")
    summary = {"evaluator": str(out), "base_model": base, "pairs_train": data_stats["train"]["pairs"],
               "pairs_heldout": data_stats["heldout"]["pairs"], "steps": trained.get("steps"),
               "final_loss": trained.get("final_loss"), "resumed_from_step": trained.get("resumed_from_step"),
               "heldout_accuracy": rep["accuracy"], "confusion": rep["confusion"],
               "seconds": round(time.perf_counter() - start, 1)}
    mark_finished(out, {"summary": summary, "data": data_stats, "train": trained, "report": rep},
                  keep_checkpoints=tc.keep_checkpoints_after_export)
    return summary
