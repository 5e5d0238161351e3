"""DeepSpeed op builds: a build lock left by a killed build is removed, a fresh one (a build under way) is
kept; the ninja installed beside the interpreter is the one builds use."""

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


def test_the_ninja_beside_the_interpreter_comes_first_on_path(tmp_path, monkeypatch):
    import sys

    from raypipe.runtime import use_installed_ninja

    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", str(bin_dir), "/bin"]))
    use_installed_ninja()
    assert os.environ["PATH"].split(os.pathsep)[0] == "/usr/bin"  # no ninja there: PATH left alone
    (bin_dir / "ninja").write_text("")
    use_installed_ninja()
    assert os.environ["PATH"].split(os.pathsep) == [str(bin_dir), "/usr/bin", "/bin"]
