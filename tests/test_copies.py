"""A capture log and its copy (a backup beside it, a gzip of it) are read once.

The evidence store knows a file by its content and kept such a copy once; read from raw
captures it was counted twice, so a report from the store and one from the raw captures gave
different findings for the same inputs, and nothing said why.
"""

from __future__ import annotations

import csv
import gzip
import shutil
from pathlib import Path

import pytest

from audit.cli import main
from audit.ingest.identity import distinct_contents
from audit.ingest.load import LoadWarning, load_captures
from audit.ingest.signatures import sign
from audit.ingest.verdicts import verify_logs
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_copies_1"


def _log(path: Path, n: int, first: int = 0) -> Path:
    recs = []
    for i in range(first, first + n):
        body = f'{{"id":"evt_{i}","event":"incident.created","data":{{"incidentId":"inc_{i}"}}}}'
        recs.append(capture(body, signature=sign(SECRET, 1790812800, body.encode())))
    return write_jsonl(path, recs)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    (root / "backup").mkdir(parents=True)
    _log(root / "a.jsonl", 3)
    _log(root / "b.jsonl", 2, first=10)
    shutil.copy(root / "a.jsonl", root / "backup" / "a.jsonl")  # the same bytes
    with gzip.open(root / "backup" / "b.jsonl.gz", "wb") as f:  # the same content, gzipped
        f.write((root / "b.jsonl").read_bytes())
    _log(root / "c.jsonl", 3, first=20)  # the size of a.jsonl's, another content
    return root


def test_copies_are_found_by_content_not_by_name_or_size(logs):
    files = sorted([logs / "a.jsonl", logs / "b.jsonl", logs / "c.jsonl",
                    logs / "backup" / "a.jsonl", logs / "backup" / "b.jsonl.gz"])  # fmt: skip
    kept, left_out = distinct_contents(files)
    assert left_out == [
        (logs / "backup" / "a.jsonl", logs / "a.jsonl"),
        (logs / "backup" / "b.jsonl.gz", logs / "b.jsonl"),
    ]
    assert kept == [logs / "a.jsonl", logs / "b.jsonl", logs / "c.jsonl"]


def test_raw_captures_count_a_copy_once_and_say_so(logs, tmp_path):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    with pytest.warns(LoadWarning, match=r"backup/a\.jsonl: the same content as .*logs/a\.jsonl"):
        rows = verify_logs([logs], secrets)
    assert len(rows) == 3 + 2 + 3  # by hand: a, b, c once each
    with pytest.warns(LoadWarning, match="read once"):
        assert len(load_captures([logs]).deliveries) == 8


def test_raw_and_store_give_the_same_rows(logs, tmp_path):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    raw, stored = tmp_path / "raw.csv", tmp_path / "stored.csv"
    assert main(["verify", str(logs), "--secrets", str(secrets), "--out", str(raw)]) == 0
    store = str(tmp_path / "store")
    args = ["verify", str(logs), "--store", store, "--secrets", str(secrets), "--out", str(stored)]
    assert main(args) == 0

    def rows(path: Path) -> list[dict]:
        with path.open(encoding="utf-8") as f:
            return list(csv.DictReader(f))

    assert rows(raw) == rows(stored) and len(rows(raw)) == 8


def test_empty_logs_are_not_copies_of_each_other(tmp_path):
    # Every empty daily file hashes alike; none holds a record to count twice.
    files = [tmp_path / "2026-10-02.jsonl", tmp_path / "2026-10-03.jsonl"]
    for f in files:
        f.write_bytes(b"")
    assert distinct_contents(files) == (files, [])
