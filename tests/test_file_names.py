"""Capture logs whose names are not UTF-8 (a Latin-1 system's ``café.jsonl``).

``str(path)`` holds such a byte as a lone surrogate, which no Arrow column, UTF-8 output or
JSON file can hold: every command ended in "internal error". The name is now given with the
byte escaped (``caf\\xe9.jsonl``), and the store still finds the file by its real name.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest

from audit.cli import main
from audit.ingest.signatures import sign
from audit.paths import source_name
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_file_names_1"
BODY = '{"id":"evt_n","event":"incident.created","data":{"incidentId":"inc_1"}}'
TS = 1790812800

pytestmark = pytest.mark.skipif(sys.platform == "darwin", reason="APFS refuses such names")


@pytest.fixture
def latin1_log(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    path = folder / os.fsdecode(b"caf\xe9.jsonl")
    record = capture(BODY, signature=sign(SECRET, TS, BODY.encode()), timestamp=str(TS))
    return write_jsonl(path, [record, "not json"])


def _sources(out: Path) -> list[tuple[str, str, str]]:
    with out.open(encoding="utf-8") as f:
        return [(r["source"], r["line"], r["verdict"]) for r in csv.DictReader(f)]


def test_source_name_escapes_only_the_bytes_that_are_not_utf8():
    assert source_name(os.fsdecode(b"/a/caf\xe9.jsonl")) == "/a/caf\\xe9.jsonl"  # by hand
    assert source_name("/a/café.jsonl") == "/a/café.jsonl"
    assert source_name(b"/a/caf\xc3\xa9.jsonl") == "/a/café.jsonl"


def test_verify_names_the_file_with_its_byte_escaped(latin1_log, tmp_path):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    out = tmp_path / "v.csv"
    assert (
        main(["verify", str(latin1_log.parent), "--secrets", str(secrets), "--out", str(out)]) == 0
    )
    name = str(latin1_log.parent / "caf\\xe9.jsonl")
    assert _sources(out) == [(name, "1", "valid"), (name, "2", "unreadable")]


def test_the_store_ingests_it_once_and_reads_it_back(latin1_log, tmp_path):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    store = tmp_path / "store"
    args = ["ingest", str(latin1_log.parent), "--secrets", str(secrets), "--store", str(store)]
    assert main(args) == 0
    assert main(args) == 0  # known by its real name: a no-op, not a "changed" file
    out = tmp_path / "v.csv"
    assert (
        main(["verify", "--store", str(store), "--secrets", str(secrets), "--out", str(out)]) == 0
    )
    name = str(latin1_log.parent / "caf\\xe9.jsonl")
    assert _sources(out) == [(name, "1", "valid"), (name, "2", "unreadable")]
    analysis = tmp_path / "a"
    assert (
        main(["analyze", "--store", str(store), "--secrets", str(secrets), "--out", str(analysis)])
        == 0
    )


def test_a_name_with_a_newline_is_found_in_a_folder(tmp_path):
    # The name pattern's ".+" stopped at the newline: the file was skipped as "not a capture
    # log name".
    from audit.ingest.load import expand_paths

    folder = tmp_path / "logs"
    folder.mkdir()
    log = write_jsonl(folder / "new\nline.jsonl", [capture(BODY)])
    assert expand_paths([folder]) == [log]


def test_a_snapshot_and_the_inputs_table_name_it_escaped(latin1_log, tmp_path):
    import json

    from audit.ingest.load import load_captures

    snaps = tmp_path / "snaps"
    snaps.mkdir()
    doc = {"fetched_at": "2026-10-01T00:00:00Z", "base_url": "https://x",
           "response": {"data": [{"id": "wh_1", "url": "https://hooks.example/1"}]}}  # fmt: skip
    (snaps / os.fsdecode(b"list\xe9.json")).write_text(json.dumps(doc))
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    out = tmp_path / "a"
    args = ["analyze", str(latin1_log.parent), "--secrets", str(secrets)]
    assert main([*args, "--subscriptions", str(snaps), "--out", str(out)]) == 0
    inputs = load_captures([latin1_log.parent]).inputs
    assert list(inputs["source"]) == [str(latin1_log.parent / "caf\\xe9.jsonl")]
