"""A build lock left by a killed DeepSpeed op build is removed; a fresh one (a build under way) is kept."""

from __future__ import annotations

import os
import time

from raypipe.runtime import clear_stale_build_locks


def test_only_locks_older_than_any_build_are_removed(tmp_path):
    stale, fresh = tmp_path / "deepspeed_shm_comm" / "lock", tmp_path / "fused_adam" / "lock"
    for lock in (stale, fresh):
        lock.parent.mkdir()
        lock.write_text("")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    assert clear_stale_build_locks(tmp_path, max_age_s=600) == [stale]
    assert not stale.exists() and fresh.exists()
    assert clear_stale_build_locks(tmp_path / "missing") == []
