"""Loading capture logs: every record accounted for, bytes kept exact, files found."""

from __future__ import annotations

import gzip
import hashlib
import json
import warnings

import pandas as pd
import pytest

from audit.errors import InputError, LoadError
from audit.ingest.load import LoadWarning, load_captures
from tests.builders import capture, write_jsonl

BODY = '{"id":"evt_1","event":"incident.created","data":{"incidentId":"inc_1"}}'


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "not a JSON object"),
        (json.dumps({"headers": {}, "body": BODY}), "no received_at"),
        (json.dumps({"received_at": None, "headers": {}, "body": BODY}), "no received_at"),
        (json.dumps({"received_at": "yesterday", "headers": {}, "body": BODY}), "not an ISO 8601"),
        (json.dumps({"received_at": True, "headers": {}, "body": BODY}), "not an ISO 8601"),
        (json.dumps({"received_at": "2026-10-01T00:00:00Z", "body": BODY}), "no headers"),
        (
            json.dumps({"received_at": "2026-10-01T00:00:00Z", "headers": "x", "body": BODY}),
            "headers must be an object or a list",
        ),
        (
            json.dumps(
                {"received_at": "2026-10-01T00:00:00Z", "headers": [["a", "b", "c"]], "body": BODY}
            ),
            "headers must be an object or a list",
        ),
        (
            json.dumps(
                {"received_at": "2026-10-01T00:00:00Z", "headers": {"X-PhishFort-Timestamp": 1}}
                | {"body": BODY}
            ),
            "not a string",
        ),
        (json.dumps({"received_at": "2026-10-01T00:00:00Z", "headers": {}}), "neither body"),
        (
            json.dumps(
                {"received_at": "2026-10-01T00:00:00Z", "headers": {}}
                | {"body_omitted_bytes": 10485761, "response_status": 413}
            ),
            "body of 10,485,761 bytes not captured (over the receiver's limit)",
        ),
        (
            json.dumps(
                {"received_at": "2026-10-01T00:00:00Z", "headers": {}, "body": "", "body_b64": ""}
            ),
            "both body and body_b64",
        ),
        (
            json.dumps({"received_at": "2026-10-01T00:00:00Z", "headers": {}, "body_b64": "@@@"}),
            "body_b64 is not valid base64",
        ),
        (
            json.dumps({"received_at": "2026-10-01T00:00:00Z", "headers": {}, "body": 5}),
            "body is not a string",
        ),
        (json.dumps(capture(BODY, subscription_id=7)), "subscription_id is not a string"),
        # A lone surrogate cannot be the text of a real (UTF-8) body.
        ('{"received_at": 1, "headers": {}, "body": "\\ud800"}', "not valid JSON"),
    ],
)
def test_each_unreadable_reason_is_a_row(tmp_path, line, reason):
    good = capture(BODY, signature="sha256=" + "0" * 64)
    path = write_jsonl(tmp_path / "log.jsonl", [good, line, good])
    df = load_captures([path]).deliveries
    assert len(df) == 3
    bad = df[df["verdict"] == "unreadable"]
    assert bad["line"].tolist() == [2]
    assert reason in bad["detail"].iloc[0]
    assert bad["source"].iloc[0] == str(path)


def test_blank_lines_are_not_records_and_line_numbers_stay_true(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(
        "\n" + json.dumps(capture(BODY)) + "\n\n  \n" + json.dumps(capture(BODY)) + "\n"
    )
    df = load_captures([path]).deliveries
    assert df["line"].tolist() == [2, 5]


def test_crlf_lines_are_read(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes((json.dumps(capture(BODY)) + "\r\n").encode() * 2)
    df = load_captures([path]).deliveries
    assert df["verdict"].isna().all() and len(df) == 2


def test_body_bytes_survive_exactly(tmp_path):
    body = '{"a": "café 🎣",  "b" :1}'
    df = load_captures([write_jsonl(tmp_path / "l.jsonl", [capture(body)])]).deliveries
    assert df.loc[0, "body"] == body.encode("utf-8")


def test_envelope_columns(tmp_path):
    body = (
        '{"id":"evt_9","event":"incident.status_changed","timestamp":"2026-10-01T01:02:03+01:00",'
        '"data":{"incidentId":"inc_9","status":"closed","extra":{"x":1}}}'
    )
    df = load_captures([write_jsonl(tmp_path / "l.jsonl", [capture(body)])]).deliveries
    row = df.iloc[0]
    assert (row["event_id"], row["event"], row["incident_id"]) == (
        "evt_9",
        "incident.status_changed",
        "inc_9",
    )
    assert row["event_timestamp"].isoformat() == "2026-10-01T00:02:03+00:00"
    assert row["delivery_id"] == "dlv_1"


def test_non_json_body_is_loaded_with_empty_envelope(tmp_path):
    df = load_captures([write_jsonl(tmp_path / "l.jsonl", [capture("plain text")])]).deliveries
    assert df["verdict"].isna()[0] and df["event_id"].isna()[0]


def test_naive_received_at_is_utc_and_counted(tmp_path):
    recs = [capture(BODY, received_at="2026-10-01T00:00:05"), capture(BODY)]
    with pytest.warns(LoadWarning, match="1 received_at"):
        caps = load_captures([write_jsonl(tmp_path / "l.jsonl", recs)])
    assert caps.naive_times == 1
    assert caps.deliveries["received_at"].iloc[0] == caps.deliveries["received_at"].iloc[1]


def test_no_warning_when_all_have_offsets(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_captures([write_jsonl(tmp_path / "l.jsonl", [capture(BODY)])])


def test_gzip_and_inputs_table(tmp_path):
    raw = (json.dumps(capture(BODY)) + "\n" + "{bad\n").encode()
    gz = tmp_path / "day.jsonl.gz"
    gz.write_bytes(gzip.compress(raw))
    caps = load_captures([gz])
    assert len(caps.deliveries) == 2
    row = caps.inputs.iloc[0]
    assert row["sha256"] == hashlib.sha256(gz.read_bytes()).hexdigest()
    assert (row["size"], row["records"], row["unreadable"]) == (gz.stat().st_size, 2, 1)


@pytest.mark.parametrize("cut", [10, -12])
def test_truncated_or_corrupt_gzip_names_the_file(tmp_path, cut):
    data = gzip.compress((json.dumps(capture(BODY)) + "\n").encode() * 50)
    gz = tmp_path / "broken.jsonl.gz"
    gz.write_bytes(data[:cut] if cut > 0 else data[:cut] + b"\x00" * 12)
    with pytest.raises(LoadError, match=r"broken\.jsonl\.gz: truncated or corrupt gzip"):
        load_captures([gz])


def test_folders_globs_and_files_load_as_one_frame(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "sub").mkdir()
    write_jsonl(tmp_path / "a" / "one.jsonl", [capture(BODY)])
    # Other records than one.jsonl's (a record read from an earlier file counts once), each twice.
    again = capture(BODY, received_at="2026-10-01T00:00:07Z")
    write_jsonl(tmp_path / "a" / "sub" / "two.jsonl", [again, again])
    (tmp_path / "a" / "notes.txt").write_text("ignored: not a log")
    # Not one.jsonl's content: a copy is read once (tests/test_copies.py).
    write_jsonl(tmp_path / "three.jsonl", [capture(BODY, received_at="2026-10-01T00:00:06Z")])
    caps = load_captures([tmp_path / "a", str(tmp_path / "thr*.jsonl"), tmp_path / "three.jsonl"])
    names = [s.rsplit("/", 1)[-1] for s in caps.deliveries["source"]]
    assert names == ["one.jsonl", "two.jsonl", "two.jsonl", "three.jsonl"]  # no duplicates
    assert caps.deliveries["line"].tolist() == [1, 1, 2, 1]
    assert caps.inputs["records"].tolist() == [1, 2, 1]


def test_nothing_matches_is_a_one_line_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_captures([tmp_path / "missing.jsonl"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no"):
        load_captures([tmp_path / "empty"])


def _har(entries):
    return {"log": {"version": "1.2", "creator": {"name": "t", "version": "1"}, "entries": entries}}


def _entry(text, *, headers, status=204, time=42.5, encoding=None):
    post = {"mimeType": "application/json", "text": text}
    if encoding:
        post["encoding"] = encoding
    return {
        "startedDateTime": "2026-10-01T02:00:05.000+02:00",
        "time": time,
        "request": {
            "method": "POST",
            "url": "https://hooks.example/wh_1",
            "headers": [{"name": k, "value": v} for k, v in headers],
            "postData": post,
        },
        "response": {"status": status},
    }


def test_har_entries_become_records(tmp_path):
    hdrs = [("x-phishfort-signature", "sha256=" + "a" * 64), ("x-phishfort-timestamp", "1")]
    har = _har(
        [_entry(BODY, headers=hdrs), {"nope": 1}, _entry("/w==", headers=hdrs, encoding="base64")]
    )
    path = tmp_path / "capture.har"
    path.write_text(json.dumps(har))
    df = load_captures([path]).deliveries
    assert df["line"].tolist() == [1, 2, 3]
    assert df.loc[0, "received_at"].isoformat() == "2026-10-01T00:00:05+00:00"
    assert (df.loc[0, "response_status"], df.loc[0, "response_ms"]) == (204, 42.5)
    assert df.loc[0, "url"] == "https://hooks.example/wh_1"
    assert df.loc[0, "body"] == BODY.encode()
    assert df.loc[1, "verdict"] == "unreadable" and "no request" in df.loc[1, "detail"]
    assert df.loc[2, "body"] == b"\xff"


def test_har_that_is_not_json_is_a_load_error(tmp_path):
    path = tmp_path / "x.har"
    path.write_text("{")
    with pytest.raises(LoadError, match=r"x\.har: not a HAR"):
        load_captures([path])


def test_parallel_chunks_give_the_same_frame_as_one_process(tmp_path, monkeypatch):
    from audit.ingest import load
    from audit.ingest.secrets import SecretStore
    from audit.ingest.signatures import sign

    store = SecretStore.from_values({"wh_1": [("k", None)]})
    recs = []
    for i in range(400):
        body = json.dumps({"id": f"evt_{i}", "event": "incident.created", "data": {}})
        recs.append(capture(body, signature=sign("k", "1790812800", body.encode())))
        if i % 97 == 0:
            recs.append("{broken")
    log = write_jsonl(tmp_path / "big.jsonl", recs)
    serial = load_captures([log], secrets=store, workers=1)
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(load, "_CHUNK_MIN_BYTES", 1000)
    parallel = load_captures([log], secrets=store, workers=2)
    assert len(parallel.deliveries) == 405
    assert parallel.deliveries["line"].is_monotonic_increasing
    assert parallel.deliveries.drop(columns="body").equals(serial.deliveries.drop(columns="body"))
    assert parallel.deliveries["body"].tolist() == serial.deliveries["body"].tolist()
    assert parallel.inputs.equals(serial.inputs)
    assert (parallel.deliveries["verdict"] == "valid").sum() == 400


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("received_at", 1790812805123, "received_at is out of range"),  # milliseconds
        ("received_at", "9999-01-01T00:00:00Z", "received_at is out of range"),
        ("received_at", "0001-01-01T00:00:00Z", "received_at is out of range"),
    ],
)
def test_out_of_range_values_are_unreadable_rows_not_a_crash(tmp_path, field, value, reason):
    rec = capture(BODY) | {field: value}
    df = load_captures([write_jsonl(tmp_path / "l.jsonl", [capture(BODY), rec])]).deliveries
    assert df["verdict"].tolist()[1] == "unreadable"
    assert reason in df["detail"].tolist()[1]
    assert pd.isna(df["verdict"].tolist()[0])


def test_an_event_time_out_of_range_becomes_empty(tmp_path):
    body = '{"id":"evt_1","event":"incident.created","timestamp":"9999-12-31T00:00:00Z","data":{}}'
    df = load_captures([write_jsonl(tmp_path / "l.jsonl", [capture(body)])]).deliveries
    assert df["event_id"][0] == "evt_1" and pd.isna(df["event_timestamp"][0])


def test_a_utf8_bom_is_not_part_of_the_first_record(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(capture(BODY)) + "\n").encode())
    df = load_captures([path]).deliveries
    assert len(df) == 1 and pd.isna(df["verdict"][0])


def test_an_empty_subscription_id_is_inferred(tmp_path):
    from audit.ingest.secrets import SecretStore
    from audit.ingest.signatures import sign
    from audit.ingest.verification import verify_frame

    rec = capture(BODY, signature=sign("k", "1790812800", BODY.encode()), subscription_id="")
    df = load_captures([write_jsonl(tmp_path / "l.jsonl", [rec])]).deliveries
    v = verify_frame(df, SecretStore.from_values({"wh_9": [("k", None)]}))
    assert (v["verdict"][0], v["subscription_id"][0]) == ("valid", "wh_9")
