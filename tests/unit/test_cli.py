"""The CLI: every job is a command, shortcuts map to config keys, errors exit 1 with a message; no traps:
a bare command runs what `make demo` runs and says so, -v/--version anywhere, help that says what each
flag takes and names every method, one spelling of command names, a one-line serve."""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path

import pytest

from raypipe import cli
from raypipe.errors import ConfigError
from raypipe.methods import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_job(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in ("demo", "data", "models", "index", "label", "train", "augment", "eval", "serve", "config"):
        assert f"    {name}" in out


def test_every_command_target_resolves():
    for cmd in cli.COMMANDS.values():
        assert callable(cli._resolve(cmd.target))


def test_shortcuts_become_overrides():
    parser = cli._build_parser()
    args = parser.parse_args(["data", "synth", "--instances", "7", "--seed", "3", "--out", "/tmp/w",
                              "--set", "world.heldout_fraction=0.2"])
    cfg = cli.config_from_args(args)
    assert (cfg.world.instances, cfg.world.seed, cfg.world.out_dir) == (7, 3, "/tmp/w")
    assert cfg.world.heldout_fraction == 0.2


def test_synth_runs_prints_json_and_says_which_config(tmp_path, capsys):
    rc = cli.main(["data", "synth", "--instances", "30", "--out", str(tmp_path / "w"), "--json",
                   "--set", "world.eval_instances=3"])
    assert rc == 0
    out, err = capsys.readouterr()
    stats = json.loads(out)
    assert stats["instances"] == 30
    assert (tmp_path / "w" / "_SUCCESS").exists()
    line, = [ln for ln in err.splitlines() if ln.startswith("raypipe data synth: config: ")]
    assert "demo.yaml (the demo's, as `make demo` runs it: no --config given) + 3 override(s)" in line
    assert line.endswith("; run_dir runs/demo")


def test_config_error_exits_1_naming_the_key(capsys):
    rc = cli.main(["data", "synth", "--set", "world.instnaces=3"])
    assert rc == 1
    assert "world.instnaces: unknown key" in capsys.readouterr().err


# --- one source of truth: a bare command runs what `make demo` runs ---

def _make_demo_argv() -> list[str]:
    """The arguments the Makefile's `demo` recipe gives `raypipe`."""
    recipe = re.search(r"^demo:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    words = shlex.split(recipe)
    return words[next(i for i, w in enumerate(words) if w.endswith("/raypipe")) + 1:]


def test_bare_command_runs_the_config_make_demo_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the Makefile's paths are relative to the repository
    demo_argv = _make_demo_argv()
    assert demo_argv[0] == "demo"
    made = cli.config_from_args(cli._build_parser().parse_args(demo_argv))
    monkeypatch.chdir(tmp_path)  # the bare default is found from anywhere (it ships in the package)
    for command in (["eval"], ["serve"], ["augment"], ["train", "generator"]):
        bare = cli.config_from_args(cli._build_parser().parse_args(command))
        assert bare.model_dump() == made.model_dump(), command
    # the values the issue found differing between the old embedded defaults and the demo file
    assert (made.run_dir, made.retrieval.top_k, made.training.generator.base_model) == (
        "runs/demo", 3, "runs/demo/models/smollm2")


def test_the_demo_config_ships_in_the_package_and_configs_links_to_it():
    assert (ROOT / "configs" / "demo.yaml").samefile(cli.DEMO_CONFIG)
    assert cli.DEMO_CONFIG.parent == ROOT / "raypipe"
    package_data = re.search(r"^\[tool\.setuptools\.package-data\]\nraypipe = \[(.*)\]$",
                             (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert f'"{cli.DEMO_CONFIG.name}"' in package_data.group(1)


def test_a_given_config_is_named_as_given(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    path.write_text("run_dir: runs/mine\n")
    args = cli._build_parser().parse_args(["eval", "-c", str(path)])
    assert cli.describe_config(args, cli.config_from_args(args)) == f"config: {path}; run_dir runs/mine"


# --- -v and --version anywhere ---

def _pyproject_version() -> str:
    return re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)


@pytest.mark.parametrize("argv", [["--version"], ["eval", "--version"], ["data", "synth", "--version"],
                                  ["data", "--version"], ["config", "show", "--version"]])
def test_version_before_or_after_the_command(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"raypipe {_pyproject_version()}\n"


@pytest.mark.parametrize("argv", [["-v", "eval"], ["eval", "-v"], ["--verbose", "data", "synth"],
                                  ["data", "-v", "synth"], ["data", "synth", "--verbose"],
                                  ["train", "critic", "-v"]])
def test_verbose_before_or_after_the_command(argv):
    assert cli._build_parser().parse_args(argv).verbose is True


def test_no_verbose_flag_means_quiet_and_a_late_v_turns_debug_on(capsys):
    assert not hasattr(cli._build_parser().parse_args(["eval"]), "verbose")
    cli.main(["config", "show", "-v"])
    assert logging.getLogger("raypipe").level == logging.DEBUG
    cli.main(["config", "show"])
    assert logging.getLogger("raypipe").level == logging.INFO


# --- help texts ---

def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return capsys.readouterr().out


def _every_help_page() -> list[list[str]]:
    names = [*cli.COMMANDS, cli.SHOW_CONFIG]
    groups = sorted({n.split()[0] for n in names if " " in n})
    return [[], *[[g] for g in groups], *[n.split() for n in names]]


#: what a flag may say it takes: words a user reads, never a config key or an internal name
METAVARS = {"FILE", "KEY=VALUE", "PATH", "N", "SOURCE", "DTYPE", "SPEC", "METHODS", "METHOD", "HOST", "PORT"}


def _metavars(text: str) -> set[str]:
    """What each flag of a --help page says it takes: in the usage (`[--out PATH]`) and in the options
    (`  --config FILE, -c FILE   help ...`)."""
    usage = text.split("\n\n")[0]
    found = set(re.findall(r"\[-{1,2}[\w-]+ ([^\]]+)\]", usage))
    for line in text.splitlines():
        if m := re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line):
            found.update(word for part in m.group(1).split(", ") for word in part.split()[1:])
    return found


@pytest.mark.parametrize("argv", _every_help_page(), ids=lambda a: " ".join(a) or "raypipe")
def test_help_has_no_internal_placeholder(argv, capsys):
    text = _help(argv, capsys)
    assert _metavars(text) <= METAVARS, f"raypipe {' '.join(argv)} --help: {sorted(_metavars(text) - METAVARS)}"
    assert "SHORTCUT" not in text


def test_the_placeholder_check_sees_an_internal_name():
    """The check above catches what the CLI printed before (else the test proves nothing)."""
    old = ("usage: raypipe eval [-h] [--config CONFIG] [--out SHORTCUT:EVAL.OUT_DIR]\n\noptions:\n"
           "  --config CONFIG, -c CONFIG\n                        YAML config file\n"
           "  --out SHORTCUT:EVAL.OUT_DIR\n                        output folder (= --set eval.out_dir=...)\n"
           "  --limit SHORTCUT:EVAL.LIMIT  rows per eval set\n")
    assert _metavars(old) == {"CONFIG", "SHORTCUT:EVAL.OUT_DIR", "SHORTCUT:EVAL.LIMIT"}


#: every method a user can ask for, and Self-RAG's retrieval modes
METHODS = {"selfrag", "rag", "crag", "selfcrag", "self_reasoning", "direct"}


def test_eval_and_serve_help_name_every_method_and_mode(capsys):
    assert set(REGISTRY) == METHODS  # a new method: add it here, and the help names it by construction
    eval_help, serve_help = (" ".join(_help([name], capsys).split()) for name in ("eval", "serve"))
    for name in METHODS:
        assert re.search(rf"\b{name}\b", eval_help) and re.search(rf"\b{name}\b", serve_help), name
    for mode in ("never", "adaptive", "always"):
        assert re.search(rf"\b{mode}\b", eval_help), mode
    assert "no retrieval" in eval_help and "Self-CRAG" in serve_help


# --- one spelling of command names ---

def test_command_names_are_spelled_with_hyphens():
    words = [w for name, cmd in cli.COMMANDS.items() for w in (*name.split(), *cmd.choices)]
    assert "self-reasoning" in words and not [w for w in words if "_" in w]


def test_train_self_reasoning_reaches_the_job_as_its_config_section(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli, "_resolve", lambda target: lambda cfg, which: calls.append(which) or {})
    assert cli.main(["train", "self-reasoning", "--json"]) == 0
    assert calls == ["self_reasoning"]
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "self_reasoning"])
    assert stop.value.code == 2


def test_the_demo_closes_with_its_own_summary_and_gives_its_stats_only_as_json(monkeypatch, capsys):
    stats = {"stage_seconds": {"synthetic world": 0.8, "total": 1202.5}}
    monkeypatch.setattr(cli, "_resolve", lambda target: lambda cfg: stats)
    assert cli.main(["demo"]) == 0
    assert "stage_seconds" not in capsys.readouterr().out  # its stage-times table is already on screen
    assert cli.main(["demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == stats
    assert cli.main(["data", "synth"]) == 0  # other commands still print their stats table
    assert "stage_seconds" in capsys.readouterr().out


# --- the one-line serve ---

def _serve(*argv: str):
    return cli.config_from_args(cli._build_parser().parse_args(["serve", *argv])).serve


def test_one_line_serve_maps_onto_the_serve_keys():
    serve = _serve("--generator", "/models/gen", "--methods", "selfrag,crag", "--port", "8100")
    assert (serve.generator, serve.methods, serve.default_method, serve.port) == (
        "/models/gen", ["selfrag", "crag"], "selfrag", 8100)


def test_serve_methods_default_to_their_first_unless_told():
    assert _serve("--methods", "crag, rag").default_method == "crag"  # the configured selfrag is not served
    assert _serve("--methods", "crag,rag", "--default-method", "rag").default_method == "rag"
    assert _serve("--methods", "selfrag,crag", "--set", "serve.default_method=crag").default_method == "crag"
    assert _serve().methods == ["selfrag"]


def test_serve_unknown_method_is_an_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"serve\.methods\.1"):
        _serve("--methods", "selfrag,vanilla")


def test_print_summary_prints_list_like_values_as_they_are(capsys):
    cli.print_summary("stats", {"sampling": {"qa_datasets": "[factual_qa, multiple_choice]"}})
    assert "[factual_qa, multiple_choice]" in capsys.readouterr().out
