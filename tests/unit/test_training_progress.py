"""A training run followed from its metrics log: the lines a pipe gets (step, total, rate, loss, time
left) and what the log carries for them."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from raypipe.training import progress
from raypipe.training.loop import MetricsLog
from raypipe.training.progress import last_record, progress_line, training_progress


def test_progress_line_says_how_far_and_how_long_is_left():
    record = {"step": 120, "total_steps": 418, "loss": 1.2345}
    assert progress_line("generator training", record, 0.5) == (
        "generator training: step 120 of 418 (29%), 0.50 steps/s, loss 1.234, about 10 min left")
    assert progress_line("critic training", {"step": 900, "total_steps": 907}, 1.0) == (
        "critic training: step 900 of 907 (99%), 1.00 steps/s, about 7 s left")
    # no total (an older log), no rate yet: only what is known
    assert progress_line("x", {"step": 3, "loss": 0.5}, None) == "x: step 3, loss 0.500"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.seen.set()


def test_a_pipe_gets_a_line_as_the_steps_advance(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    log = logging.getLogger("tests.training_progress")
    log.propagate, handler = False, _Lines()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    metrics = MetricsLog(tmp_path / "main.metrics.jsonl", rank=0, attempt_start_step=0, total_steps=4)
    try:
        with training_progress(tmp_path, "generator training", every_s=0.0, enabled=False, log=log):
            for step in (1, 2):
                handler.seen.clear()
                metrics.write({"step": step, "loss": 2.0 / step})
                assert handler.seen.wait(30), f"no line for step {step}"
    finally:
        log.removeHandler(handler)
    assert handler.lines[0] == "generator training: step 1 of 4 (25%), loss 2.000"
    second = handler.lines[1]
    assert second.startswith("generator training: step 2 of 4 (50%), ") and "steps/s" in second
    assert second.endswith("left") and "loss 1.000" in second


@pytest.mark.parametrize("rank", [0, 1])
def test_the_metrics_log_carries_the_total_on_rank_zero_only(tmp_path, rank):
    path = tmp_path / "logs" / "main.metrics.jsonl"
    MetricsLog(path, rank=rank, attempt_start_step=5, total_steps=40).write({"step": 6, "loss": 1.0})
    if rank:
        assert not path.exists()
    else:
        assert json.loads(path.read_text()) == {"step": 6, "loss": 1.0, "total_steps": 40, "attempt_start_step": 5}


def testlast_record_reads_the_newest_complete_line(tmp_path):
    started = time.time() - 1
    assert last_record(tmp_path, since=started) is None
    log = tmp_path / "main.metrics.jsonl"
    log.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n" + json.dumps({"step": 2, "loss": 1.5}) + "\n"
                   + '{"step": 3, "lo')  # a line still being written
    assert last_record(tmp_path, since=started) == {"step": 2, "loss": 1.5}
    assert last_record(tmp_path, since=time.time() + 60) is None  # an older run's log is not this run's


def test_raypipe_train_into_a_pipe_prints_the_runs_steps(tmp_path, monkeypatch):
    """`raypipe train` (and the demo, and a `ray job submit` of it) follows its run itself, over the
    run's own logs folder: not only the demo's stages. The follower is the real one, told it is not on
    a terminal and given a test logger (the process-wide `raypipe.progress` logger is other tests' too)."""
    from raypipe.config import RaypipeConfig
    from raypipe.jobs import train as train_job

    monkeypatch.setattr(progress, "POLL_S", 0.01)
    log = logging.getLogger("tests.train_job_progress")
    log.propagate, handler = False, _Lines()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    followed = []

    def follow(logs_dir, desc, every_s):
        followed.append(logs_dir)
        return training_progress(logs_dir, desc, every_s, enabled=False, log=log)

    def fake_train_lm(section, which, ray_cfg):
        MetricsLog(tmp_path / "logs" / "main.metrics.jsonl", rank=0, attempt_start_step=0,
                   total_steps=10).write({"step": 3, "loss": 1.5})
        assert handler.seen.wait(30), "no progress line while the run trained"
        return {"model": section.out_dir}

    monkeypatch.setattr(train_job, "training_progress", follow)
    monkeypatch.setattr(train_job, "train_lm", fake_train_lm)
    cfg = RaypipeConfig.model_validate({"progress_every_s": 0.001, "training": {"generator": {"out_dir": str(tmp_path)}}})
    try:
        assert train_job.run_train(cfg, "generator") == {"model": str(tmp_path)}
    finally:
        log.removeHandler(handler)
    assert followed == [tmp_path / "logs"]
    assert handler.lines[0] == "generator training: step 3 of 10 (30%), loss 1.500"
