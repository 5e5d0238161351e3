"""`raypipe demo`: the whole system on one config (by default the demo's, raypipe/demo.yaml), end to end.

Each stage is an ordinary job function run in order on one config, with a short "show" step that
prints what the stage made (a few retrievals, the critic's agreement table, augmented outputs, the
eval table, served answers). Finished stages are skipped on a rerun (their outputs carry `_SUCCESS`
markers), so `make demo` is idempotent. Sized for a 2-core laptop: about an hour there,
most of it the two trainings (docs/results/demo.md).

The terminal gets one compact table per stage (nested stats folded into one row per top-level key;
the full stats are in each stage's output folder), progress bars on a terminal (Ray Data's own; a
step counter with the loss while a model trains) and progress lines elsewhere (`progress_every_s`),
and no worker output: Ray's workers log to the
session folder printed at the start (raypipe.logs). It ends with the eval table and the next steps
(`closing_block`), so the last screen says what came out and what to do with it; the whole output
stays under 300 lines.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table

from raypipe.config import RaypipeConfig
from raypipe.disk import write_text

logger = logging.getLogger(__name__)
console = Console()

Stage = Callable[[RaypipeConfig], dict[str, Any]]


#: what the demo shows of the web index's stats: the passage index's table above has the same rows
WEB_INDEX_SHOWN = ("out_dir", "n_passages", "rows_embedded", "embed_seconds")


def _web_index(cfg: RaypipeConfig) -> dict[str, Any]:
    """The separate "web" corpus index that CRAG's fallback search reads."""
    from raypipe.jobs.index import run_build_index

    web = cfg.model_copy(deep=True)
    web.retrieval.index.passages = str(Path(cfg.world.out_dir) / "web" / "passages")
    web.retrieval.index.out_dir = cfg.retrieval.fallback.index_dir or str(Path(cfg.retrieval.index.out_dir).parent / "web_index")
    stats = run_build_index(web)
    return {key: stats[key] for key in WEB_INDEX_SHOWN if key in stats}


#: `raypipe eval`'s stats the demo prints elsewhere: the closing tables (accuracy, retrieval, CRAG's
#: actions per set) and the COLLAPSE warnings (one answer to nearly every item)
EVAL_SHOWN_ELSEWHERE = ("accuracy", "retrieval_frequency", "CRAG's corrective step (all sets)",
                        "one answer or verdict for (nearly) every item")


def _evaluate(cfg: RaypipeConfig) -> dict[str, Any]:
    """`raypipe eval`, without the stats the demo shows in other places."""
    from raypipe.jobs.eval import run_eval

    return {k: v for k, v in run_eval(cfg).items() if k not in EVAL_SHOWN_ELSEWHERE}


def _label(cfg: RaypipeConfig) -> dict[str, Any]:
    """`raypipe label`, each aspect on one or two lines: its split and its labels' balance (the request
    and sampling counts, equal on the oracle's run, stay in the stage's stats.json)."""
    from raypipe.jobs.label import run_label

    stats = run_label(cfg)
    aspects = {name: {"train": a.get("train"), "dev": a.get("dev"), "failed": a.get("failed"), "labels": a.get("labels")}
               for name, a in stats.get("aspects", {}).items()}
    return {**stats, "aspects": aspects}


def _augment(cfg: RaypipeConfig) -> dict[str, Any]:
    """`raypipe augment`, its collapse check in two short rows: which reflection groups collapsed, and
    each aspect's agreement between D_gen's labels and the teacher's on the relabelled sample."""
    from raypipe.jobs.augment import run_augment

    stats = run_augment(cfg)
    check = stats.get("collapse_check")
    if isinstance(check, dict) and "aspects" in check:
        stats["collapse_check"] = (f"collapsed: {', '.join(check['collapsed']) or 'none'} ({check['teacher']} "
                                   f"teacher, {check['sample_rows']} rows relabelled)")
        stats["D_gen vs teacher"] = ", ".join(f"{name} {100 * a['agreement']:.0f}%" for name, a in check["aspects"].items()
                                              if a.get("agreement") is not None)
    return stats


def _heldout_questions(cfg: RaypipeConfig, n: int) -> list[str]:
    path = Path(cfg.world.out_dir) / "eval" / "heldout_qa.jsonl"
    return [json.loads(line)["question"] for line in path.read_text().splitlines()[:n]]


def _show_retrievals(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.jobs.index import run_search

    return run_search(cfg, _heldout_questions(cfg, 3))


def _show_agreement(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.critic.agreement import agreement_report

    out_path = Path(cfg.training.critic.out_dir) / "agreement.json"
    # the per-aspect confusion matrices (~50 lines) stay in agreement.json
    report = agreement_report(cfg.training.critic.out_dir, cfg.label.out_dir, out_path=out_path, show=False,
                              engine_kind=cfg.augment.critic_engine)
    return {"dev examples": report["n"], "accuracy": f"{100 * report['accuracy']:.1f}%",
            "by aspect": {a: f"{100 * r['accuracy']:.1f}%" for a, r in report["aspects"].items()},
            "confusion matrices": str(out_path)}


#: an augmented example shown is the first of its kind at most this long (about 6 terminal lines; a
#: biography's row runs to 17), else the shortest of its kind
EXAMPLE_CHARS = 450


def _show_augmented(cfg: RaypipeConfig) -> dict[str, Any]:
    shards = sorted((Path(cfg.augment.out_dir) / "jsonl").glob("*.jsonl"))
    rows = [json.loads(line) for line in shards[0].read_text().splitlines()] if shards else []
    for kind, pick in (("with retrieval", lambda r: "[Retrieval]" in r["output"]),
                       ("without retrieval", lambda r: "[Retrieval]" not in r["output"])):
        of_kind = [r for r in rows if pick(r)]
        row = next((r for r in of_kind if len(r["output"]) <= EXAMPLE_CHARS),
                   min(of_kind, key=lambda r: len(r["output"]), default=None))
        if row:
            console.rule(f"augmented output {kind} ({row['dataset']})")
            console.print(f"[bold]{row['instruction']}[/bold] {row['input']}", markup=True)
            console.print(row["output"], markup=False)
    return {}


def _show_answers(cfg: RaypipeConfig) -> dict[str, Any]:
    """One answer per eval set (all are in predictions/); the accuracy table closes the demo."""
    from raypipe.eval.report import answers_block

    block = answers_block(cfg.eval.out_dir, n=1)
    if block is not None:
        console.print(block)
    return {}


def _train(which: str) -> Stage:
    def stage(cfg: RaypipeConfig) -> dict[str, Any]:
        from raypipe.jobs.train import run_train

        return run_train(cfg, which)  # its steps followed on stderr by the job

    return stage


def stage_table(title: str, stats: dict[str, Any], clip: bool = True) -> Table:
    """One row per top-level stat (per second-level one for a dict of dicts); deeper dicts folded
    into `key=value` lists, empty values left out, each cut to MAX_VALUE_CHARS unless `clip` is off.
    Stats are text, not Rich markup: a list-like value (`[factual_qa, ...]`) prints as it is.
    Keeps a stage's table to a handful of lines (the full stats are in the stage's output folder)."""
    table = Table(title=title, show_header=False, title_justify="left", box=None, padding=(0, 1))
    table.add_column("stat", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in stats.items():
        if _empty(value):
            continue
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            for sub, inner in value.items():  # e.g. one row per critic aspect
                if not _empty(inner):
                    table.add_row(escape(f"{key}.{sub}"), escape(_clip(_fold(inner), clip)))
        else:
            table.add_row(escape(str(key)), escape(_clip(_fold(value), clip)))
    return table


#: a value longer than this is cut (two lines of an 80-column terminal): the terminal shows the gist,
#: the stage's stats file holds the rest
MAX_VALUE_CHARS = 110


def _clip(text: str, clip: bool = True) -> str:
    return text if not clip or len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1].rstrip(", ") + "…"


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, dict | list | str) and not value)


def _fold(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fold(v)}" if not isinstance(v, dict) else f"{k}: {{{_fold(v)}}}"
                         for k, v in value.items() if not _empty(v))
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _import_lm(cfg: RaypipeConfig) -> dict[str, Any]:
    """The pretrained LM import (`raypipe models import`), when a model of this run starts from it."""
    from raypipe.jobs.models import run_import_model

    target = Path(cfg.lm_import.out_dir).resolve()
    if all(Path(tc.base_model).resolve() != target for tc in (cfg.training.critic, cfg.training.generator)):
        return {"skipped": f"no model of this run starts from {cfg.lm_import.out_dir}"}
    return run_import_model(cfg)


def _train_evaluator(cfg: RaypipeConfig) -> dict[str, Any]:
    """CRAG's retrieval evaluator (`raypipe crag train-evaluator`), when an evaluated method uses it."""
    from raypipe.jobs.evaluator import run_train_evaluator
    from raypipe.methods import get_method

    if not any("evaluator" in get_method(m).uses(getattr(cfg.methods, m)) for m in cfg.eval.methods):
        return {"skipped": "no evaluated method uses the retrieval evaluator"}
    return run_train_evaluator(cfg)


def stages() -> list[tuple[str, Stage]]:
    from raypipe.jobs.index import run_build_index
    from raypipe.jobs.models import run_build_models
    from raypipe.jobs.serve import run_serve_demo
    from raypipe.jobs.synth import run_synth

    return [
        ("synthetic world", run_synth),
        ("tiny base model", run_build_models),
        ("pretrained LM import (SmolLM2)", _import_lm),
        ("passage index", run_build_index),
        ("web index (CRAG fallback)", _web_index),
        ("retrieval evaluator training (CRAG)", _train_evaluator),
        ("retrieval examples", _show_retrievals),
        ("critic data set (oracle teacher)", _label),
        ("critic training", _train("critic")),
        ("critic agreement", _show_agreement),
        ("corpus augmentation", _augment),
        ("augmented examples", _show_augmented),
        ("generator training", _train("generator")),
        ("evaluation", _evaluate),
        ("held-out answers", _show_answers),
        ("serving", run_serve_demo),
    ]


#: the demo's own clock, in its run folder
TIMES_FILE = "demo_times.json"


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` (links not followed), as `du --apparent-size` counts them."""
    return sum(entry.lstat().st_size for entry in folder.rglob("*") if entry.is_file() and not entry.is_symlink())


def demo_times(stage_seconds: dict[str, float], total_s: float, run_dir: Path | None = None) -> dict[str, Any]:
    """What `TIMES_FILE` holds: seconds per stage (a stage finished by an earlier run takes ~0 s), the
    total, the machine (its CPU kind and cores, without which a time says little), and the disk the
    demo leaves: `run_dir`'s bytes and, run from a virtual environment, that environment's."""
    from raypipe.models.device import cpu_kind

    clock: dict[str, Any] = {"stages": stage_seconds, "total_s": round(total_s, 1), "cpu": cpu_kind(),
                             "cores": os.cpu_count(), "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if run_dir is not None:
        clock["disk_bytes"] = {"run_dir": folder_bytes(run_dir)}
        if sys.prefix != sys.base_prefix:
            clock["disk_bytes"]["venv"] = folder_bytes(Path(sys.prefix))
    return clock


def run_demo(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.logs import ray_logs_dir, tables_only
    from raypipe.runtime import ensure_ray

    ensure_ray(cfg.ray)  # logs the folder of Ray's worker logs
    logs = ray_logs_dir()
    tables_only()
    times: dict[str, float] = {}
    total = time.perf_counter()
    for name, stage in stages():
        start = time.perf_counter()
        console.rule(f"[bold]demo: {name}")
        stats = stage(cfg)
        if stats:
            console.print(stage_table(f"{name}:", stats))
        times[name] = round(time.perf_counter() - start, 1)
    clock = demo_times(times, time.perf_counter() - total, Path(cfg.run_dir))
    clock_file = Path(cfg.run_dir) / TIMES_FILE
    write_text(clock_file, json.dumps(clock, indent=2) + "\n")
    console.rule("[bold]demo: done")
    console.print(stage_table(f"stage times (s), {clock['cpu']}, {clock['cores']} cores -> {clock_file}:",
                              {"stages": {**times, "total": clock["total_s"]}}, clip=False))
    metrics = json.loads((Path(cfg.eval.out_dir) / "metrics.json").read_text())
    console.print(closing_block(cfg, metrics, None if cfg.ray.log_to_driver else logs, sys.argv))
    return {"stage_seconds": times}


def _same_config(command: str, argv: list[str]) -> str:
    """`raypipe <command>` with the options the demo was started with (`raypipe demo -c X --set ...`),
    so that what it names runs on this run's settings."""
    options = argv[argv.index("demo") + 1:] if "demo" in argv else []
    return shlex.join(["raypipe", *command.split(), *(o for o in options if o != "--json")])


def closing_block(cfg: RaypipeConfig, metrics: dict[str, Any], ray_logs: str | None, argv: list[str]) -> Group:
    """What the demo ends with: the eval table (the world's sets by name, QA first) and where to go
    next, each line a command to run or a page of docs/ to read."""
    from raypipe.eval.report import accuracy_table, comparisons_block, crag_table

    steps = Table(title="Next steps", show_header=False, title_justify="left", box=None, padding=(0, 1))
    steps.add_column("what", style="bold", no_wrap=True)
    steps.add_column("how", overflow="fold")
    steps.add_row("results", f"{cfg.eval.out_dir}/ (metrics.json, results.md): docs/evaluation.md")
    # escaped: the command and the log path are text, not Rich markup (`--set 'x=[a, b]'` printed as `x=`)
    steps.add_row("serve it", f"{escape(_same_config('serve', argv))}: docs/serving.md")
    steps.add_row("all methods", "raypipe eval -c configs/results_table.yaml: docs/evaluation.md")
    steps.add_row("on a cluster", "cluster/ray-cluster.yaml + configs/paper_7b.yaml: docs/cluster.md")
    steps.add_row("all docs", "docs/README.md; every setting: docs/configuration.md")
    if ray_logs:
        steps.add_row("Ray logs", escape(ray_logs))
    crag = crag_table(metrics)
    held = comparisons_block(metrics)
    return Group(Rule("[bold]demo: results"), accuracy_table(metrics), *([held] if held else []),
                 *([crag] if crag else []), steps)
