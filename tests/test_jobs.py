"""``AUDIT_JOBS``: the same outputs, byte for byte, in one process and on worker processes.

``audit verify --out x.parquet``, ``audit ingest`` and ``audit analyze --store`` run with
``AUDIT_JOBS=1`` (checked: no fork, no thread) and with ``AUDIT_JOBS=2`` (checked: workers
forked, once per command, never once per file), with pieces small enough that every file is
cut into several.
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import audit.ingest.fast as fast
import audit.ingest.workers as workers
from audit.cli import main
from audit.demo.simulate import simulate
from audit.errors import InputError
from audit.ingest import parallel, store
from audit.ingest.parallel import Runner
from audit.ingest.secrets import read_secrets

AS_OF = "2026-10-09T00:00:00Z"
#: Bytes of a piece (one worker's task): most files are cut into several.
PIECE = 16384


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return simulate(tmp_path_factory.mktemp("jobs") / "demo", days=7, incidents=20)


def _run(demo, out: Path, jobs: str, monkeypatch) -> dict[str, int]:
    """The three commands with ``AUDIT_JOBS=jobs``, small pieces; what was forked/started."""
    monkeypatch.setenv("AUDIT_JOBS", jobs)
    monkeypatch.setattr(store, "PIECE_BYTES", PIECE)  # several pieces per file
    monkeypatch.setattr(parallel, "default_piece_bytes", lambda total, n: PIECE)
    seen = {"pools": 0, "forks": 0, "threads": 0}
    real_pool, real_fork, real_start = workers.fork_pool, os.fork, threading.Thread.start

    def pool(n):
        seen["pools"] += 1
        return real_pool(n)

    def fork():
        seen["forks"] += 1
        return real_fork()

    def start(self):
        seen["threads"] += 1
        return real_start(self)

    monkeypatch.setattr(workers, "fork_pool", pool)
    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(threading.Thread, "start", start)
    secrets = ["--secrets", str(demo.secrets)]
    caps = [str(f) for f in demo.captures]
    counts = {}
    for name, args in (
        ("verify", ["verify", *caps, *secrets, "--out", str(out / "v.parquet")]),
        ("ingest", ["ingest", *caps, *secrets, "--store", str(out / "store")]),
        ("analyze", ["analyze", "--store", str(out / "store"), "--out", str(out / "t")]),
    ):
        before = dict(seen)
        extra = ["--as-of", AS_OF] if name == "analyze" else []
        assert main([*args, *extra]) == 0, name
        counts.update({f"{name}_{k}": seen[k] - before[k] for k in seen})
    monkeypatch.undo()
    return counts


def _records(root: Path) -> pa.Table:
    parts = sorted((root / "deliveries").rglob("*.parquet"))
    table = pa.concat_tables(pq.read_table(p, partitioning=None) for p in parts)
    return table.sort_by([("record_sha256", "ascending"), ("line", "ascending")])


@pytest.mark.slow
def test_one_process_and_two_workers_write_the_same_bytes(demo, tmp_path, monkeypatch):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    files = [Path(f) for f in demo.captures]
    assert len(files) >= 4 and sum(f.stat().st_size > 2 * PIECE for f in files) >= 4
    in_one = _run(demo, one, "1", monkeypatch)
    on_two = _run(demo, two, "2", monkeypatch)
    assert not any(in_one.values()), in_one  # no pool, no fork, no thread
    # Workers really did the work: one pool for verify, ONE for the ingest of every file.
    assert on_two["verify_pools"] == 1 and on_two["ingest_pools"] == 1, on_two
    assert (one / "v.parquet").read_bytes() == (two / "v.parquet").read_bytes()
    a, b = _records(one / "store"), _records(two / "store")
    assert a.num_rows == sum(f.read_bytes().count(b"\n") for f in files)
    assert a.equals(b)
    tables = sorted(p.name for p in (one / "t").iterdir())
    assert tables and tables == sorted(p.name for p in (two / "t").iterdir())
    for name in tables:
        assert (one / "t" / name).read_bytes() == (two / "t" / name).read_bytes(), name


@pytest.mark.parametrize("raw", ["0", "two", "-3"])
def test_a_bad_jobs_value_is_one_clear_line(raw, monkeypatch):
    monkeypatch.setenv("AUDIT_JOBS", raw)
    with pytest.raises(InputError, match=r"AUDIT_JOBS=.*whole number of processes, 1 or more"):
        workers.default_workers()


def test_workers_by_input_size(monkeypatch):
    """Unset, a small input runs in process and a large one on the CPUs; set, it decides."""
    monkeypatch.delenv("AUDIT_JOBS", raising=False)
    assert workers.workers_for(workers.SMALL_INPUT_BYTES - 1) == 1
    assert workers.workers_for(workers.SMALL_INPUT_BYTES) == workers.default_workers()
    assert workers.workers_for(10, 3) == 3
    monkeypatch.setenv("AUDIT_JOBS", "2")
    assert workers.workers_for(10) == 2 and workers.in_process() is False
    monkeypatch.setenv("AUDIT_JOBS", "1")
    assert workers.workers_for(10**12) == 1 and workers.in_process() is True


def test_in_caller_executor_runs_in_order_and_gives_back_errors(monkeypatch):
    monkeypatch.setenv("AUDIT_JOBS", "1")
    done: list[int] = []
    with workers.threads(2) as pool:
        assert list(pool.map(lambda x: done.append(x) or x * 2, [3, 1, 2])) == [6, 2, 4]
        failed = pool.submit(int, "x")
    assert done == [3, 1, 2]
    with pytest.raises(ValueError):
        failed.result()


def test_a_runner_forks_nothing_until_a_piece_comes(demo, monkeypatch):
    """An ingest where every file is already stored forks no worker."""
    calls: list[int] = []
    monkeypatch.setattr(workers, "fork_pool", lambda n: calls.append(n))
    secrets = read_secrets(demo.secrets)
    with Runner(wanted={}, secrets=secrets, tolerance_s=300.0, workers=2) as runner:
        assert list(runner.map(len, iter([]), sources={})) == []
        assert not runner.forked
    assert calls == []


def test_an_ingest_of_small_files_forks_nothing_by_default(demo, tmp_path, monkeypatch):
    """Unset, files of one piece each are ingested in process (a pool per file made a small
    month 17x slower than its verify); files cut into pieces take the workers, once."""
    monkeypatch.delenv("AUDIT_JOBS", raising=False)
    pools: list[int] = []
    real = workers.fork_pool
    monkeypatch.setattr(workers, "fork_pool", lambda n: pools.append(n) or real(n))
    caps = [str(f) for f in demo.captures]
    secrets = ["--secrets", str(demo.secrets)]
    assert main(["ingest", *caps, *secrets, "--store", str(tmp_path / "a")]) == 0
    assert pools == []
    monkeypatch.setattr(store, "PIECE_BYTES", PIECE)
    monkeypatch.setattr(workers, "SMALL_INPUT_BYTES", 1)
    assert main(["ingest", *caps, *secrets, "--store", str(tmp_path / "b")]) == 0
    assert pools == ([workers.default_workers()] if workers.default_workers() > 1 else [])


def test_the_collector_is_paused_only_when_machinery_is_allowed(monkeypatch) -> None:
    assert gc.isenabled()
    monkeypatch.setenv("AUDIT_JOBS", "1")
    with workers.collector_paused():
        assert gc.isenabled()  # the plain path: no memory trick
    monkeypatch.setenv("AUDIT_JOBS", "2")
    with workers.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with workers.collector_paused():
            pass
        assert not gc.isenabled()  # a caller's pause is left as it was
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), workers.collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_the_fast_path_runs_with_the_collector_paused_unless_audit_jobs_is_1(demo, monkeypatch):
    seen: list[bool] = []
    real = fast._fast

    def spy(*args):
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(fast, "_fast", spy)
    data = demo.captures[0].read_bytes()
    secrets = read_secrets(demo.secrets)
    for jobs, paused in (("2", True), ("1", False)):
        monkeypatch.setenv("AUDIT_JOBS", jobs)
        seen.clear()
        fast.verify_jsonl(data, "x", {}, 1, secrets, tolerance_s=300)
        assert seen and set(seen) == {not paused} and gc.isenabled()
