"""Hostile or unlucky inputs (issue 9, section 2): bombs, unreadable folders, loops, odd fields."""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import pandas as pd
import pytest

from audit.errors import InputError, LoadError, OutputError, SecretsError
from audit.ingest.compressed import inflate
from audit.ingest.load import load_captures
from audit.ingest.secrets import SecretStore, read_secrets
from audit.ingest.signatures import sign
from audit.ingest.verification import verify_frame
from audit.paths import PathWarning
from tests.builders import capture, write_jsonl

BODY = '{"id":"evt_1","event":"incident.created","timestamp":"2026-10-01T00:00:00Z","data":{}}'
SECRET = "hostile-inputs-secret"


def _bomb(path: Path, expanded_mib: int) -> Path:
    """A valid single-member gzip of ``expanded_mib`` MiB of zeros, built in about a second.

    One MiB of zeros is deflated once with a full flush (a byte-aligned block that needs no
    earlier data) and the block is repeated; the trailer holds the true CRC and size.
    """
    block = bytes(2**20)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(expanded_mib):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, (expanded_mib * 2**20) & 0xFFFFFFFF)
    path.write_bytes(header + chunk * expanded_mib + comp.flush() + trailer)
    return path


def test_the_bomb_builder_makes_valid_gzip(tmp_path):
    assert gzip.decompress(_bomb(tmp_path / "b.gz", 3).read_bytes()) == bytes(3 * 2**20)


# -- compressed input ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_with_bounded_memory(tmp_path):
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", 4096)  # ~4 MB on disk, 4 GiB inflated
    assert bomb.stat().st_size < 6 * 2**20
    script = f"""
import json, resource, sys
from audit.errors import LoadError
from audit.ingest.load import load_captures
try:
    load_captures([{str(bomb)!r}], workers=1)
    outcome = "loaded"
except LoadError as e:
    outcome = str(e)
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"outcome": outcome, "peak_kb": peak_kb}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(bomb) in result["outcome"] and "gzip bomb" in result["outcome"]
    assert result["peak_kb"] < 2**20, f"peak {result['peak_kb'] / 2**10:.0f} MiB"


def test_expansion_limits_are_overridable(tmp_path, monkeypatch):
    small = tmp_path / "x.jsonl.gz"
    small.write_bytes(gzip.compress(b"\n" * (20 * 2**20)))  # 20 MiB of blank lines: ratio ~1000
    with pytest.raises(LoadError, match="more than 200 times"):
        load_captures([small])
    monkeypatch.setenv("AUDIT_MAX_EXPANSION_RATIO", "0")  # ratio check off
    assert len(load_captures([small]).deliveries) == 0
    with pytest.raises(LoadError, match="beyond 1000000 bytes"):
        load_captures([small], max_expanded_bytes=1_000_000)


def test_multi_member_gzip_and_padding_are_read(tmp_path):
    line = json.dumps(capture(BODY)).encode() + b"\n"
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(line) + gzip.compress(line) + b"\0" * 16)
    assert len(load_captures([path]).deliveries) == 2
    assert inflate(path, path.read_bytes()) == line * 2


def test_an_empty_gz_file_is_reported_not_read_as_an_empty_log(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(b"")
    with pytest.raises(LoadError, match=r"x\.jsonl\.gz: empty file \(0 bytes\)"):
        load_captures([path])


@pytest.mark.parametrize("cut", [10, 40])
def test_a_truncated_gzip_names_the_file(tmp_path, cut):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(json.dumps(capture(BODY)).encode() * 50)[:cut])
    with pytest.raises(LoadError, match=f"{path}: truncated or corrupt gzip"):
        load_captures([path])


# -- folders, names, links -------------------------------------------------------------------


def _log(path: Path, second: int = 5) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_jsonl(path, [capture(BODY, received_at=f"2026-10-01T00:00:{second:02d}Z")])


def test_rotated_logs_are_read_and_everything_else_is_listed_in_one_warning(tmp_path):
    root = tmp_path / "caps"
    names = ["a.jsonl", "a.jsonl.1", "a.jsonl.2.gz", "b.ndjson-20261001", "c.har.1"]
    for i, n in enumerate(names[:4]):  # rotations of a log hold other records than the log
        _log(root / n, second=i)
    (root / "a.jsonl.2.gz").write_bytes(gzip.compress((root / "a.jsonl.2.gz").read_bytes()))
    (root / "c.har.1").write_text(json.dumps({"log": {"entries": []}}))
    (root / "notes.json").write_text("{}")
    (root / "app.log").write_text("x")
    (root / ".a.jsonl.tmp").write_text("half a record")
    (root / "gone.jsonl").symlink_to(root / "missing.jsonl")
    (root / "loop").symlink_to(root)  # a folder loop
    (root / "self.jsonl").symlink_to(root / "self.jsonl")  # a link loop
    with pytest.warns(PathWarning) as caught:
        caps = load_captures([root])
    assert len(caught) == 1
    msg = str(caught[0].message)
    for skipped in (
        "notes.json (not a capture log name)",
        "app.log",
        ".a.jsonl.tmp (hidden)",
        "gone.jsonl (dangling",
        "self.jsonl (symlink loop",
    ):
        assert skipped in msg
    assert "loop (symlink loop or folder already searched)" in msg
    assert sorted(Path(s).name for s in caps.inputs["source"]) == sorted(names)
    assert len(caps.deliveries) == 4  # the HAR has no entry


def test_a_double_star_glob_never_follows_a_symlink_loop(tmp_path):
    root = tmp_path / "caps"
    _log(root / "d1" / "x.jsonl")
    (root / "d1" / "back").symlink_to(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PathWarning)
        caps = load_captures([str(root / "**" / "*.jsonl")])
    assert caps.inputs["source"].tolist() == [str(root / "d1" / "x.jsonl")]


def test_an_unreadable_folder_is_an_error_naming_it(tmp_path, monkeypatch):
    # Root may read anything, so the refusal is simulated where the walk lists a folder.
    root = tmp_path / "caps"
    _log(root / "ok" / "a.jsonl")
    _log(root / "locked" / "b.jsonl")
    real = os.scandir

    def scandir(path):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(InputError, match=r"locked: cannot read \(Permission denied\)"):
        load_captures([root])
    for pattern in ("*/*.jsonl", "**/*.jsonl"):  # globs: never a silent skip
        root_glob = str(root / pattern)
        with pytest.raises(InputError, match=r"locked: cannot read"):
            load_captures([root_glob])
    real_stat = Path.stat

    def stat(self, *a, **k):  # a folder we may list but not search (mode r--)
        if self.parent.name == "locked":
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *a, **k)

    monkeypatch.setattr(Path, "stat", stat)
    with pytest.raises(InputError, match=r"locked/b\.jsonl: cannot read \(Permission denied\)"):
        load_captures([str(root / "*" / "b.jsonl")])


def test_a_dangling_link_given_by_name_is_an_error(tmp_path):
    (tmp_path / "x.jsonl").symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match="dangling symbolic link"):
        load_captures([tmp_path / "x.jsonl"])


# -- repeated headers, duplicate subscriptions -----------------------------------------------


@pytest.mark.parametrize(
    "headers_json",
    [
        '{"X-PhishFort-Signature": "%s", "X-PhishFort-Signature": "sha256=%s"}',
        '{"X-PhishFort-Signature": "%s", "x-phishfort-signature": "sha256=%s"}',
        '{"X-PhishFort-Signature": "%s", "X-PhishFort-Signatur\\u0065": "sha256=%s"}',
    ],
)
def test_a_delivery_header_named_twice_is_repeated_whatever_json_says(tmp_path, headers_json):
    good = sign(SECRET, "1790812800", BODY.encode())
    headers = headers_json % (good, "0" * 64)
    headers = headers[:-1] + ', "X-PhishFort-Timestamp": "1790812800"}'
    line = (
        '{"received_at": "2026-10-01T00:00:05Z", "subscription_id": "wh_1", '
        f'"headers": {headers}, "body": {json.dumps(BODY)}}}'
    )
    path = tmp_path / "x.jsonl"
    path.write_text(line + "\n")
    df = load_captures([path]).deliveries
    assert df["signature"][0] == f"{good}, sha256={'0' * 64}"
    store = SecretStore.from_values({"wh_1": [(SECRET, None)]})
    assert verify_frame(df, store)["verdict"][0] == "malformed_signature"


def test_a_subscription_named_twice_in_the_secrets_file_is_an_error(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"wh_1": [{"secret": "aaaaaaaa"}], "wh_1": [{"secret": "bbbbbbbb"}]}')
    os.chmod(path, 0o600)
    with pytest.raises(SecretsError, match="subscription 'wh_1' is named twice") as err:
        read_secrets(path)
    assert "aaaa" not in str(err.value) and "bbbb" not in str(err.value)


def test_a_group_readable_secrets_file_warns_with_its_mode(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"wh_1": [{"secret": "aaaaaaaa"}]}')
    os.chmod(path, 0o640)
    with pytest.warns(UserWarning, match=r"s\.json: secrets file is accessible .*mode 0640"):
        read_secrets(path)
    os.chmod(path, 0o600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_secrets(path)


# -- odd unrelated fields --------------------------------------------------------------------


def _signed(**extra) -> dict:
    return capture(BODY, signature=sign(SECRET, "1790812800", BODY.encode()), **extra)


@pytest.mark.parametrize(
    ("extra", "note", "column"),
    [
        ({"response_status": "204"}, "ignored response_status '204' (not an integer)", None),
        ({"response_status": 999}, "ignored response_status 999 (not an HTTP status", None),
        ({"response_ms": "slow"}, "ignored response_ms 'slow'", "response_ms"),
        ({"url": ["x"]}, "ignored url ['x'] (not a string)", "url"),
    ],
)
def test_an_odd_unrelated_field_is_emptied_and_the_record_still_verified(
    tmp_path, extra, note, column
):
    df = load_captures([write_jsonl(tmp_path / "x.jsonl", [_signed(**extra)])]).deliveries
    column = column or "response_status"
    assert pd.isna(df[column][0])
    v = verify_frame(df, SecretStore.from_values({"wh_1": [(SECRET, None)]}))
    assert v["verdict"][0] == "valid"
    assert note in v["detail"][0]


def test_a_header_without_value_that_is_not_a_delivery_header_is_ignored(tmp_path):
    rec = _signed()
    rec["headers"] = [[k, v] for k, v in rec["headers"].items()] + [["X-Trace"]]
    df = load_captures([write_jsonl(tmp_path / "x.jsonl", [rec])]).deliveries
    v = verify_frame(df, SecretStore.from_values({"wh_1": [(SECRET, None)]}))
    assert (v["verdict"][0], v["detail"][0]) == (
        "valid",
        "ignored header 'X-Trace' without a string value",
    )


def _har(tmp_path: Path, *, post: dict | None, status: object = 204, extra_header=None) -> Path:
    sig = sign(SECRET, "1790812800", BODY.encode())
    headers = [
        {"name": "X-PhishFort-Signature", "value": sig},
        {"name": "X-PhishFort-Timestamp", "value": "1790812800"},
    ] + ([extra_header] if extra_header else [])
    request = {"method": "POST", "url": "https://r.example/h", "headers": headers}
    if post is not None:
        request["postData"] = post
    entry = {
        "startedDateTime": "2026-10-01T00:00:05Z",
        "request": request,
        "response": {"status": status},
        "time": 12,
    }
    path = tmp_path / "x.har"
    path.write_text(json.dumps({"log": {"entries": [entry]}}))
    return path


@pytest.mark.parametrize(
    ("status", "note"),
    [(999, "ignored response_status 999"), ("204", "ignored response_status '204'")],
)
def test_har_odd_status_is_emptied_with_detail(tmp_path, status, note):
    path = _har(tmp_path, post={"mimeType": "application/json", "text": BODY}, status=status)
    df = load_captures([path]).deliveries
    v = verify_frame(df, SecretStore.from_values({"wh_1": [(SECRET, None)]}))
    assert v["verdict"][0] == "valid" and note in v["detail"][0]
    assert pd.isna(v["response_status"][0])


def test_har_header_without_value_is_ignored(tmp_path):
    path = _har(tmp_path, post={"text": BODY}, extra_header={"name": "X-Trace"})
    v = verify_frame(
        load_captures([path]).deliveries, SecretStore.from_values({"wh_1": [(SECRET, None)]})
    )
    assert v["verdict"][0] == "valid" and "ignored header 'X-Trace'" in v["detail"][0]


def test_har_body_given_only_as_params_is_unreadable(tmp_path):
    post = {
        "mimeType": "application/x-www-form-urlencoded",
        "params": [{"name": "a", "value": "1"}],
    }
    df = load_captures([_har(tmp_path, post=post)]).deliveries
    assert df["verdict"][0] == "unreadable"
    assert df["detail"][0] == "body bytes not in the HAR (postData has params only)"


# -- outputs ---------------------------------------------------------------------------------


def test_a_full_disk_names_the_path_and_keeps_the_previous_file(tmp_path, monkeypatch):
    from audit import atomic
    from audit.cli import main
    from tests.builders import write_secrets

    log = write_jsonl(tmp_path / "x.jsonl", [_signed()])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    out = tmp_path / "verdicts.csv"
    out.write_text("previous\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OutputError, match=f"{out}: cannot write \\(No space left on device\\)"):
        from audit.safe import write_csv

        write_csv(pd.DataFrame({"a": [1]}), out)
    assert main(["verify", str(log), "--secrets", str(secrets), "--out", str(out)]) == 3
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
