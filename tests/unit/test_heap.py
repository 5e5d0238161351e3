"""Freed heap memory goes back to the OS when an actor asks (raypipe.heap)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

#: Blocks below malloc's mmap threshold, each pinned by a small live block after it, are freed: the heap
#: cannot shrink from the top, so only trimming the free pages inside it lowers the RSS. Run in a fresh
#: interpreter: a long-lived one (the test session) has its own heap history, which decides where the
#: blocks land.
SCENARIO = textwrap.dedent("""
    import ctypes, ctypes.util, sys
    from raypipe.heap import release_freed_memory

    def rss_mib():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

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
    trim = sys.argv[1] == "trim" and release_freed_memory()
    print(before, rss_mib(), trim)
""")


def freed_then(action: str) -> tuple[float, float, bool]:
    out = subprocess.run([sys.executable, "-c", SCENARIO, action], capture_output=True, text=True, check=True)
    before, after, trimmed = out.stdout.split()
    return float(before), float(after), trimmed == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_pages_are_returned_to_the_os():
    before, after, trimmed = freed_then("trim")
    assert trimmed
    assert before - after > 200, f"RSS {before:.0f} -> {after:.0f} MiB"
    kept_before, kept_after, _ = freed_then("keep")  # the same frees without the trim: the pages stay
    assert kept_before - kept_after < 50, f"RSS {kept_before:.0f} -> {kept_after:.0f} MiB"


def test_tree_rss_counts_a_child_process_and_is_zero_once_the_process_is_gone():
    from raypipe.heap import tree_rss

    # a parent that starts a child holding ~200 MiB resident, then waits: the tree holds both
    holder = "b = bytearray(200 * 2**20); import sys; print('ready', flush=True); sys.stdin.read()"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", {holder!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        child.stdout.readline()
        print('ready', flush=True)
        sys.stdin.read()
        child.stdin.close(); child.wait()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert parent.stdout.readline().strip() == b"ready"
        import psutil

        alone = psutil.Process(parent.pid).memory_info().rss
        assert tree_rss(parent.pid) - alone > 190 * 2**20
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)
    assert tree_rss(parent.pid) == 0


def test_memory_watch_warns_once_per_tenth_of_the_request_passed(caplog):
    from raypipe.heap import MemoryWatch

    watch = MemoryWatch(10 * 2**30, "augment.critic_memory_gib")
    readings_gib = [5.0, 8.9, 9.0, 9.5, 9.0, 10.2, 12.5, 11.5, 12.9, 13.0]
    with caplog.at_level(logging.WARNING, logger="raypipe.heap"):
        warned = [gib for gib in readings_gib if watch.check(int(gib * 2**30))]
    # 90% first, then 100%; 12.5 passes 110% and 120% at once (one warning); nothing below the last level
    assert warned == [9.0, 10.2, 12.5, 13.0]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 4
    first = caplog.records[0].getMessage()
    assert "9.00 GiB" in first and "90%" in first and "10.00 GiB" in first
    assert "raise augment.critic_memory_gib" in first and "memory monitor" in first
    assert "120%" in caplog.records[2].getMessage()


def test_memory_watch_reads_this_process_tree():
    from raypipe.heap import MemoryWatch

    assert MemoryWatch(2**50, "augment.worker_memory_gib").check_process() is None  # a PiB: far off
    assert "augment.worker_memory_gib" in MemoryWatch(2**20, "augment.worker_memory_gib").check_process()
