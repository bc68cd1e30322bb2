"""A read from the store that cannot fit in this machine's memory is refused before it starts,
in one line (audit.ingest.query.check_memory, audit.memory.available_memory)."""

from __future__ import annotations

import pandas as pd
import pytest

import audit.memory
from audit.analysis.analyze import read_store
from audit.cli import main
from audit.errors import ParameterError
from audit.ingest.load import default_workers
from audit.ingest.query import (
    BYTES_PER_DELIVERY,
    BYTES_PER_HISTORY_ROW,
    check_memory,
    load_analysis_inputs,
)
from audit.ingest.store import ingest
from audit.memory import available_memory, cpu_limit
from tests.builders import write_jsonl, write_secrets
from tests.test_store import T0, _rec

GIB = 1024**3


def _tree(tmp_path, meminfo: str | None, cgroup: dict[str, str] | None):
    proc, fs = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    if meminfo is not None:
        (proc / "meminfo").write_text(meminfo)
    if cgroup is not None:
        (proc / "self" / "cgroup").write_text("0::/system.slice/audit.service\n")
        unit = fs / "system.slice" / "audit.service"
        unit.mkdir(parents=True)
        for name, text in cgroup.items():
            (unit / name).write_text(text)
    return proc, fs


MEMINFO = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:    8388608 kB\n"


def test_available_memory_is_the_smaller_of_the_system_and_its_cgroup(tmp_path):
    proc, fs = _tree(
        tmp_path, MEMINFO, {"memory.max": f"{2 * GIB}\n", "memory.current": "536870912\n"}
    )
    assert available_memory(proc, fs) == 2 * GIB - 536870912  # 1.5 GiB left under the unit's limit
    proc, fs = _tree(tmp_path / "b", MEMINFO, {"memory.max": "max\n", "memory.current": "1\n"})
    assert available_memory(proc, fs) == 8388608 * 1024  # MemAvailable: 8 GiB
    proc, fs = _tree(tmp_path / "c", None, None)
    assert available_memory(proc, fs) is None  # neither can be read (macOS, Windows)


def test_a_cpu_quota_is_read_from_the_cgroup(tmp_path):
    """``docker run --cpus 1.5`` writes ``150000 100000`` to ``cpu.max``; no quota: ``max``."""
    proc, fs = _tree(tmp_path, None, {"cpu.max": "150000 100000\n"})
    assert cpu_limit(proc, fs) == 1.5
    proc, fs = _tree(tmp_path / "b", None, {"cpu.max": "max 100000\n"})
    assert cpu_limit(proc, fs) is None
    proc, fs = _tree(tmp_path / "c", None, None)
    assert cpu_limit(proc, fs) is None  # no cgroup files (macOS, Windows)


def _v1_tree(tmp_path, files: dict[str, dict[str, str]], own: str, *, at_root: bool = False):
    """A cgroup v1 host: ``files`` by controller mount (``memory``, ``cpu,cpuacct``); the
    process's cgroup ``own``; ``at_root``: the files at the mount itself (inside a container)."""
    proc, fs = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "meminfo").write_text("")
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "self" / "cgroup").write_text(
        f"12:memory:{own}\n11:cpu,cpuacct:{own}\n1:name=systemd:{own}\n"
    )
    for mount, named in files.items():
        folder = fs / mount if at_root else fs / mount / own.lstrip("/")
        folder.mkdir(parents=True)
        for name, text in named.items():
            (folder / name).write_text(text)
    return proc, fs


def test_cgroup_v1_limits_are_read_too(tmp_path):
    """Older Docker and hosts in legacy mode: memory.limit_in_bytes (no limit: a huge number)
    and cpu.cfs_quota_us / cpu.cfs_period_us (no quota: -1), found under the mount at the
    process's path, or at the mount itself as a container sees it."""
    limited = {
        "memory": {"memory.limit_in_bytes": f"{GIB}\n", "memory.usage_in_bytes": f"{GIB // 4}\n"},
        "cpu,cpuacct": {"cpu.cfs_quota_us": "50000\n", "cpu.cfs_period_us": "100000\n"},
    }
    for k, at_root in enumerate((False, True)):
        proc, fs = _v1_tree(tmp_path / str(k), limited, "/docker/abc", at_root=at_root)
        assert available_memory(proc, fs) == GIB - GIB // 4  # under MemAvailable's 8 GiB
        assert cpu_limit(proc, fs) == 0.5
    free = {
        "memory": {
            "memory.limit_in_bytes": "9223372036854771712\n",
            "memory.usage_in_bytes": "5\n",
        },
        "cpu,cpuacct": {"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n"},
    }
    proc, fs = _v1_tree(tmp_path / "free", free, "/user.slice")
    assert available_memory(proc, fs) == 8388608 * 1024  # MemAvailable
    assert cpu_limit(proc, fs) is None


@pytest.mark.skipif(default_workers() < 2, reason="needs 2 CPUs and fork")
def test_workers_follow_a_cpu_quota(monkeypatch):
    """A container limited to one CPU got a worker per visible CPU (and a forked fold beside
    the store's read): more memory for no speed (found in review)."""
    import audit.ingest.workers as workers

    monkeypatch.setattr(workers, "cpu_limit", lambda: 1.0)
    assert default_workers() == 1
    monkeypatch.setattr(workers, "cpu_limit", lambda: 1.5)
    assert default_workers() == 2


@pytest.fixture
def store(tmp_path):
    """A store of 10 deliveries of October 2026 (one month, read whole below)."""
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(10)])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "k1"}]})
    ingest([log], secrets, tmp_path / "store")
    return tmp_path / "store", secrets


OCT, NOV = pd.Timestamp("2026-10-01", tz="UTC"), pd.Timestamp("2026-11-01", tz="UTC")
#: By hand: 10 deliveries, and the same 10 rows in the incidents' history.
NEED = 10 * BYTES_PER_DELIVERY + 10 * BYTES_PER_HISTORY_ROW


def test_a_read_needing_more_than_is_available_is_refused_in_one_line(store, monkeypatch):
    root, _ = store
    monkeypatch.setattr(audit.memory, "available_memory", lambda: NEED - 1)
    with pytest.raises(ParameterError) as e:
        check_memory(root, deliveries_from=OCT, receipts_from=OCT, end=NOV)
    text = str(e.value)
    assert (
        "\n" not in text
        and "reading 10 deliveries" in text
        and "audit analyze --store DIR`" in text
    )
    with pytest.raises(ParameterError):
        load_analysis_inputs(root, start=OCT, end=NOV)
    monkeypatch.setattr(audit.memory, "available_memory", lambda: NEED)
    check_memory(root, deliveries_from=OCT, receipts_from=OCT, end=NOV)  # fits: no error


def test_a_month_read_in_part_counts_its_share(store, monkeypatch):
    root, _ = store
    monkeypatch.setattr(audit.memory, "available_memory", lambda: 0)
    half = pd.Timestamp("2026-10-16T12:00", tz="UTC")  # 15.5 of October's 31 days
    with pytest.raises(ParameterError, match=r"reading 5 deliveries at once \(and 10 rows"):
        check_memory(root, deliveries_from=half, receipts_from=OCT, end=NOV)
    # nothing of October is read: nothing is needed
    check_memory(root, deliveries_from=NOV, receipts_from=NOV, end=NOV + pd.Timedelta(days=30))


def test_the_check_can_be_turned_off_and_is_skipped_where_memory_is_unknown(store, monkeypatch):
    root, _ = store
    monkeypatch.setattr(audit.memory, "available_memory", lambda: 0)
    monkeypatch.setenv("AUDIT_MEMORY_CHECK", "off")
    check_memory(root, deliveries_from=OCT, receipts_from=OCT, end=NOV)
    monkeypatch.delenv("AUDIT_MEMORY_CHECK")
    monkeypatch.setattr(audit.memory, "available_memory", lambda: None)
    assert check_memory(root, deliveries_from=OCT, receipts_from=OCT, end=NOV) is None


def test_the_share_of_memory_a_read_needs_decides_whether_the_fold_runs_aside(store, monkeypatch):
    """The fold runs in a process of its own only when the read needs at most 2/3 of the
    memory available, also with the check turned off (found in review: ``off`` let it fork)."""
    root, _ = store
    monkeypatch.setattr(audit.memory, "available_memory", lambda: 3 * NEED)
    assert check_memory(root, deliveries_from=OCT, receipts_from=OCT, end=NOV) == 1 / 3
    monkeypatch.setattr(audit.memory, "available_memory", lambda: NEED)
    monkeypatch.setenv("AUDIT_MEMORY_CHECK", "off")
    assert check_memory(root, deliveries_from=OCT, receipts_from=OCT, end=NOV) == 1.0
    got = read_store(root, start=OCT, end=NOV, clock_start="created")
    assert got.takedown is None and got.first_receipts is not None  # read here, not aside


def test_a_report_too_large_for_memory_exits_3_before_writing(store, tmp_path, monkeypatch, capsys):
    root, secrets = store
    monkeypatch.setattr(audit.memory, "available_memory", lambda: NEED - 1)
    out = tmp_path / "reports"
    args = ["report", "--store", str(root), "--secrets", str(secrets), "--period", "2026-10"]
    assert main([*args, "--out", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs about" in err[0] and "Traceback" not in err[0]
    assert not (out / "2026-10").exists()
    assert T0  # the records above were received in October 2026
