"""Handing freed heap memory back to the operating system in long-running model actors.

An augmentation actor runs the critic and the retriever over batches whose tensors differ in shape
from one batch to the next. glibc's malloc keeps what they free inside the process (the heap cannot
shrink past a live allocation, and its mmap threshold rises after large frees, so later large tensors
land on the heap too), so a long-running actor's RSS climbs batch after batch although most of it
is free (the figures: docs/augmentation.md). Freed, not leaked, but the OS and Ray's memory monitor
see it as used. glibc has no setting that releases free pages inside the heap; `malloc_trim` does,
so we call it (through ctypes: no library wraps it) after each batch, which costs milliseconds
against the batch's seconds.

Trimming slows the growth but has not stopped it (~0.3 GiB an hour on a long run), so `MemoryWatch`
warns when an actor nears the memory it asked Ray for, naming the setting to raise, before Ray's
memory monitor may kill it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
from collections.abc import Callable

logger = logging.getLogger(__name__)

#: the first warning, in tenths of the request; one more each time the RSS passes a further tenth
FIRST_WARNING_TENTHS = 9


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    return getattr(libc, "malloc_trim", None)


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (0 once it is gone): a model actor's engine may
    run in child processes (vLLM's engine core), which count against the actor's memory and die with it."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:  # ended between the listing and the reading
            continue
    return total


def release_freed_memory() -> bool:
    """Give the heap's free pages back to the OS; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class MemoryWatch:
    """Warns once per tenth of its memory request (90%, 100%, 110%, ...) that an actor's RSS passes.

    Ray schedules actors by the `memory` they ask for but does not cap them there: an actor past its
    request takes memory the node promised to others, and when the node runs short Ray's memory
    monitor kills a worker. The job survives that (Ray Data restarts the actor and reruns its
    batches), so the only sign would be lost time; the warning says which setting makes room.
    One psutil read per call, so an actor can check after every batch.
    """

    def __init__(self, request_bytes: int, setting: str):
        self.request_bytes = request_bytes
        self.setting = setting
        self._warned_tenths = FIRST_WARNING_TENTHS - 1  # as if warned up to 80%: the first warning is at 90%

    def check(self, rss_bytes: int) -> str | None:
        """Log and return a warning if `rss_bytes` passes a tenth of the request not warned of yet."""
        tenths = rss_bytes * 10 // self.request_bytes
        if tenths <= self._warned_tenths:
            return None
        self._warned_tenths = tenths
        message = (
            f"this actor holds {rss_bytes / 2**30:.2f} GiB, {tenths * 10}% or more of the "
            f"{self.request_bytes / 2**30:.2f} GiB it asks Ray for ({self.setting}); past the request the "
            "node may run short and Ray's memory monitor may kill the actor (the job restarts it and reruns "
            f"its batches, the output unchanged, at the cost of the time lost): raise {self.setting} "
            "(Ray then places fewer of these actors on a node)"
        )
        logger.warning(message)
        return message

    def check_process(self) -> str | None:
        """`check` on this process and its children (an engine's child processes count against the actor)."""
        return self.check(tree_rss(os.getpid()))
