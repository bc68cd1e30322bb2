"""The evidence store against rotated logs and damage: a log renamed or compressed after it
was ingested is the same file; a missing or damaged part, a lost manifest, a mistyped folder
each give one line, and nothing is deleted or counted twice."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from audit.cli import main
from audit.errors import InputError
from audit.ingest.query import load_deliveries
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from tests.builders import capture, write_jsonl, write_secrets

T0 = 1790812800  # 2026-10-01T00:00:00Z


def _rec(n: int) -> dict:
    body = json.dumps({"id": f"evt_{n}", "event": "incident.created", "data": {}})
    ts = str(T0 + n)
    return capture(
        body, signature=sign("k1", ts, body.encode()), timestamp=ts, received_at=T0 + n + 1
    )


@pytest.fixture
def secrets(tmp_path):
    return write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "k1"}]})


def _ids(store) -> list[str]:
    return sorted(load_deliveries(store, columns=["event_id"])["event_id"])


def _gzip(path):
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    return gz


def test_a_log_rotated_then_compressed_is_not_stored_twice(tmp_path, secrets):
    """logrotate with delaycompress: recv.jsonl -> recv.jsonl.1 -> recv.jsonl.1.gz."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    log = write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5)])
    ingest([logs], secrets, store)
    log.rename(logs / "recv.jsonl.1")
    write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5, 8)])
    ingest([logs], secrets, store)
    _gzip(logs / "recv.jsonl.1")
    r = ingest([logs], secrets, store)
    assert (r.files_added, r.files_unchanged, r.records) == (0, 2, 0)
    assert _ids(store) == [f"evt_{i}" for i in range(8)]  # each record once


def test_a_log_compressed_under_a_name_read_first_keeps_its_records(tmp_path, secrets):
    """Compressed at rotation (no delaycompress) to a name sorted before the new log's: the
    stored entry follows its content, so the new log under the old name is a new file."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    log = write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5)])
    ingest([logs], secrets, store)
    old = log.rename(logs / "a-recv.jsonl")
    _gzip(old)
    write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5, 8)])
    r = ingest([logs], secrets, store)
    assert (r.files_added, r.files_unchanged, r.files_changed) == (1, 1, 0)
    assert any("renamed since" in m for m in r.messages)
    assert _ids(store) == [f"evt_{i}" for i in range(8)]
    again = ingest([logs], secrets, store)
    assert (again.files_unchanged, again.records) == (2, 0)


def test_a_missing_part_is_named_and_the_next_ingest_restores_it(tmp_path, secrets):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(5)])
    ingest([log], secrets, store)
    next((store / "deliveries").rglob("*.parquet")).unlink()
    with pytest.raises(InputError, match=r"1 part\(s\) its manifest lists are missing"):
        load_deliveries(store, columns=["event_id"])
    r = ingest([log], secrets, store)
    assert r.files_changed == 1 and r.records == 5
    assert any("damaged or missing" in m and "repaired" in m for m in r.messages)
    assert _ids(store) == [f"evt_{i}" for i in range(5)]


def test_a_damaged_part_is_one_line_not_an_internal_error(tmp_path, secrets, capsys):
    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(1)])], secrets, store)
    part = next((store / "deliveries").rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:100])  # truncated
    code = main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")])
    err = capsys.readouterr().err
    assert code == 3 and "internal error" not in err
    assert err.startswith(f"audit: error: {part}: damaged") and err.count("\n") == 1


def test_a_query_interrupted_by_ctrl_c_is_one_line(tmp_path, secrets, capsys, monkeypatch):
    """A ^C while DuckDB runs a query reaches Python as ``RuntimeError('Query interrupted')``
    (DuckDB's binding; seen by hand with SIGINT during ``SELECT count(*) FROM range(1e10)``):
    the command line said "internal error" (found in review)."""
    import audit.ingest.query as query

    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(1)])], secrets, store)

    def interrupted(*_a, **_k):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(query, "scan", interrupted)
    code = main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")])
    assert code == 3 and capsys.readouterr().err == "audit: interrupted\n"
    monkeypatch.setattr(query, "scan", lambda *_a, **_k: 1 / 0)  # any other error: a bug's line
    assert main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")]) == 3
    assert "internal error: ZeroDivisionError" in capsys.readouterr().err


def test_a_ctrl_c_in_a_command_is_one_line_without_a_blank_one(
    tmp_path, secrets, capsys, monkeypatch
):
    """click answers a ^C with an empty line before its own "Aborted!" (noticed by hand: an
    empty line before "audit: aborted" on the terminal)."""
    import audit.ingest.query as query

    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(1)])], secrets, store)

    def ctrl_c(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(query, "scan", ctrl_c)
    code = main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")])
    assert code == 3 and capsys.readouterr().err == "audit: aborted\n"


def test_parts_without_a_manifest_are_never_deleted(tmp_path, secrets):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])
    ingest([log], secrets, store)
    (store / "manifest.json").unlink()
    parts = sorted((store / "deliveries").rglob("*.parquet"))
    with pytest.raises(InputError, match=r"holds store parts but no manifest\.json"):
        ingest([log], secrets, store)
    assert sorted((store / "deliveries").rglob("*.parquet")) == parts


def test_a_mistyped_store_folder_is_an_error_and_is_not_created(tmp_path, secrets, capsys):
    store = tmp_path / "nosuchstore"
    for argv in (
        ["verify", "--store", store, "--secrets", secrets, "--out", tmp_path / "v.csv"],
        ["analyze", "--store", store, "--secrets", secrets, "--out", tmp_path / "t"],
    ):
        assert main([str(a) for a in argv]) == 3
        assert "not an evidence store" in capsys.readouterr().err
    assert not store.exists()


def _fresh_ids(tmp_path, logs, secrets) -> list[str]:
    fresh = tmp_path / "fresh"
    ingest([logs], secrets, fresh)
    return _ids(fresh)


def test_numbered_rotation_into_an_archive_folder_keeps_every_record(tmp_path, secrets):
    """recv.jsonl -> archive/recv.jsonl.1 -> archive/recv.jsonl.2: an entry whose path now
    holds other stored content follows its own content; the store equals a fresh ingest."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    (logs / "archive").mkdir(parents=True)
    write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(0, 3)])
    ingest([logs], secrets, store)
    (logs / "recv.jsonl").rename(logs / "archive" / "recv.jsonl.1")
    write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(3, 6)])
    ingest([logs], secrets, store)
    (logs / "archive" / "recv.jsonl.1").rename(logs / "archive" / "recv.jsonl.2")
    (logs / "recv.jsonl").rename(logs / "archive" / "recv.jsonl.1")
    write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(6, 9)])
    ingest([logs], secrets, store)
    assert _ids(store) == _fresh_ids(tmp_path, logs, secrets) == [f"evt_{i}" for i in range(9)]
    assert ingest([logs], secrets, store).records == 0


@pytest.mark.parametrize(
    "damage",
    [
        lambda m: m["files"][0]["parts"].append("../../victim.txt"),
        lambda m: m["files"][0]["parts"].append("/etc/hostname"),
        lambda m: m.update(files={}),
        lambda m: m.update(secrets=[]),
        lambda m: m["files"][0].update(parts="month=2026-10/part-x.parquet"),
        lambda m: m["files"][0].update(records="5"),
    ],
)
def test_a_manifest_of_the_wrong_shape_stops_before_anything_is_deleted(tmp_path, secrets, damage):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])
    ingest([log], secrets, store)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    manifest = json.loads((store / "manifest.json").read_text())
    damage(manifest)
    (store / "manifest.json").write_text(json.dumps(manifest))
    parts = sorted((store / "deliveries").rglob("*.parquet"))
    with pytest.raises(InputError, match="not a store manifest"):
        ingest([log], secrets, store)
    assert sorted((store / "deliveries").rglob("*.parquet")) == parts and victim.exists()


@pytest.mark.parametrize("name", [".staging", "deliveries", "manifest.json", ".lock"])
def test_no_symbolic_link_in_the_store_is_followed(tmp_path, secrets, name):
    store, outside = tmp_path / "store", tmp_path / "outside"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(1)])
    store.mkdir()
    outside.mkdir()
    (store / name).symlink_to(outside / "target")
    with pytest.raises(InputError, match="a symbolic link"):
        ingest([log], secrets, store)
    assert list(outside.iterdir()) == []


def test_a_failed_first_ingest_leaves_a_store_the_next_one_completes(tmp_path, secrets):
    store = tmp_path / "store"
    good = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])
    bad = tmp_path / "b.jsonl.gz"
    bad.write_bytes(gzip.compress(good.read_bytes())[:-12])  # truncated
    with pytest.raises(InputError):
        ingest([good, bad], secrets, store)
    assert (store / "manifest.json").is_file()
    assert list((store / "deliveries").rglob("*.parquet")) == []  # this run's parts removed
    assert ingest([good], secrets, store).records == 3 and len(_ids(store)) == 3


def test_a_truncated_part_is_ingested_again(tmp_path, secrets):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(5)])
    ingest([log], secrets, store)
    part = next((store / "deliveries").rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:-10])
    r = ingest([log], secrets, store)
    assert r.files_changed == 1 and _ids(store) == [f"evt_{i}" for i in range(5)]


def test_workers_of_a_killed_ingest_neither_hold_its_lock_nor_outlive_it(tmp_path):
    """``kill -9`` of an ingest while its forked workers run: they held the store's lock (an
    inherited descriptor) for ever after, and every later ingest waited on it."""
    import signal
    import subprocess
    import sys
    import time

    from audit.locks import try_lock_file

    script = (
        "import multiprocessing, os, signal, sys, time\n"
        "from pathlib import Path\n"
        "from audit.ingest.workers import fork_pool\n"
        "from audit.ingest.store import Store\n"
        "with Store(Path(sys.argv[1])).lock():\n"
        "    pool = fork_pool(2)\n"
        "    pool.submit(time.sleep, 60)\n"
        "    time.sleep(1.0)\n"
        "    print(*pool._processes, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(store)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL
    workers = proc.stdout.split()
    assert len(workers) >= 1
    deadline = time.monotonic() + 120  # a guard against hangs, not a bound on speed
    with open(store / ".lock", "a+b") as f:
        while not try_lock_file(f):
            assert time.monotonic() < deadline, "the killed ingest's workers hold its lock"
            time.sleep(0.1)
    while any(_alive(w) for w in workers):  # they die with their parent
        assert time.monotonic() < deadline, "the killed ingest's workers outlive it"
        time.sleep(0.1)


def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except OSError:
        return False


def test_a_part_replaced_during_a_read_says_to_run_again(tmp_path, secrets, capsys, monkeypatch):
    """An ingest that re-verifies replaces parts: a reader that listed them before gets
    DuckDB's "No files found"; the one line says what happened and what to do."""
    import duckdb

    from audit.ingest import scan

    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(1)])], secrets, store)

    def gone(*a, **k):
        raise duckdb.IOException('IO Error: No files found that match the pattern "x.parquet"')

    monkeypatch.setattr(scan, "scan", gone)
    monkeypatch.setattr("audit.ingest.query.scan", gone, raising=False)
    code = main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")])
    err = capsys.readouterr().err
    assert code == 3 and "changed while it was read" in err and "run again" in err


def test_a_deleted_lock_file_lets_no_second_writer_in_and_a_waiter_says_so(tmp_path, secrets):
    import threading
    import time
    import warnings

    from audit.ingest.store import Store

    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])
    ingest([log], secrets, store)
    done, said = threading.Event(), []

    def second() -> None:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ingest([log], secrets, store)
        said.extend(str(x.message) for x in w)
        done.set()

    with Store(store).lock():
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        assert not done.is_set()
        (store / ".lock").unlink()  # an operator "unsticking" the store
        t2 = threading.Thread(target=ingest, args=([log], secrets, store))
        t2.start()
        time.sleep(0.3)
        assert not done.is_set() and t2.is_alive()  # the folder's own lock holds both
    t.join(10)
    t2.join(10)
    assert done.is_set() and any("another ingest is writing; waiting" in m for m in said)


def test_rotation_keeps_every_record_whatever_the_order_of_the_files(tmp_path, secrets):
    """The live name sorts before the rotated one: it must not be taken for a changed file
    (its stored records deleted, then read again from the rotated file), and a cron that
    ingests only the live log and the last rotated one must lose nothing."""
    import shutil

    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    live, n = logs / "recv.jsonl", 0
    for generation in range(4):
        if generation:
            if (logs / "recv.jsonl.1").exists():
                (logs / "recv.jsonl.1").rename(logs / "recv.jsonl.2")
            live.rename(logs / "recv.jsonl.1")
        write_jsonl(live, [_rec(i) for i in range(n, n + 2)])
        n += 2
        r = ingest([p for p in (live, logs / "recv.jsonl.1") if p.exists()], secrets, store)
        assert (r.records, r.files_changed) == (2, 0)  # only the new log is read
    assert _ids(store) == sorted(f"evt_{i}" for i in range(8))
    # copytruncate: the live content copied to the rotated name, the live file emptied
    shutil.copy(live, logs / "recv.jsonl.1")
    write_jsonl(live, [_rec(i) for i in range(8, 10)])
    r = ingest([logs], secrets, store)
    assert (r.records, r.files_changed) == (2, 0)
    assert _ids(store) == sorted(f"evt_{i}" for i in range(10))


def test_the_python_api_gets_one_line_for_a_damaged_or_replaced_part(tmp_path, secrets):
    """A notebook calling the store's readers gets an InputError, not DuckDB's exception:
    a truncated part names the damage; a part gone while read says to run again."""
    from audit.ingest.receipts import load_first_receipts
    from audit.ingest.scan import scan

    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])], secrets, store)
    part = next((store / "deliveries").rglob("*.parquet"))
    good = part.read_bytes()
    part.write_bytes(good[:100])
    for read in (
        lambda: load_deliveries(store, columns=["event_id"]),
        lambda: load_first_receipts(store),
    ):
        with pytest.raises(InputError, match=f"^{re.escape(str(part))}: damaged"):
            read()
    part.write_bytes(good)
    gone = part.with_name("part-gone.parquet")
    with pytest.raises(InputError, match=r"changed while it was read \(1 part\(s\)"):
        scan([part, gone], ["event_id"], "", [])
