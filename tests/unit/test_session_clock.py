"""The session's clock counts each test once by its outcome, sums its phases, keeps the slowest, and
tells a whole-suite session from a part of one."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tests import session_clock
from tests.session_clock import ROOT, SessionClock, selection_of


def _report(nodeid: str, when: str, outcome: str, duration: float, **extra) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, duration=duration, **extra)


def test_each_test_counts_once_by_outcome_and_its_phases_add_up(tmp_path: Path, monkeypatch):
    clock = SessionClock()
    reports = [("a", "setup", "passed", 1.0), ("a", "call", "passed", 10.0), ("a", "teardown", "passed", 0.5),
               ("b", "setup", "passed", 0.1), ("b", "call", "failed", 2.0), ("b", "teardown", "passed", 0.1),
               ("c", "setup", "skipped", 0.0), ("c", "teardown", "passed", 0.0),
               ("d", "setup", "passed", 0.0), ("d", "call", "passed", 3.0), ("d", "teardown", "failed", 0.2)]
    for nodeid, when, outcome, duration in reports:
        clock.add(_report(nodeid, when, outcome, duration))
    monkeypatch.setenv("RAYPIPE_TEST_TIMES", str(tmp_path / "times.json"))
    path = clock.write("whole suite", {"training": 654.2})
    record = json.loads(path.read_text())
    assert record["outcomes"] == {"passed": 2, "failed": 1, "skipped": 1, "error": 1}
    assert record["slowest_s"][:3] == [{"test": "a", "seconds": 11.5}, {"test": "d", "seconds": 3.2},
                                       {"test": "b", "seconds": 2.2}]
    assert record["quick_runs_s"] == {"training": 654.2} and record["selection"] == "whole suite"
    assert path == session_clock.times_path() and clock.written == path


def _config(args: list[str], keyword: str = "", markexpr: str = "") -> SimpleNamespace:
    return SimpleNamespace(option=SimpleNamespace(keyword=keyword, markexpr=markexpr),
                           getini=lambda name: ["tests"], args=args,
                           invocation_params=SimpleNamespace(args=tuple(args)))


def test_a_session_is_the_whole_suite_only_without_paths_or_filters():
    assert selection_of(_config([str(ROOT / "tests")])) == "whole suite"
    assert selection_of(_config([str(ROOT / "tests" / "unit")])) == f"part: {ROOT / 'tests' / 'unit'}"
    assert selection_of(_config([str(ROOT / "tests")], keyword="vllm")).startswith("part")
    assert selection_of(_config([str(ROOT / "tests")], markexpr="not slow")).startswith("part")
