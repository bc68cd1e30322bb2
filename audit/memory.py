"""Giving freed memory back to the operating system between the stages of a large run.

pandas, numpy and the buffers unpickled from worker processes allocate through the C library's
``malloc``. When a stage frees them, glibc keeps most of that memory in the process (freed
blocks below its moving ``mmap`` threshold stay in the heap, for reuse), so the next stage
starts on top of it: at 1M deliveries a report from raw captures peaked at 2.6 GB instead of
2.1 GB. Arrow's memory pool (pandas' text columns) keeps freed pages likewise.
:func:`release_free_memory` asks both to hand the free pages back (glibc's ``malloc_trim(0)``,
as Dask's workers do for the same reason, and ``MemoryPool.release_unused``). It frees nothing
that is in use; glibc's part is a no-op where the C library is another.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

__all__ = ["release_free_memory"]


@functools.cache
def _trim():
    """glibc's ``malloc_trim``, or None (another C library, or none found)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # musl, macOS, Windows: no malloc_trim
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the C heap's free pages to the operating system; True when some were released.

    Call it after a stage dropped its large frames (it takes a few milliseconds per GB)."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:  # Arrow's own pool (mimalloc or jemalloc) keeps freed pages too
        arrow.default_memory_pool().release_unused()
    trim = _trim()
    return bool(trim(0)) if trim is not None else False
