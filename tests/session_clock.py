"""The test session's own clock, written as a results file when the session ends: its wall time, the
outcome counts, the quick benchmark runs' times, the slowest tests, and where it ran, so that the
suite's time README shows comes from a file (`python -m raypipe.readme_results --publish-tests`) and a
slow session says where its time went without a rerun.

Written to `RAYPIPE_TEST_TIMES` (default `.cache/test_session.json` in the checkout); `selection`
says whether the session ran the whole suite (`make test`) or a part of it.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the slowest tests kept in the file
SLOWEST = 30


def times_path() -> Path:
    return Path(os.environ.get("RAYPIPE_TEST_TIMES", ROOT / ".cache" / "test_session.json"))


class SessionClock:
    """Collects each test's phases and outcome as pytest reports them (`add`)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)
        self.outcomes: Counter[str] = Counter()
        self.phase_ends: dict[str, float] = {}
        #: where `write` put the record (None until then)
        self.written: Path | None = None

    def add(self, report: Any) -> None:
        self.seconds[report.nodeid] += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.outcomes["xfailed" if hasattr(report, "wasxfail") else report.outcome] += 1
        elif report.when == "teardown" and report.outcome == "failed":
            self.outcomes["error"] += 1

    def mark(self, phase: str) -> None:
        """The time since the start at which `phase` ended (e.g. the last unit test)."""
        self.phase_ends[phase] = round(time.monotonic() - self.start, 1)

    def record(self, selection: str, quick_runs: dict[str, float]) -> dict[str, Any]:
        from raypipe.provenance import provenance

        slowest = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:SLOWEST]
        return {**provenance(), "selection": selection, "wall_s": round(time.monotonic() - self.start, 1),
                "outcomes": dict(self.outcomes), "phase_ends_s": self.phase_ends,
                "quick_runs_s": {name: round(s, 1) for name, s in quick_runs.items()},
                "slowest_s": [{"test": nodeid, "seconds": round(s, 1)} for nodeid, s in slowest]}

    def write(self, selection: str, quick_runs: dict[str, float]) -> Path:
        path = times_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.record(selection, quick_runs), indent=2) + "\n", encoding="utf-8")
        self.written = path
        return path


def selection_of(config: Any) -> str:
    """`whole suite` when the session collected the configured test paths with no -k or -m, else
    `part: <the command line's arguments>`."""
    option = config.option
    whole = [str(ROOT / p) for p in config.getini("testpaths")]
    narrowed = bool(option.keyword) or bool(option.markexpr) or [str(Path(a).resolve()) for a in config.args] != whole
    return "part: " + " ".join(config.invocation_params.args) if narrowed else "whole suite"
