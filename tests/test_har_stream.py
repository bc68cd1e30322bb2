"""HAR read as a stream (issue 44): entry by entry from a file object, never the whole document
decoded at once; a document naming ``log`` or ``entries`` twice is refused (it was read
last-wins, dropping entries); an escaped lone surrogate is still refused."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from audit.errors import LoadError
from audit.ingest.formats import har

BODY = '{"id":"evt_1","event":"webhook.test","timestamp":"2026-10-01T00:00:00Z","data":{}}'


def _entry(i: int) -> dict:
    return {
        "startedDateTime": f"2026-10-01T00:00:{i:02d}Z",
        "request": {
            "method": "POST",
            "url": f"https://hooks.example/{i}",
            "headers": [{"name": "X-PhishFort-Timestamp", "value": str(1790812800 + i)}],
            "postData": {"mimeType": "application/json", "text": BODY},
        },
        "response": {"status": 204},
    }


def _entries_json(n: int, first: int = 1) -> str:
    return ", ".join(json.dumps(_entry(i)) for i in range(first, first + n))


def _document(entries: str) -> str:
    return '{"log": {"entries": [' + entries + "]}}"


class _Counting(io.BytesIO):
    """A file object that records how far it was read when each entry was handed on."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads: list[int] = []

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        assert n is not None and n >= 0  # never "the rest of the file"
        got = super().read(n)
        self.reads.append(len(got))
        return got


def test_a_har_file_object_is_read_in_blocks_not_whole():
    # Before: orjson.loads of the whole document (300 MB took 2.66 GB). The parser now asks
    # the file for blocks of at most 1 MiB, so a HAR over 3 MiB takes several reads.
    entries = _entries_json(9000)
    doc = ('{"log": {"version": "1.2", "entries": [' + entries + "]}}").encode()
    assert len(doc) > 3 * 2**20
    f = _Counting(doc)
    columns = har.parse(f, "x.har", {}).columns()
    assert columns["line"] == list(range(1, 9001))
    assert columns["url"][:2] == ["https://hooks.example/1", "https://hooks.example/2"]
    assert len([n for n in f.reads if n]) >= 3 and max(f.reads) <= 2**20


def test_bytes_and_a_file_object_read_alike():
    doc = ('{"log": {"version": "1.2", "entries": [' + _entries_json(3) + "]}}").encode()
    a = har.parse(doc, "x.har", {}).columns()
    b = har.parse(io.BytesIO(doc), "x.har", {}).columns()
    assert a == b and a["body"] == [BODY.encode()] * 3


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        # Before: read last-wins, the first list's two entries dropped without a word.
        (
            '{"log": {"entries": [%s], "entries": [%s]}}',
            "log names the key 'entries' twice",
        ),
        (
            '{"log": {"entries": [%s]}, "log": {"entries": [%s]}}',
            "the document names the key 'log' twice",
        ),
    ],
)
def test_a_har_naming_log_or_entries_twice_is_refused_with_the_reason(tmp_path, doc, said):
    path = tmp_path / "x.har"
    path.write_text(doc % (_entries_json(2), _entries_json(2, first=3)))
    with pytest.raises(LoadError, match=f"not a HAR 1.2 file \\({said}"):
        har.parse(path.read_bytes(), str(path), {})


@pytest.mark.parametrize(
    "text",
    [
        "x\\ud800",  # a lone high surrogate (the C parser would read it as "?")
        "x\\ud800\\ud800\\udc00",
        "x\\udc00",  # a lone low one
    ],
)
def test_an_escaped_lone_surrogate_refuses_the_har_as_before(text):
    entry = _entry(1)
    doc = json.dumps({"log": {"entries": [entry]}}).replace(BODY.replace('"', '\\"'), text)
    assert text in doc
    with pytest.raises(LoadError, match=r"not a HAR 1\.2 file"):
        har.parse(doc.encode(), "x.har", {})


@pytest.mark.parametrize(
    "text", ["\\ud83d\\ude00", "\\\\ud800", "\\\\\\ud83d\\ude00"]
)  # a pair; a backslash then text; a backslash then a pair
def test_escaped_pairs_and_escaped_backslashes_are_read(text):
    doc = _document(json.dumps(_entry(1)).replace(BODY.replace('"', '\\"'), text))
    columns = har.parse(doc.encode(), "x.har", {}).columns()
    assert columns["body"] == [json.loads('"' + text + '"').encode("utf-8")]


def test_a_surrogate_pair_cut_between_two_reads_is_read():
    text = "\\ud83d\\ude00"
    doc = _document(json.dumps(_entry(1)).replace(BODY.replace('"', '\\"'), text))
    raw = doc.encode()
    at = raw.index(b"\\ud83d")
    for cut in range(at - 2, at + 13):
        columns = har.parse(_Cut(raw, cut), "x.har", {}).columns()
        assert columns["body"] == ["\U0001f600".encode()]


class _Cut(io.BytesIO):
    """A file whose first read stops after ``cut`` bytes."""

    def __init__(self, data: bytes, cut: int) -> None:
        super().__init__(data)
        self.cut: int | None = cut

    def read(self, n: int | None = -1) -> bytes:
        if self.cut is not None and n:
            n, self.cut = self.cut, None
        return super().read(n)


def test_the_capture_check_reads_a_har_only_until_an_entry_reads(tmp_path):
    # Before: the check before every command decoded the whole document (as long as the
    # command's own read, and as much memory), to find its first record.
    from audit.ingest.capture_check import check_captures, first_record

    doc = _document(_entries_json(5000)).encode()
    plain = tmp_path / "x.har"
    plain.write_bytes(b"\xef\xbb\xbf" + doc)
    packed = tmp_path / "y.har.gz"
    packed.write_bytes(gzip.compress(doc))
    for path in (plain, packed):
        seen = first_record(path)
        assert (seen.readable, seen.unreadable) == (1, 0)
    blank = tmp_path / "quiet.har"
    blank.write_bytes(b"\xef\xbb\xbf \n")
    assert check_captures([plain, packed, blank]) == [
        f"{blank}: empty, no capture record (a quiet day?)"
    ]
    empty_gz = tmp_path / "z.har.gz"
    empty_gz.write_bytes(b"")
    with pytest.raises(LoadError, match="empty file"):
        first_record(empty_gz)
    bad = tmp_path / "bad.har"
    bad.write_text('{"log": {"entries": "none"}}')
    with pytest.raises(LoadError, match=r"not a HAR 1\.2 file \(log\.entries is not a list\)"):
        first_record(bad)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_har_over_the_document_limit_is_refused_in_one_line(
    compressed, tmp_path, monkeypatch, capsys
):
    # Its entries are parsed one by one, but its bytes are held whole: past the limit the file
    # is refused naming itself, before it is read (plain) or once its inflated bytes pass it.
    from audit.cli import main
    from audit.ingest import records

    doc = _document(_entries_json(40)).encode()
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / ("x.har.gz" if compressed else "x.har")
    path.write_bytes(gzip.compress(doc) if compressed else doc)
    secrets = tmp_path / "s.json"
    secrets.write_text('{"wh_1": [{"secret": "whsec_har_limit"}]}')
    secrets.chmod(0o600)
    monkeypatch.setattr(records, "MAX_DOCUMENT_BYTES", len(doc) - 1)
    code = main(["verify", str(logs), "--secrets", str(secrets), "--out", str(tmp_path / "v.csv")])
    assert code == 3
    err = capsys.readouterr().err
    assert f"{path}: " in err and "a HAR may hold" in err and "Traceback" not in err
    monkeypatch.setattr(records, "MAX_DOCUMENT_BYTES", len(doc))
    assert records.read_whole(path) == doc  # at the limit: read


def test_the_document_limit_names_the_file_and_the_way_out(tmp_path, monkeypatch, capsys):
    from audit.ingest import records

    path = tmp_path / "big.har"
    path.write_bytes(_document(_entries_json(3)).encode())
    monkeypatch.setattr(records, "MAX_DOCUMENT_BYTES", 10)
    with pytest.raises(LoadError, match=r"big\.har: .* a HAR may hold .* JSON Lines"):
        records.read_whole(path)
