"""Handing freed heap memory back to the operating system in long-running model actors.

An augmentation actor runs the critic and the retriever over batches whose tensors differ in shape
from one batch to the next. glibc's malloc keeps what they free inside the process (the heap cannot
shrink past a live allocation, and its mmap threshold rises after large frees, so later large tensors
land on the heap too), so a long-running actor's RSS climbs batch after batch although most of it
is free (the figures: docs/augmentation.md). Freed, not leaked, but the OS and Ray's memory monitor
see it as used. glibc has no setting that releases free pages inside the heap; `malloc_trim` does,
so we call it (through ctypes: no library wraps it) after each batch, which costs milliseconds
against the batch's seconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


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
