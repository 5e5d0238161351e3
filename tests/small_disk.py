"""A filesystem of a test's own that the test can fill: a small tmpfs, mounted for one test (as root).

A full disk cannot be faked faithfully: what fails, and how, depends on the writer (Python's file
objects and Arrow raise ENOSPC, torch's zip writer a bare RuntimeError, faiss' file writer only
prints a failed close). So the full-disk tests write to a real filesystem that runs out of space.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

#: tmpfs hands out whole pages: room left on the disk is a multiple of this
PAGE = 4096


class SmallDisk:
    """The mounted folder `root`; `fill` takes its free space, `free` gives it back."""

    def __init__(self, root: Path):
        self.root = root
        self.filler = root / ".filler"

    def fill(self, leave: int = 0) -> None:
        """Take every free byte but `leave` (rounded down to whole pages)."""
        room = shutil.disk_usage(self.root).free - leave // PAGE * PAGE
        with self.filler.open("ab") as fh:
            os.posix_fallocate(fh.fileno(), self.filler.stat().st_size, room)

    def free(self) -> None:
        self.filler.unlink()

    def files(self) -> list[Path]:
        """Every file on the disk but the filler, for "nothing half-written is left" checks."""
        return sorted(p for p in self.root.rglob("*") if p.is_file() and p != self.filler)


@contextmanager
def mounted(folder: Path, size: str = "16m") -> Iterator[SmallDisk]:
    """A tmpfs of `size` at `folder` for the block; skips the test where it cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("the full-disk tests mount a small tmpfs, which needs root")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs at {folder}: {done.stderr.strip()}")
    try:
        yield SmallDisk(folder)
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)
