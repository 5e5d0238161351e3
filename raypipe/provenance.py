"""Where and when a result was produced: the commit, the date, the machine. A results file carries
this beside its figures, because the same job runs 1.5-3x apart across the CPU kinds these machines
come in, and a figure without its commit cannot be reproduced."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: the checkout raypipe runs from (a wheel installed elsewhere has no git history: `commit` is None)
SOURCE = Path(__file__).resolve().parent.parent


def git_commit(source: Path = SOURCE) -> str | None:
    """The checked-out commit, with `-dirty` when tracked files differ from it; None outside a checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):  # no git on the machine
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"{commit}-dirty" if changed else commit


def provenance() -> dict[str, Any]:
    """`commit`, `date` (UTC), `cpu` (its model and widest matrix instructions) and `cores`."""
    from raypipe.models.device import cpu_kind

    return {"commit": git_commit(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu_kind(), "cores": os.cpu_count()}
