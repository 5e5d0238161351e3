"""A full disk as a clear failure: every durable write goes through here.

A job that runs for hours writes shards, indexes and checkpoints; when the disk fills, the raw error
(`OSError: [Errno 28]` from Python and Arrow, a bare `RuntimeError` from torch's zip writer) says
neither which file nor what to do. Here a write that fails for want of space becomes a
`DiskFullError` naming the path; `atomic_path` writes beside the target and renames, removing its
temp file on any failure, so a reader (or a rerun's "is this shard done?") never sees half a file.
A long job also compares the free space with its estimate before it starts (`warn_if_short_of_space`).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from raypipe.errors import DiskFullError

logger = logging.getLogger(__name__)

#: the errnos of a write refused for want of space: the filesystem is full, or the user's quota spent
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: a C++ writer that fails without an errno (torch's zip writer says "unexpected pos") is taken to have
#: run out of space when its filesystem has less than this left
NEARLY_FULL_BYTES = 1 << 20


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and everything behind it: Python's cause and context, and Ray's wrappers (a task error's
    `cause`, Ray Train's `worker_failures` by rank and `controller_failure`)."""
    todo, seen = [exc], set()
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__, getattr(current, "cause", None),
                 getattr(current, "controller_failure", None), *getattr(current, "worker_failures", {}).values()]


def _says_full(exc: BaseException) -> bool:
    return any(isinstance(e, OSError) and e.errno in FULL_ERRNOS for e in _causes(exc))


def disk_full_in(exc: BaseException, where: str | Path | None = None) -> DiskFullError | None:
    """The `DiskFullError` behind `exc` (after Ray's wrapping); else, when a writer that is not ours
    ran out of space (Ray Train's controller recording the run in its storage) and `where` says where
    it wrote, one naming `where`; else None."""
    found = next((e for e in _causes(exc) if isinstance(e, DiskFullError)), None)
    if found is None and where is not None and _says_full(exc):
        return DiskFullError(str(where))
    return found


def free_bytes(path: str | Path) -> int:
    """Free bytes on the filesystem that holds `path`, or would hold it (its nearest existing folder)."""
    folder = Path(path).absolute()
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free


def _is_full(exc: BaseException, path: Path) -> bool:
    return _says_full(exc) or (isinstance(exc, RuntimeError) and free_bytes(path) < NEARLY_FULL_BYTES)


@contextmanager
def full_disk_named(path: str | Path) -> Iterator[None]:
    """A write to `path` (a file or a folder) in this block that fails for want of space raises
    `DiskFullError` naming it; any other error passes unchanged."""
    try:
        yield
    except DiskFullError:
        raise
    except (OSError, RuntimeError) as exc:
        if not _is_full(exc, Path(path)):
            raise
        raise DiskFullError(str(path)) from exc


def temp_sibling(target: Path) -> Path:
    """A hidden sibling (listings of data files skip it) on the same filesystem (so rename is atomic),
    named by process so that two writers never share one."""
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


def _writer_alive(temp: Path) -> bool:
    """Whether the process named in a `temp_sibling` name still runs (a name not of that shape: kept)."""
    import psutil

    pid = temp.name.rsplit(".", 2)[-2]
    return not pid.isdigit() or psutil.pid_exists(int(pid))


def remove_stale_temps(folders: list[Path]) -> list[Path]:
    """Remove the temp files that a killed writer left in `folders` (SIGKILL runs no cleanup), so a
    resumed job's folders hold only whole files; a temp of a process still running is kept. Returns
    what was removed."""
    removed = []
    for folder in folders:
        for temp in sorted(folder.glob(".*.tmp")) if folder.is_dir() else []:
            if not _writer_alive(temp):
                temp.unlink(missing_ok=True)
                removed.append(temp)
    if removed:
        logger.info("removed %d temp file(s) of an interrupted run: %s", len(removed), ", ".join(map(str, removed)))
    return removed


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temp path to write; on success it replaces `path`, on failure it vanishes, so readers
    never see a half-written file and an interrupted job leaves the previous output intact. A full
    disk is a `DiskFullError` naming `path`."""
    target = Path(path)
    tmp = temp_sibling(target)
    try:
        with full_disk_named(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> Path:
    """`text` (UTF-8) into `path` atomically: a stats or settings file is whole or absent."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def warn_if_short_of_space(folder: str | Path, estimate: int, what: str) -> bool:
    """Warn (and return True) when `folder`'s filesystem has less free space than `estimate` bytes, the
    most the job `what` expects to write there. A warning, not an error: estimates are rough, and a
    run that does fill the disk stops with a `DiskFullError` that a rerun resumes from."""
    free = free_bytes(folder)
    if free >= estimate:
        return False
    logger.warning("%s may write up to %s into %s, which has %s free: it stops with an error naming the file "
                   "if the disk fills, and the same command rerun after freeing space resumes it",
                   what, _size(estimate), folder, _size(free))
    return True
