"""Every command a new user copies from README.md and the manual pages of docs/ exists as written: a
`raypipe` (or `.venv/bin/raypipe`) line parses and the configuration it names validates, and a `ray
job submit ... -- python jobs/<script>.py ...` line names an entry script that exists and whose
arguments parse and validate as its command's. docs/reproducing.md has its own test; docs/results/
holds dated commands that ran with the settings of their day, and docs/methods/ commands with
placeholders for a measured value, so neither is read here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.test_reproducing_commands import check_command, page_commands

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "reproducing.md")]
_JOB = re.compile(r"\s--\s+python\s+(jobs/\w+\.py)(.*)$")
_JOB_COMMAND = re.compile(r"job_main\(\"([\w -]+)\"\)")


def as_raypipe(line: str) -> str | None:
    """`line` as the `raypipe ...` command it runs, or None when it is a command's printed output
    (`raypipe eval: config: ...`)."""
    line = line.removeprefix(".venv/bin/")
    if line.startswith("ray job submit"):
        script, rest = _JOB.search(line).groups()
        command = _JOB_COMMAND.search((ROOT / script).read_text(encoding="utf-8")).group(1)
        return f"raypipe {command}{rest}"
    return None if line.split()[1].endswith(":") else line


COMMANDS = [(page.relative_to(ROOT).as_posix(), line) for page in PAGES
            for _, line in page_commands(page.read_text(encoding="utf-8"),
                                         ("raypipe ", ".venv/bin/raypipe ", "ray job submit "))]


def test_the_newcomers_path_is_covered():
    pages = {page for page, _ in COMMANDS}
    assert {"README.md", "docs/cli.md", "docs/serving.md", "docs/cluster.md"} <= pages
    assert sum(line.startswith("ray job submit") for page, line in COMMANDS if page == "docs/cluster.md") >= 7


def test_every_job_in_the_cli_table_has_an_entry_script():
    """docs/cli.md promises a `jobs/` script per command (`config show` is no job); a script may cover a
    command group (`jobs/train.py` runs `train critic|generator|self-reasoning`)."""
    table = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split("## Commands", 1)[1].split("```")[1]
    commands = {re.split(r"\s{2,}", row.split("raypipe ", 1)[1])[0] for row in table.splitlines() if "raypipe " in row}
    scripts = {_JOB_COMMAND.search(p.read_text(encoding="utf-8")).group(1) for p in (ROOT / "jobs").glob("*.py")}
    assert len(commands) >= 14
    missing = [c for c in sorted(commands - {"config show"})
               if not any(c == s or c.startswith(f"{s} ") for s in scripts)]
    assert missing == []


def test_a_job_line_is_read_as_its_command():
    line = "ray job submit --working-dir . -- python jobs/train.py generator --config configs/paper_7b.yaml"
    assert as_raypipe(line) == "raypipe train generator --config configs/paper_7b.yaml"
    assert as_raypipe("raypipe eval: config: raypipe/demo.yaml (the demo's)") is None


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=[f"{page}: {line[:50]}" for page, line in COMMANDS])
def test_every_command_exists_as_written(page, line, monkeypatch):
    monkeypatch.chdir(ROOT)  # the pages' paths are relative to the repository
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # a line may hand the key to a job
    command = as_raypipe(line)
    if command is not None:
        check_command(command)
