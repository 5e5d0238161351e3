"""Every `raypipe` command on docs/reproducing.md runs as far as a dry run goes: the CLI's parser takes
it and the configuration it names (file, shortcuts, every `--set`) loads and validates, so a key that
moved or a value of the wrong type fails here rather than on a GPU cluster."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from raypipe.cli import COMMANDS, _build_parser, config_from_args

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reproducing.md"
_FENCE = re.compile(r"^```(\w*)\s*$")


def page_commands(text: str, starts: tuple[str, ...] = ("raypipe ",)) -> list[tuple[str, str]]:
    """(section heading, command) of every line of a fenced block that starts with one of `starts`, its
    backslash continuations joined."""
    commands: list[tuple[str, str]] = []
    section, fenced, pending = "", False, ""
    for line in text.splitlines():
        if not fenced and line.startswith("## "):
            section = line[3:].strip()
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
            continue
        if pending.lstrip().startswith(starts):
            commands.append((section, pending.strip()))
        pending = ""
    return commands


COMMANDS_ON_PAGE = page_commands(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_a_command_for_each_table():
    sections = {section.split(",")[0] for section, _ in COMMANDS_ON_PAGE}
    assert {"2. Models", "3. Training on Self-RAG's released data (optional)", "4. Self-RAG", "5. CRAG",
            "6. Self-Reasoning"} <= sections
    assert sum(cmd.startswith("raypipe eval ") for _, cmd in COMMANDS_ON_PAGE) >= 8


def test_joining_continuations_and_skipping_prose():
    text = "## 4. A\n\n```bash\nraypipe eval -c x.yaml \\\n  --set a=1\njq . f\n```\n\nraypipe prose\n"
    assert page_commands(text) == [("4. A", "raypipe eval -c x.yaml --set a=1")]


def check_command(command: str) -> None:
    """`command` (`raypipe ...`, run from the repository root) parses, and the configuration it names
    (file, shortcuts, every `--set`) loads and validates, each `--set` landing on an existing key."""
    args = _build_parser().parse_args(shlex.split(command, comments=True)[1:])
    assert args._command in COMMANDS
    cfg = config_from_args(args)
    for override in args.overrides:  # each --set landed where it says (none silently ignored)
        key, _, _ = override.partition("=")
        node = cfg
        for part in key.split("."):
            node = node[part] if isinstance(node, dict) else getattr(node, part)


@pytest.mark.parametrize("command", [cmd for _, cmd in COMMANDS_ON_PAGE], ids=lambda c: c[:60])
def test_every_command_parses_and_its_configuration_validates(command, monkeypatch):
    monkeypatch.chdir(ROOT)  # the page's config paths are relative to the repository
    check_command(command)
