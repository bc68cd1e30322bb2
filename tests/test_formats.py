"""The capture-format registry: a file's format comes from its name, and a format added to
``FORMATS`` is found by every loader (the folder search, the loader, the verdict reader)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from audit.errors import LoadError
from audit.ingest.formats import FORMATS, format_of, har, jsonl
from audit.ingest.formats.base import Buffer, _Envelopes, _record
from audit.ingest.load import load_captures
from audit.ingest.verdicts import read_logs
from tests.builders import capture, write_secrets

BODY = '{"id":"evt_1","event":"webhook.test","timestamp":"2026-10-01T00:00:00Z","data":{}}'


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.jsonl", jsonl),
        ("a.NDJSON.2.gz", jsonl),
        ("a.har", har),
        ("a.har.1", har),
        ("a.har-2026100112.gz", har),
        ("a.txt", jsonl),  # a file named outright is read whatever its name: JSONL
        ("har", jsonl),
    ],
)
def test_format_of_a_file_name(name, expected):
    assert format_of(name) is expected


def _har_file(path):
    entry = {
        "startedDateTime": "2026-10-01T00:00:05Z",
        "request": {
            "method": "POST",
            "url": "https://hooks.example/wh_1",
            "headers": [{"name": "X-PhishFort-Timestamp", "value": "1790812805"}],
            "postData": {"mimeType": "application/json", "text": BODY},
        },
        "response": {"status": 204},
    }
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    return path


def test_a_rotated_har_file_is_read_as_har_by_the_verdict_reader(tmp_path):
    # Before the registry, the verdict reader knew HAR only as *.har and *.har.gz and parsed
    # x.har.1 as JSON Lines: one unreadable row instead of the HAR entry.
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": "s" * 32}]})
    path = _har_file(tmp_path / "x.har.1")
    rows = read_logs([path], secrets, columns=["line", "url", "verdict"]).rows
    assert rows["line"].tolist() == [1]
    assert rows["url"].tolist() == ["https://hooks.example/wh_1"]
    assert rows["verdict"].tolist() != ["unreadable"]
    assert load_captures([path]).deliveries["url"].tolist() == ["https://hooks.example/wh_1"]


def _parse_json_array(data: bytes, source: str, wanted: dict[str, str], first_line: int = 1):
    """A toy format: one JSON array of capture records; ``line`` is the element's index."""
    try:
        items = json.loads(data)
    except ValueError as e:
        raise LoadError(f"{source}: not a JSON array ({e})") from None
    buf, envelope = Buffer(), _Envelopes()
    for i, rec in enumerate(items, 1):
        problem = _record(buf, source, i, rec, wanted, envelope)
        if problem is not None:
            buf.add_unreadable(source, i, problem)
    return buf


TOY = SimpleNamespace(
    NAME="jsonarray", SUFFIXES=("jsonarray",), SPLITS_AT_LINES=False, parse=_parse_json_array
)


def test_a_format_added_to_the_registry_is_found_by_every_loader(tmp_path, monkeypatch):
    monkeypatch.setitem(FORMATS, "jsonarray", TOY)
    folder = tmp_path / "logs"
    folder.mkdir()
    records = [capture(BODY), capture(BODY, subscription_id="wh_2")]
    (folder / "a.jsonarray.1").write_text(json.dumps(records))
    (folder / "b.jsonl").write_text(json.dumps(capture(BODY, subscription_id="wh_3")) + "\n")
    loaded = load_captures([folder]).deliveries
    assert loaded[["line", "subscription_id"]].values.tolist() == [
        [1, "wh_1"],
        [2, "wh_2"],
        [1, "wh_3"],
    ]
    assert loaded["source"].str.endswith(("a.jsonarray.1", "b.jsonl")).all()
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": "s" * 32}]})
    rows = read_logs([folder], secrets, columns=["line", "subscription_id"]).rows
    assert rows["subscription_id"].tolist() == ["wh_1", "wh_2", "wh_3"]


def test_one_path_given_as_a_string_is_one_path_not_its_characters(tmp_path):
    # A bare string once reached the folder walk character by character: "/" walked the disk.
    from audit.ingest.verdicts import read_logs

    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "b.jsonl").write_text(json.dumps(capture(BODY)) + "\n")
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": "s" * 32}]})
    assert read_logs(str(folder), secrets, columns=["line"]).rows["line"].tolist() == [1]


def test_a_rotated_har_file_is_stored_as_har(tmp_path):
    # Before: the store told HAR by the name *.har[.gz] and read x.har.1 as JSON Lines, so
    # the one HAR entry became one unreadable row.
    from audit.ingest.query import load_analysis_inputs
    from audit.ingest.store import ingest

    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": "s" * 32}]})
    path = _har_file(tmp_path / "x.har.1")
    ingest([path], secrets, tmp_path / "store")
    got = load_analysis_inputs(
        tmp_path / "store",
        start="2026-10-01T00:00:00Z",
        end="2026-11-01T00:00:00Z",
        as_of="2026-11-01T00:00:00Z",
    ).deliveries
    assert got["verdict"].tolist() != ["unreadable"]
    assert got["url"].tolist() == ["https://hooks.example/wh_1"]


_REQ = {"method": "POST", "url": "https://a.example/", "headers": [], "postData": {"text": BODY}}
_ENTRY = '{"startedDateTime": "2026-10-01T00:00:05Z", "request": %s}'


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        # two requests in one entry: JSON keeps the second, which may not be what was signed
        (
            _ENTRY[:-1] % json.dumps(_REQ)  # the entry without its closing brace
            + ', "request": '
            + json.dumps({**_REQ, "url": "https://b.example/"})
            + "}",
            "duplicate key 'request' in the HAR entry",
        ),
        (
            _ENTRY % '{"url": "https://a.example/", "url": "https://b.example/", "headers": []}',
            "duplicate key 'url' in the request",
        ),
        (
            _ENTRY % '{"url": "u", "headers": [], "postData": {"text": "{}", "text": "[]"}}',
            "duplicate key 'text' in the request.postData",
        ),
        (
            _ENTRY % '{"url": "u", "headers": [{"name": "a", "value": "1", "value": "2"}]}',
            "duplicate key 'value' in the request header",
        ),
    ],
)
def test_a_har_entry_that_names_a_key_twice_is_unreadable_and_says_so(entry, said):
    good = json.dumps({"startedDateTime": "2026-10-01T00:00:06Z", "request": _REQ})
    doc = '{"log": {"version": "1.2", "entries": [' + entry + ", " + good + "]}}"
    columns = har.parse(doc.encode(), "x.har", {}).columns()
    assert columns["line"] == [1, 2]
    assert columns["detail"][0] == f"{said} (JSON would keep only the last)"
    assert columns["body"][1] == BODY.encode()  # the next entry is read
