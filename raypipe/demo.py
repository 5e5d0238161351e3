"""`raypipe demo`: the whole system on the embedded defaults, end to end.

Each stage is an ordinary job function run in order on one config, with a short "show" step that
prints what the stage made (a few retrievals, the critic's agreement table, augmented outputs, the
eval table, served answers). Finished stages are skipped on a rerun (their outputs carry `_SUCCESS`
markers), so `make demo` is idempotent. Sized to finish on a 2-core laptop in under 20 minutes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from raypipe.config import RaypipeConfig

logger = logging.getLogger(__name__)
console = Console()

Stage = Callable[[RaypipeConfig], dict[str, Any]]


def _web_index(cfg: RaypipeConfig) -> dict[str, Any]:
    """The separate "web" corpus index that CRAG's fallback search reads."""
    from raypipe.retrieval.build import run_build_index

    web = cfg.model_copy(deep=True)
    web.retrieval.index.passages = str(Path(cfg.world.out_dir) / "web" / "passages")
    web.retrieval.index.out_dir = cfg.retrieval.fallback.index_dir or str(Path(cfg.retrieval.index.out_dir).parent / "web_index")
    return run_build_index(web)


def _heldout_questions(cfg: RaypipeConfig, n: int) -> list[str]:
    path = Path(cfg.world.out_dir) / "eval" / "heldout_qa.jsonl"
    return [json.loads(line)["question"] for line in path.read_text().splitlines()[:n]]


def _show_retrievals(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.retrieval.retriever import run_search

    return run_search(cfg, _heldout_questions(cfg, 3))


def _show_agreement(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.critic.agreement import agreement_report

    report = agreement_report(cfg.training.critic.out_dir, cfg.label.out_dir,
                              out_path=Path(cfg.training.critic.out_dir) / "agreement.json")
    return {"dev examples": report["n"], "accuracy": report["accuracy"]}


def _show_augmented(cfg: RaypipeConfig) -> dict[str, Any]:
    shards = sorted((Path(cfg.augment.out_dir) / "jsonl").glob("*.jsonl"))
    rows = [json.loads(line) for line in shards[0].read_text().splitlines()] if shards else []
    for kind, pick in (("with retrieval", lambda r: "[Retrieval]" in r["output"]),
                       ("without retrieval", lambda r: "[Retrieval]" not in r["output"])):
        row = next((r for r in rows if pick(r)), None)
        if row:
            console.rule(f"augmented output {kind} ({row['dataset']})")
            console.print(f"[bold]{row['instruction']}[/bold] {row['input']}", markup=True)
            console.print(row["output"], markup=False)
    return {}


def _show_eval(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.eval.report import print_report

    print_report(cfg.eval.out_dir)
    return {}


def _train(which: str) -> Stage:
    def stage(cfg: RaypipeConfig) -> dict[str, Any]:
        from raypipe.training.trainer import run_train

        return run_train(cfg, which)

    return stage


def stages() -> list[tuple[str, Stage]]:
    from raypipe.augment.pipeline import run_augment
    from raypipe.critic.dataset import run_label
    from raypipe.data.world import run_synth
    from raypipe.eval.runner import run_eval
    from raypipe.models.build_job import run_build_models
    from raypipe.retrieval.build import run_build_index
    from raypipe.serving.demo import run_serve_demo

    return [
        ("synthetic world", run_synth),
        ("tiny base model", run_build_models),
        ("passage index", run_build_index),
        ("web index (CRAG fallback)", _web_index),
        ("retrieval examples", _show_retrievals),
        ("critic data set (oracle teacher)", run_label),
        ("critic training", _train("critic")),
        ("critic agreement", _show_agreement),
        ("corpus augmentation", run_augment),
        ("augmented examples", _show_augmented),
        ("generator training", _train("generator")),
        ("evaluation", run_eval),
        ("eval report", _show_eval),
        ("serving", run_serve_demo),
    ]


def run_demo(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.cli import print_summary
    from raypipe.runtime import ensure_ray

    ensure_ray(cfg.ray)
    times: dict[str, str] = {}
    total = time.perf_counter()
    for name, stage in stages():
        start = time.perf_counter()
        console.rule(f"[bold]demo: {name}")
        stats = stage(cfg)
        if stats:
            print_summary(f"demo: {name}", stats)
        times[name] = f"{time.perf_counter() - start:.1f} s"
    times["total"] = f"{time.perf_counter() - total:.1f} s"
    return {"stage times": times}
