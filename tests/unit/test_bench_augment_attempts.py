"""The 150k augmentation benchmark outlives a killed attempt: each attempt's time is on disk while it
runs, and the rate is computed over every attempt."""

from __future__ import annotations

import json
from types import SimpleNamespace

from benchmarks.augment import Attempts


def test_a_killed_attempts_time_counts_and_a_resumed_one_adds_to_it(tmp_path):
    path = tmp_path / "attempts.json"
    # what a killed attempt left: its last save, 1,800 s in
    path.write_text(json.dumps([{"wall_s": 1800.0, "peak_rss_gib": 5.5}]))
    with Attempts(path, SimpleNamespace(peak=4.0), every=0.01) as attempt:
        # while it runs the file already holds the earlier attempt and this one, so a kill loses nothing
        attempt.sample()
        saved = json.loads(path.read_text())
        assert len(saved) == 2 and saved[0] == {"wall_s": 1800.0, "peak_rss_gib": 5.5}
    wall, peak, n = attempt.totals()
    assert n == 2 and peak == 5.5
    assert 1800.0 <= wall < 1800.0 + 60


def test_a_first_attempt_starts_the_record(tmp_path):
    path = tmp_path / "attempts.json"
    with Attempts(path, SimpleNamespace(peak=2.25)) as attempt:
        pass
    wall, peak, n = attempt.totals()
    assert (n, peak) == (1, 2.25) and wall >= 0
