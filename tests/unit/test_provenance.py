"""A result's provenance names the commit it came from, marks a checkout with changed tracked files
as dirty, and says None (not a wrong commit) outside a git checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

from raypipe.provenance import git_commit, provenance


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_commit_is_the_checkouts_and_dirty_when_a_tracked_file_changed(tmp_path: Path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert git_commit(tmp_path) == head
    (tmp_path / "untracked.txt").write_text("not part of the checkout\n")
    assert git_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert git_commit(tmp_path) == f"{head}-dirty"


def test_outside_a_checkout_there_is_no_commit(tmp_path: Path):
    assert git_commit(tmp_path) is None


def test_the_record_names_the_machine():
    record = provenance()
    assert record["cores"] >= 1 and record["date"].endswith("+00:00")
    assert record["cpu"].rsplit(", ", 1)[1] in {"AMX", "AVX512-BF16", "AVX-512", "AVX2", "no AVX2"}
