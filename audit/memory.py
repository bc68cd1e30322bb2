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
import os
import sys
from pathlib import Path

__all__ = [
    "available_memory",
    "cpu_limit",
    "release_free_memory",
    "resident_memory",
]


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


def available_memory(
    proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """Bytes this process may still take: the kernel's ``MemAvailable`` (free memory and the
    page cache it can reclaim), or less when a cgroup limit (v2's ``memory.max``, v1's
    ``memory.limit_in_bytes``: a systemd unit's ``MemoryMax``, a container's limit) leaves
    less; None where none can be read (macOS, Windows).
    """
    found: list[int] = []
    try:
        for line in (proc / "meminfo").read_text("ascii").splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError, IndexError):
        pass
    try:
        folder = _own_cgroup(proc, cgroup)
        most = (folder / "memory.max").read_text("ascii").strip()
        if most != "max":
            used = int((folder / "memory.current").read_text("ascii").strip())
            found.append(max(0, int(most) - used))
    except (OSError, ValueError, StopIteration):
        pass
    try:  # cgroup v1 (older Docker, systemd hosts in legacy mode): no limit is a huge number
        folder = _v1_cgroup(proc, cgroup, "memory", "memory.limit_in_bytes")
        limit = int((folder / "memory.limit_in_bytes").read_text("ascii").strip())
        if limit < _V1_NO_LIMIT:
            used = int((folder / "memory.usage_in_bytes").read_text("ascii").strip())
            found.append(max(0, limit - used))
    except (OSError, ValueError, StopIteration):
        pass
    return min(found) if found else None


#: cgroup v1 writes "no limit" as the largest page-aligned 64-bit number (9223372036854771712).
_V1_NO_LIMIT = 2**62


def resident_memory(proc: Path = Path("/proc")) -> int | None:
    """Bytes of this process's memory in RAM now (its resident set); None where it cannot be
    read (macOS, Windows)."""
    try:
        pages = int((proc / "self" / "statm").read_text("ascii").split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * _PAGE


_PAGE = 4096 if not hasattr(os, "sysconf") else os.sysconf("SC_PAGE_SIZE")


def cpu_limit(proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs a cgroup quota (a systemd unit's ``CPUQuota``, ``docker run --cpus``) lets
    this process use, as ``quota / period``: from ``cpu.max`` (cgroup v2), else from
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (v1); None without a quota, or where it
    cannot be read. CPU affinity (``os.sched_getaffinity``) does not show a quota."""
    try:
        cpu_max = (_own_cgroup(proc, cgroup) / "cpu.max").read_text("ascii").split()[:2]
        quota_text, period_text = cpu_max
        if quota_text == "max":
            return None
        return max(int(quota_text), 1) / max(int(period_text), 1)
    except (OSError, ValueError, StopIteration):
        pass
    try:  # cgroup v1: -1 is no quota
        folder = _v1_cgroup(proc, cgroup, "cpu", "cpu.cfs_quota_us")
        quota = int((folder / "cpu.cfs_quota_us").read_text("ascii").strip())
        period = int((folder / "cpu.cfs_period_us").read_text("ascii").strip())
        return None if quota <= 0 else quota / max(period, 1)
    except (OSError, ValueError, StopIteration):
        return None


def _v1_cgroup(proc: Path, cgroup: Path, controller: str, name: str) -> Path:
    """The folder of this process's cgroup v1 ``controller`` (``N:cpu,cpuacct:/path``) that
    holds the file ``name``: under the controller's mount, at the path ``/proc`` names, else at
    the mount itself (a container sees its own cgroup as the mount's root)."""
    for line in (proc / "self" / "cgroup").read_text("ascii").splitlines():
        _, controllers, rel = line.split(":", 2)
        if controller in controllers.split(","):
            for mount in (cgroup / controller, cgroup / controllers):
                for folder in (mount / rel.lstrip("/"), mount):
                    if (folder / name).is_file():
                        return folder
    raise StopIteration


def _own_cgroup(proc: Path, cgroup: Path) -> Path:
    """The folder of the cgroup this process is in (``0::/path`` in cgroup v2)."""
    own = (proc / "self" / "cgroup").read_text("ascii").splitlines()
    rel = next(line[3:] for line in own if line.startswith("0::"))
    return cgroup / rel.lstrip("/")
