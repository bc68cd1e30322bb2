"""Bounded reading (issue 35, point 5): a line over the record limit is skipped as a stream on
every reading route and counted unreadable with its line; a record that names a top-level key
twice is unreadable on both the exact and the fast path."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from audit.ingest import parallel
from audit.ingest.formats import jsonl
from audit.ingest.load import load_captures
from audit.ingest.secrets import SecretStore
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from audit.ingest.verdicts import read_logs
from tests import test_fast_path
from tests.builders import capture
from tests.test_fast_path import BODY1, STORE, both, valid

LIMIT = 1000
REASON = "record of 1,001 bytes, over the 1,000-byte limit: not parsed"


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(jsonl, "MAX_RECORD_BYTES", LIMIT)


def _good(i: int) -> bytes:
    return json.dumps(valid(received_at=1790812801 + i)).encode()


def _log(tmp_path: Path, long_line: bytes, gz: bool, last: bool = False) -> Path:
    lines = [_good(0), long_line] if last else [_good(0), long_line, _good(1)]
    data = b"\n".join(lines) + (b"" if last else b"\n")
    path = tmp_path / ("log.jsonl.gz" if gz else "log.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _secrets(tmp_path: Path) -> Path:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"wh_1": [{"secret": test_fast_path.SECRET}]}))
    path.chmod(0o600)
    return path


def _rows(frame) -> list[tuple[int, str, object]]:
    return [
        (int(r.line), str(r.verdict), r.detail if isinstance(r.detail, str) else None)
        for r in frame.itertuples()
    ]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("fill", [b"a", b"\0"])
def test_a_line_over_the_limit_is_unreadable_on_every_route(small_limit, tmp_path, gz, fill):
    path = _log(tmp_path, fill * (LIMIT + 1), gz)
    secrets = _secrets(tmp_path)
    expected = [(1, "valid", None), (2, "unreadable", REASON), (3, "valid", None)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = SecretStore.from_values({"wh_1": [(test_fast_path.SECRET, None)]})
        exact = load_captures([path], secrets=store, workers=1)
        assert _rows(exact.deliveries) == expected
        assert exact.inputs["unreadable"].tolist() == [1]
        for workers, piece_bytes in [(1, None), (2, 300)]:
            got = read_logs([path], secrets, workers=workers, piece_bytes=piece_bytes)
            assert [(r[0], r[1]) for r in _rows(got.rows)] == [
                (1, "valid"),
                (2, "unreadable"),
                (3, "valid"),
            ]
            assert got.inputs["unreadable"].tolist() == [1]
        result = ingest([path], secrets, tmp_path / "store", chunk_bytes=300, workers=2)
    assert (result.records, result.unreadable) == (3, 1)


@pytest.mark.parametrize("gz", [False, True])
def test_a_last_line_over_the_limit_without_newline(small_limit, tmp_path, gz):
    path = _log(tmp_path, b"\0" * (LIMIT + 5), gz, last=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = load_captures([path], workers=1).deliveries
    assert _rows(got)[1] == (2, "unreadable", REASON.replace("1,001", "1,005"))
    pieces = list(parallel.plan_pieces(path, piece_bytes=10))
    assert [p.overlong for p in pieces if p.overlong] == [{2: LIMIT + 5}]


def test_a_line_at_the_limit_is_read(small_limit, tmp_path):
    rec = valid()
    text = json.dumps(rec)
    pad = LIMIT - len(text) - len(', "x": ""')
    line = json.dumps({**rec, "x": "p" * pad}).encode()
    assert len(line) == LIMIT
    path = _log(tmp_path, line, gz=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = load_captures([path], workers=1).deliveries
    assert got["verdict"].isna().all() and len(got) == 3


def test_piece_planning_never_reads_a_long_line_into_a_piece(small_limit, tmp_path):
    path = _log(tmp_path, b"a" * 5000, gz=False)
    pieces = list(parallel.plan_pieces(path, piece_bytes=100))
    assert all(len(p.read()) <= LIMIT + 1 for p in pieces)
    long = [p for p in pieces if p.overlong]
    assert [(p.first_line, p.read(), p.overlong) for p in long] == [(2, b"\n", {2: 5000})]


_MEASURE = textwrap.dedent(
    """
    import gzip, resource, sys, warnings
    from pathlib import Path
    from audit.ingest.formats import jsonl
    from audit.ingest.load import load_captures
    from audit.ingest.verdicts import read_logs
    jsonl.MAX_RECORD_BYTES = 2**20
    path, secrets, route = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    warnings.simplefilter("ignore")
    if route == "load":
        rows = load_captures([path], workers=1).deliveries
    else:
        rows = read_logs([path], secrets, workers=1).rows
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) // 1024, rows["line"].tolist(), rows["detail"].tolist()[1])
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["load", "verify"])
def test_a_200_mb_line_in_gzip_is_skipped_in_bounded_memory(tmp_path, route):
    member = gzip.compress(b"a" * 8 * 2**20, 1)
    path = tmp_path / "log.jsonl.gz"
    with open(path, "wb") as f:  # 200 MiB of 'a' in ~200 KB: one line across 25 members
        f.write(gzip.compress(_good(0) + b"\n"))
        for _ in range(25):
            f.write(member)
        f.write(gzip.compress(b"\n" + _good(1) + b"\n"))
    env = {**os.environ, "AUDIT_MAX_EXPANSION_RATIO": "0"}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), str(_secrets(tmp_path)), route],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout.split(" ", 1)
    grown_mib = int(out[0])
    assert grown_mib < 40, out  # the line is 200 MiB; the limit 1 MiB
    assert "[1, 2, 3]" in out[1]
    assert f"record of {200 * 2**20:,} bytes, over the 1,048,576-byte limit" in out[1]


def _with(record: dict, key: str, value: object) -> str:
    """``record`` as a JSON line with ``key`` written once more at the end."""
    return json.dumps(record)[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (_with(valid(), "headers", {"X-PhishFort-Delivery-Id": "dlv_2"}), "headers"),
        (_with(valid(), "body", "{}"), "body"),
        (_with(valid(), "received_at", "2026-10-01T00:00:09Z"), "received_at"),
        (_with(valid(), "subscription_id", "wh_2"), "subscription_id"),
        (_with(valid(response_status=204), "response_status", 500), "response_status"),
        (_with(valid(), "x", 1).replace('"x"', '"h\\u0065aders"'), "headers"),
        ('{"body": "{}", ' + json.dumps(valid())[1:], "body"),
    ],
)
def test_a_top_level_key_named_twice_is_unreadable_on_both_paths(line, key):
    cols, slow = both([valid(), line, valid()])
    reason = f"duplicate key {key!r} (JSON would keep only the last)"
    assert cols["verdict"] == ["valid", "unreadable", "valid"]
    assert cols["detail"][1] == reason
    assert slow == 1


def test_repeats_inside_the_headers_or_the_body_are_not_the_records():
    body_dup = valid()
    body_dup["body"] = BODY1  # a body is signed bytes: a key twice in it is its own business
    twice = '{"id": 1, "id": 2}'
    inner = json.dumps(valid()).replace(
        '"Content-Type": "application/json"', '"Accept": "a", "Accept": "b"'
    )
    cols, _ = both(
        [
            body_dup,
            inner,
            capture(twice, signature=sign(test_fast_path.SECRET, 1790812800, twice.encode())),
        ]
    )
    assert "duplicate" not in str(cols["detail"])
    assert cols["verdict"] == ["valid", "valid", "valid"]


def test_a_quote_in_a_string_sends_the_record_to_the_exact_path_only():
    cols, slow = both([valid(url='https://x/"q"'), valid(received_at="2026-10-01T00:00:05Z")])
    assert cols["verdict"] == ["valid", "valid"] and slow == 1
    assert STORE is not None
