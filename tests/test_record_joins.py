"""A record is known by what it is (``record_sha256``), not where it was (issue 44).

After a log is copytruncated, truncated or rewritten, or when two receivers' same-named daily
files reach one store, a file and line no longer name one record. Each flow below is built with
shell-level file operations on a simulated week; then the raw captures and the store must give
the same counts, and every drill-down's ``.evidence`` must show the bodies that the capture
files hold for that event (read here with plain json, apart from the code under test).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import shutil
import warnings
from collections import Counter
from pathlib import Path

import pytest

import audit
from audit.demo.simulate import simulate
from audit.ingest.load import LoadWarning, load_captures
from audit.ingest.secrets import read_secrets
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from tests.builders import capture, write_jsonl, write_secrets

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """A simulated week's daily capture files (in day order) and its secrets file."""
    root = tmp_path_factory.mktemp("joins")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = simulate(root / "demo", days=7, incidents=20)
    days = sorted((root / "demo" / "captures").glob("*.jsonl"))
    return days, sim.secrets


def _lines(paths: list[Path]) -> list[bytes]:
    return [line for p in paths for line in p.read_bytes().splitlines(keepends=True)]


def _record(line: bytes) -> dict | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def _body(rec: dict) -> bytes | None:
    if isinstance(rec.get("body"), str):
        return rec["body"].encode()
    if isinstance(rec.get("body_b64"), str):
        return base64.b64decode(rec["body_b64"])
    return None


def _bodies_by_event(files: list[Path]) -> dict[str, set[bytes]]:
    """Every body the files hold, by its envelope's ``id`` (plain json)."""
    out: dict[str, set[bytes]] = {}
    for line in _lines(files):
        rec = _record(line)
        body = None if rec is None else _body(rec)
        try:
            envelope = json.loads(body) if body is not None else None
        except ValueError:
            envelope = None
        if isinstance(envelope, dict) and isinstance(envelope.get("id"), str):
            out.setdefault(envelope["id"], set()).add(body)
    return out


def _readable_line(line: bytes) -> bool:
    """A record the readers can read: a JSON object with a body (the simulator's unreadable
    lines are torn or have none)."""
    rec = _record(line)
    return rec is not None and ("body" in rec or "body_b64" in rec)


def _readable(files: list[Path]) -> int:
    """The distinct readable records of the files (plain json): a line seen in an earlier file
    counts once, a line repeated within one file twice."""
    seen: set[bytes] = set()
    n = 0
    for f in files:
        here = [line for line in f.read_bytes().splitlines() if _readable_line(line)]
        n += sum(1 for line in here if line not in seen)
        seen.update(here)
    return n


def _check(raw_logs: list[Path], store: Path, secrets: Path) -> tuple[object, object]:
    """The raw captures ``raw_logs`` and ``store`` agree, and every drill-down shows the bodies
    the capture files hold (the files read: ``raw_logs``)."""
    a = audit.open(logs=raw_logs, secrets=secrets, progress=False)
    b = audit.open(store=store, secrets=secrets, progress=False)
    files = sorted(p for x in raw_logs for p in ([x] if x.is_file() else x.rglob("*.jsonl*")))
    assert len(a.deliveries) == len(b.deliveries)
    assert a.verdict_counts().equals(b.verdict_counts())
    readable = int((b.deliveries["verdict"] != "unreadable").sum())
    assert readable == _readable(files)
    assert len(a.events) == len(b.events) and len(a.incidents) == len(b.incidents)
    want = _bodies_by_event(files)
    for wb in (a, b):
        ids = sorted(wb.deliveries["event_id"].dropna().unique())
        assert len(ids) > 50
        for event_id in ids[:: len(ids) // 20]:  # 20 spread over all (each reads files again)
            t = wb.event(event_id)
            assert len(t.evidence) == len(t)
            assert set(t.evidence["body"]) == want[event_id], event_id
        for sub in wb.deliveries["subscription_id"].dropna().unique():
            t = wb.subscription(sub)  # was pandas' MergeError
            assert len(t.evidence) == len(t)
            assert t.evidence["body"].notna().sum() == t["event_id"].notna().sum()
    return a, b


def _ingest(paths: list[Path], secrets: Path, store: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ingest(paths, secrets, store, workers=1)


TORN = b'{"received_at": "2026-10-0'


def _torn_at(content: bytes, at: list[int], torn: bytes = TORN) -> bytes:
    """``content`` with a torn line inserted so that it stands at each line number ``at``
    (1-based): an unreadable record at the same line as one of an earlier version."""
    lines = content.splitlines(keepends=True)
    for n in sorted(at):
        lines.insert(n - 1, torn + b"\n")
    return b"".join(lines)


def _unreadable_lines(content: bytes) -> list[int]:
    return [n for n, line in enumerate(content.splitlines(), 1) if _record(line) is None]


def test_copytruncate(week, tmp_path):
    days, secrets = week
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    live = logs / "receiver.jsonl"
    live.write_bytes(b"".join(_lines(days[:3])))
    _ingest([logs], secrets, store)
    # logrotate's copytruncate: copied aside, truncated in place, then written again from
    # line 1 (a torn line where the earlier content had its unreadable ones: both not valid,
    # at one source and line in the store).
    shutil.copy(live, logs / "receiver.jsonl.1")
    torn = _unreadable_lines(live.read_bytes())
    assert torn  # the simulator plants some
    with live.open("r+b") as f:
        f.truncate(0)
    live.write_bytes(_torn_at(b"".join(_lines(days[3:])), torn))
    _ingest([logs], secrets, store)
    _check([logs], store, secrets)


def test_truncation(week, tmp_path):
    days, secrets = week
    logs, aside, store = tmp_path / "logs", tmp_path / "aside", tmp_path / "store"
    logs.mkdir()
    aside.mkdir()
    log = logs / "receiver.jsonl"
    log.write_bytes(b"".join(_lines(days[:4])))
    _ingest([logs], secrets, store)
    shutil.copy(log, aside / "receiver.jsonl")  # what the store keeps of it, for the raw read
    torn = _unreadable_lines(log.read_bytes())
    with log.open("r+b") as f:  # truncated, then written again from line 1
        f.truncate(0)
        f.write(_torn_at(b"".join(_lines(days[4:])), torn))
    _ingest([logs], secrets, store)
    _check([aside, logs], store, secrets)


def test_rewrite(week, tmp_path):
    days, secrets = week
    logs, aside, store = tmp_path / "logs", tmp_path / "aside", tmp_path / "store"
    logs.mkdir()
    aside.mkdir()
    log = logs / "receiver.jsonl"
    log.write_bytes(b"".join(_lines(days[:4])))
    _ingest([logs], secrets, store)
    shutil.copy(log, aside / "receiver.jsonl")
    # Rewritten without every third line, followed by the next days: the same records at
    # other lines, and new ones at lines the earlier content used.
    kept = [line for n, line in enumerate(_lines(days[:4]), 1) if n % 3]
    log.write_bytes(b"".join(kept + _lines(days[4:])))
    _ingest([logs], secrets, store)
    _check([aside, logs], store, secrets)


def test_two_receivers_same_named_files(week, tmp_path):
    days, secrets = week
    a, b, store = tmp_path / "a", tmp_path / "b", tmp_path / "store"
    for d in (a, b):
        d.mkdir()
    # Two receivers write daily files of the same names, each its share of the requests.
    for day in days:
        lines = _lines([day])
        (a / day.name).write_bytes(b"".join(lines[0::2]))
        (b / day.name).write_bytes(b"".join(lines[1::2]))
    # Both ingested into one store, through one place (a sync job copies each receiver's
    # folder there in turn): the same paths, other content.
    incoming = tmp_path / "incoming"
    for d in (a, b):
        shutil.rmtree(incoming, ignore_errors=True)
        shutil.copytree(d, incoming)
        _ingest([incoming], secrets, store)
    _check([a, b], store, secrets)
    # and as two folders, into another store
    other = tmp_path / "other"
    _ingest([a, b], secrets, other)
    _check([a, b], other, secrets)


def test_partial_copy(week, tmp_path):
    days, secrets = week
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    x = logs / "x.jsonl"
    x.write_bytes(b"".join(_lines(days)))
    head = _lines([x])[:200]  # head -200 x.jsonl > x.partial-copy.jsonl
    (logs / "x.partial-copy.jsonl").write_bytes(b"".join(head))
    _ingest([logs], secrets, store)
    assert any(not _readable_line(line) for line in head)  # a planted unreadable line
    # every line of the copy: a torn line among them is known by its bytes, as the store has it
    with pytest.warns(LoadWarning, match=rf"^{len(head)} record\(s\) seen in more than one"):
        got = load_captures([logs]).deliveries
    assert int((got["verdict"] != "unreadable").sum()) == _readable([x])
    a, b = _check([logs], store, secrets)
    assert _readable([x]) == int((a.deliveries["verdict"] != "unreadable").sum())

    def said(wb) -> Counter:
        f = wb.findings
        return Counter(zip(f["check_id"], f["status"].astype(str), f["reason"], strict=True))

    assert said(a) == said(b)  # the retry control failed from the raw captures alone


def test_raw_captures_and_the_store_know_each_record_by_the_same_hash(week, tmp_path):
    # An unreadable line of a log is known by its bytes, as the store knows it (a gzip file's
    # read inflated), and a subscription inferred from its secret is not one logged.
    days, secrets = week
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    content = _torn_at(b"".join(_lines(days[:2])), [5], torn=b'{"torn in the gzip file')
    with gzip.open(logs / "receiver.jsonl.1.gz", "wb") as f:
        f.write(content)
    (logs / "receiver.jsonl").write_bytes(_torn_at(b"".join(_lines(days[2:])), [5]))
    _ingest([logs], secrets, store)
    a = audit.open(logs=[logs], secrets=secrets, progress=False)
    b = audit.open(store=store, secrets=secrets, progress=False)
    assert (a.deliveries["verdict"] == "unreadable").sum() >= 2
    assert sorted(a.deliveries["record_sha256"]) == sorted(b.deliveries["record_sha256"])
    got = load_captures([logs], record_sha256=True).deliveries
    assert sorted(got["record_sha256"]) == sorted(b.deliveries["record_sha256"])
    # verified as it is read: a subscription inferred from its secret is not one logged
    verified = load_captures([logs], record_sha256=True, secrets=read_secrets(secrets))
    assert (verified.deliveries["subscription_id"] == "wh_siem").any()
    assert sorted(verified.deliveries["record_sha256"]) == sorted(b.deliveries["record_sha256"])
    # the known answer for one: the torn line of the gzip file, by the recipe of docs/scale.md
    torn = got[(got["verdict"] == "unreadable") & got["source"].str.endswith(".gz")]
    assert torn["line"].tolist() == [5]
    want = hashlib.sha256(b"audit unreadable line v1\n" + b'{"torn in the gzip file').hexdigest()
    assert torn["record_sha256"].iloc[0] == want


def test_a_line_repeated_within_a_file_stays_two_receipts(tmp_path):
    secret = "whsec_joins_1"
    body = '{"id":"evt_1","event":"incident.created","data":{"incidentId":"inc_1"}}'
    other = '{"id":"evt_2","event":"incident.created","data":{"incidentId":"inc_2"}}'
    one = capture(body, signature=sign(secret, 1790812800, body.encode()))
    two = capture(other, signature=sign(secret, 1790812800, other.encode()))
    logs = tmp_path / "logs"
    logs.mkdir()
    write_jsonl(logs / "x.jsonl", [one, one, two])  # the receiver logged one request twice
    write_jsonl(logs / "x.partial-copy.jsonl", [one, one])  # part of it, copied beside it
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": secret}]})
    _ingest([logs], secrets, tmp_path / "store")
    with pytest.warns(LoadWarning, match=r"^2 record\(s\) seen in more than one file"):
        raw = load_captures([logs]).deliveries
    assert raw["line"].tolist() == [1, 2, 3]  # by hand: x.jsonl's three receipts
    stored = audit.open(store=tmp_path / "store", progress=False).deliveries
    assert sorted(stored["line"]) == [1, 2, 3]
