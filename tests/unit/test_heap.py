"""Freed heap memory goes back to the OS when an actor asks (raypipe.heap)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

from raypipe.heap import release_freed_memory


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_pages_are_returned_to_the_os():
    """Blocks below the mmap threshold, each pinned by a small live block after it, are freed: the heap
    cannot shrink from the top, so only trimming the free pages inside it lowers the RSS."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    big, pins = [], []
    for _ in range(3000):  # ~300 MiB
        block = libc.malloc(100 * 1024)
        ctypes.memset(block, 1, 100 * 1024)  # touch it, so it is resident
        big.append(block)
        pins.append(libc.malloc(64))
    for block in big:
        libc.free(block)
    before = rss_mib()
    assert release_freed_memory()
    after = rss_mib()
    for pin in pins:
        libc.free(pin)
    assert before - after > 200, f"RSS {before:.0f} -> {after:.0f} MiB"
