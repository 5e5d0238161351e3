"""`raypipe.disk` on a real filesystem that fills (tests/small_disk.py): a write that runs out of space
is a `DiskFullError` naming its path, with the previous file intact and no temp file left; errors that
are not a full disk pass unchanged; the error survives Ray's transport; the free-space warning."""

from __future__ import annotations

import logging
import pickle

import pyarrow as pa
import pytest
import torch

from raypipe.data.io import write_jsonl, write_parquet
from raypipe.disk import disk_full_in, full_disk_named, warn_if_short_of_space, write_text
from raypipe.errors import DiskFullError

ROWS = [{"id": f"r{i}", "text": "words " * 200} for i in range(40)]
WRITERS = {
    "parquet": lambda path: write_parquet(pa.Table.from_pylist(ROWS), path),
    "jsonl": lambda path: write_jsonl(ROWS, path),
    "text": lambda path: write_text(path, "words " * 10_000),
}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_a_write_onto_a_full_disk_names_its_path_keeps_the_old_file_and_leaves_no_temp(small_disk, kind):
    target = small_disk.root / "out" / f"shard.{kind}"
    target.parent.mkdir()
    target.write_text("the previous run's")
    small_disk.fill()
    with pytest.raises(DiskFullError) as raised:
        WRITERS[kind](target)
    assert raised.value.path == str(target)
    assert str(target) in str(raised.value) and "rerun" in str(raised.value)
    assert small_disk.files() == [target] and target.read_text() == "the previous run's"
    small_disk.free()
    WRITERS[kind](target)  # with the space back, the same write succeeds
    assert target.stat().st_size > len("the previous run's")


def test_torchs_writer_on_a_full_disk_is_named_though_it_says_no_errno(small_disk):
    small_disk.fill()
    folder = small_disk.root / "checkpoint"
    folder.mkdir()
    with pytest.raises(DiskFullError) as raised, full_disk_named(folder):
        torch.save({"w": torch.zeros(100_000)}, folder / "weights.pt")
    assert raised.value.path == str(folder)
    assert isinstance(raised.value.__cause__, RuntimeError)  # torch's own, errno-less, kept as the cause


@pytest.mark.parametrize("error", [RuntimeError("a bug"), FileNotFoundError(2, "no such file"),
                                   PermissionError(13, "denied")])
def test_other_errors_pass_unchanged_where_there_is_room(tmp_path, error):
    with pytest.raises(type(error)) as raised, full_disk_named(tmp_path):
        raise error
    assert raised.value is error


def test_the_error_keeps_its_path_through_pickling_and_is_found_behind_rays_wrappers():
    import ray.train

    error = pickle.loads(pickle.dumps(DiskFullError("/runs/x/data/a.parquet")))  # how Ray carries it
    assert error.path == "/runs/x/data/a.parquet" and str(error) == str(DiskFullError("/runs/x/data/a.parquet"))
    wrapped = ray.train.WorkerGroupError("rank 0 failed", {0: error})
    assert disk_full_in(wrapped) is error
    try:
        try:
            raise error
        except DiskFullError as inner:
            raise RuntimeError("the job failed") from inner
    except RuntimeError as outer:
        assert disk_full_in(outer) is error
    assert disk_full_in(ValueError("nothing to do with disks")) is None


def test_a_job_short_of_space_is_warned_with_folder_estimate_and_free_space(small_disk, caplog):
    caplog.set_level(logging.WARNING, logger="raypipe.disk")
    small_disk.fill(leave=1 << 20)
    out = small_disk.root / "gen"  # not there yet: measured on the filesystem that will hold it
    assert warn_if_short_of_space(out, 2 << 20, "augment") is True
    message = caplog.records[-1].getMessage()
    assert message.startswith("augment may write up to 2.0 MiB into") and str(out) in message
    assert "which has 1.0 MiB free" in message
    caplog.clear()
    assert warn_if_short_of_space(out, 512 << 10, "augment") is False
    assert not caplog.records


def test_a_killed_writers_temp_files_are_removed_and_a_running_writers_kept(tmp_path):
    import subprocess
    import sys

    from raypipe.disk import remove_stale_temps, temp_sibling

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid no longer runs, as a SIGKILLed driver's
    data = tmp_path / "data"
    data.mkdir()
    stale = data / f".part-000.parquet.{dead.pid}.tmp"
    stale.write_text("half a shard")
    live = temp_sibling(data / "part-001.parquet")  # named by this process, which runs
    live.write_text("being written")
    whole = data / "part-002.parquet"
    whole.write_text("a whole shard")
    removed = remove_stale_temps([tmp_path, data, tmp_path / "absent"])
    assert removed == [stale]
    assert sorted(p.name for p in data.iterdir()) == sorted([live.name, whole.name])
