"""Freed heap memory goes back to the OS when an actor asks (raypipe.heap)."""

from __future__ import annotations

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
