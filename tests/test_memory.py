"""Freed memory goes back to the operating system between stages (audit.memory)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from audit import memory
from audit.memory import release_free_memory

_SCRIPT = """
import os
from audit.memory import release_free_memory

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

big, small = [], []
for _ in range(3000):  # about 290 MiB
    big.append(b"x" * 100_000)
    small.append(b"y" * 600)
del big
freed = rss()
released = release_free_memory()
print(released, freed - rss(), len(small))
"""


@pytest.mark.skipif(memory._trim() is None, reason="the C library is not glibc")
def test_freed_heap_blocks_go_back_to_the_system():
    # In a fresh process (a test run's heap is in any state): 64 KiB blocks sit in glibc's heap
    # (below its mmap threshold); a small block kept after each one leaves the freed blocks as
    # holes inside the heap, which free() does not return to the system.
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], check=True, capture_output=True, text=True
    ).stdout.split()
    released, drop, kept = out[0] == "True", int(out[1]), int(out[2])
    assert released
    assert drop > 64 * 2**20, f"only {drop / 2**20:.0f} MiB of about 290 went back"
    assert kept == 3000


def test_without_glibc_it_does_nothing(monkeypatch):
    monkeypatch.setattr(memory, "_trim", lambda: None)
    assert release_free_memory() is False


def test_arrow_pool_is_asked_to_give_back_its_free_pages(monkeypatch):
    import pyarrow as pa

    calls = []

    class Pool:
        def release_unused(self) -> None:
            calls.append("released")

    monkeypatch.setattr(pa, "default_memory_pool", lambda: Pool())
    release_free_memory()
    assert calls == ["released"]
