"""The CLI's logging setup keeps third-party chatter off the terminal without hiding our own lines."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import pytest

import raypipe.logs
from raypipe.logs import NOISY_LOGGERS, setup_logging, tables_only


@pytest.fixture
def restore_logging(monkeypatch):
    """setup_logging changes process-wide state: put the levels, handlers and warning filters back."""
    monkeypatch.setattr(raypipe.logs, "_quiet", raypipe.logs._quiet)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    root = logging.getLogger()
    saved = (root.level, root.handlers[:], {name: logging.getLogger(name).level for name in [*NOISY_LOGGERS, "raypipe", "raypipe.progress"]})
    with warnings.catch_warnings():
        yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def test_named_noisy_loggers_are_raised_and_ours_stays_at_info(restore_logging, capsys):
    setup_logging(verbose=False)
    assert logging.getLogger("faiss.loader").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("ray.serve").getEffectiveLevel() >= logging.WARNING
    assert logging.getLogger().level == logging.WARNING
    logging.getLogger("faiss.loader").info("Loading faiss with AVX2 support.")
    logging.getLogger("some.library").info("chatter")
    logging.getLogger("raypipe.data.world").info("world: 3000 instances")
    logging.getLogger("faiss.loader").warning("a real problem")
    err = capsys.readouterr().err
    assert "AVX2" not in err and "chatter" not in err
    assert "world: 3000 instances" in err and "a real problem" in err


def test_verbose_keeps_everything(restore_logging):
    setup_logging(verbose=True)
    assert logging.getLogger("raypipe").level == logging.DEBUG
    assert logging.getLogger("some.library").getEffectiveLevel() == logging.INFO


@pytest.mark.parametrize("verbose", [False, True])
def test_the_demo_keeps_our_warnings_and_drops_our_info_lines_unless_verbose(restore_logging, capsys, verbose):
    setup_logging(verbose=verbose)
    tables_only()
    logging.getLogger("raypipe.data.world").info("wrote runs/demo/world in 0.3 s")
    logging.getLogger("raypipe.augment.collapse").warning("IsRel collapsed")
    logging.getLogger("raypipe.progress").info("eval pass 1 of 1: 900 of 1800 (50%)")
    err = capsys.readouterr().err
    assert ("wrote runs/demo/world" in err) is verbose
    assert "IsRel collapsed" in err and "900 of 1800" in err


def _stderr_of(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True).stderr


def test_importing_faiss_after_setup_prints_nothing():
    # the control shows the message is really there at INFO, so the second assertion can fail
    loud = _stderr_of("import logging; logging.basicConfig(level=logging.INFO); import faiss")
    assert "Loading faiss" in loud
    quiet = _stderr_of("from raypipe.logs import setup_logging; setup_logging(); import faiss")
    assert "faiss" not in quiet


def test_progress_log_reports_each_tenth_once_and_the_end(caplog):
    caplog.set_level(logging.INFO, logger="raypipe.progress")
    progress = raypipe.logs.ProgressLog("eval pass 1 of 1", total=95, enabled=True)
    for _ in range(30):
        progress.step(3)  # batches of rows, as Ray Data hands them over; 90 of 95
    progress.step(5)
    lines = [r.getMessage() for r in caplog.records]
    # a line at the first count past each tenth (9.5 rounds to 10 rows), then at the end
    assert [line.split(": ")[1].split(" (")[0] for line in lines] == [
        "12 of 95", "21 of 95", "30 of 95", "42 of 95", "51 of 95", "60 of 95", "72 of 95", "81 of 95",
        "90 of 95", "95 of 95"]
    assert lines[-1].startswith("eval pass 1 of 1: 95 of 95 (100%)")


def test_progress_log_is_silent_where_bars_are_drawn(caplog):
    caplog.set_level(logging.INFO, logger="raypipe.progress")
    progress = raypipe.logs.ProgressLog("eval", total=10, enabled=False)
    progress.step(10)
    assert caplog.records == []


def test_progress_log_speaks_after_every_s_between_its_tenths_with_rate_and_time_left(caplog):
    caplog.set_level(logging.INFO, logger="raypipe.progress")
    now = [0.0]
    progress = raypipe.logs.ProgressLog("augment", total=1000, enabled=True, every_s=60.0, clock=lambda: now[0])
    for seconds in (30.0, 61.0, 90.0, 125.0):  # one row at each time: no tenth is reached
        now[0] = seconds
        progress.step(1)
    lines = [r.getMessage() for r in caplog.records]
    # at 61 s (60 s after the start) and at 125 s (64 s after that line), not at 30 or 90; time left
    # = rows left / rate: 998 / (2 / 61) s = 507 min, 996 / (4 / 125) s = 519 min
    assert lines == ["augment: 2 of 1000 (0%), 61 s, 0.03/s, about 507 min left",
                     "augment: 4 of 1000 (0%), 125 s, 0.03/s, about 519 min left"]
