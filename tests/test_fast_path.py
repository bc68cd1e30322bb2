"""Differential test: the fast verification path gives exactly the exact path's rows.

Cases: every record case of tests/test_load.py and tests/test_signatures.py (read from their
parametrize marks, so new cases there are checked here too), hostile mutations of a valid
record, the demo data, and random records (hypothesis).
"""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.ingest.fast import verify_jsonl
from audit.ingest.formats.jsonl import parse_jsonl
from audit.ingest.records import verify_chunk
from audit.ingest.secrets import SecretStore
from audit.ingest.signatures import sign, verify_columns
from audit.spec import header_names
from tests import test_load, test_signatures
from tests.builders import capture

WANTED = {v: k for k, v in header_names().items()}
SECRET = test_signatures.SECRET
BODY1 = test_signatures.BODY1
TS = test_signatures.TS
STORE = SecretStore.from_values({"wh_1": [(SECRET, None)]})
ROTATION = SecretStore.from_values(test_signatures.ROTATION)


def exact_path(data: bytes, secrets: SecretStore, wanted=WANTED) -> tuple[dict, int, int]:
    buf = parse_jsonl(data, "log.jsonl", wanted, 1)
    cols = buf.columns()
    cols_logged = [
        None if v == "unreadable" else s is not None
        for s, v in zip(cols["subscription_id"], cols["verdict"], strict=True)
    ]
    v = verify_columns(
        cols["signature"],
        cols["timestamp_header"],
        cols["body"],
        cols["received_at"],
        cols["subscription_id"],
        cols["verdict"],
        cols["detail"],
        secrets,
        tolerance_s=300,
    )
    cols.update(vars(v))
    cols["subscription_logged"] = cols_logged
    return cols, buf.naive_times, buf.unreadable


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def both(lines: list, secrets: SecretStore = STORE, wanted=WANTED) -> tuple[dict, int]:
    """Run both paths; assert equal columns (values and types); return (columns, exact count)."""
    text = [
        x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)) for x in lines
    ]
    data = b"\n".join(t if isinstance(t, bytes) else t.encode("utf-8") for t in text) + b"\n"
    exact, naive, unreadable = exact_path(data, secrets, wanted)
    fast, f_naive, f_unreadable, slow = verify_jsonl(
        data, "log.jsonl", wanted, 1, secrets, tolerance_s=300
    )
    assert set(fast) == set(exact)
    for name in exact:
        assert len(fast[name]) == len(exact[name]), name
        for i, (x, y) in enumerate(zip(fast[name], exact[name], strict=True)):
            assert _same(x, y), (name, i, x, y)
    assert (f_naive, f_unreadable) == (naive, unreadable)
    # The store rows (extraction included) agree too.
    kw = dict(kind="jsonl", source="log.jsonl", first_line=1, wanted=wanted, secrets=secrets)
    t_fast, _ = verify_chunk(data, tolerance_s=300, file_sha256="x", **kw)
    t_exact, _ = verify_chunk(data, tolerance_s=300, file_sha256="x", exact=True, **kw)
    assert t_fast.equals(t_exact)
    return fast, slow


def _cases(fn) -> list:
    """The argument tuples of a test function's parametrize mark."""
    marks = [m for m in fn.pytestmark if m.name == "parametrize"]
    return [c.values if type(c).__name__ == "ParameterSet" else c for c in marks[0].args[1]]


def valid(**kw) -> dict:
    return capture(BODY1, signature=test_signatures.SIG1, **kw)


def test_a_plain_valid_record_takes_the_fast_path():
    cols, slow = both([valid(), valid(received_at=1790812801), valid(response_status=204)])
    assert slow == 0 and cols["verdict"] == ["valid"] * 3


@pytest.mark.parametrize(("line", "reason"), _cases(test_load.test_each_unreadable_reason_is_a_row))
def test_unreadable_cases_of_test_load(line, reason):
    cols, _ = both([valid(), line])
    assert cols["verdict"][1] == "unreadable" and reason in cols["detail"][1]


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    _cases(test_load.test_out_of_range_values_are_unreadable_rows_not_a_crash),
)
def test_out_of_range_cases_of_test_load(field, value, reason):
    both([valid() | {field: value}])


@pytest.mark.parametrize(
    ("received_at", "verdict"), _cases(test_signatures.test_clock_window_boundaries)
)
def test_clock_window_cases(received_at, verdict):
    cols, _ = both([valid(received_at=received_at)])
    assert cols["verdict"] == [verdict]


@pytest.mark.parametrize(
    "headers", _cases(test_signatures.test_header_names_are_case_insensitive_and_pairs_accepted)
)
def test_header_cases(headers):
    assert both([capture(BODY1, headers=headers)])[0]["verdict"] == ["valid"]


@pytest.mark.parametrize(
    ("timestamp", "received_at", "signature", "verdict", "matched"),
    _cases(test_signatures.test_rotation),
)
def test_rotation_cases(timestamp, received_at, signature, verdict, matched):
    rec = capture(BODY1, signature=signature, timestamp=timestamp, received_at=received_at)
    cols, _ = both([rec], ROTATION)
    assert (cols["verdict"], cols["matched_secret"]) == ([verdict], [matched])


@pytest.mark.parametrize(
    ("signature", "timestamp", "verdict"), _cases(test_signatures.test_format_checks_in_order)
)
def test_format_cases(signature, timestamp, verdict):
    assert both([capture(BODY1, signature=signature, timestamp=timestamp)])[0]["verdict"] == [
        verdict
    ]


@pytest.mark.parametrize(
    "stamp", _cases(test_signatures.test_an_absurdly_long_timestamp_is_malformed_not_a_crash)
)
def test_long_timestamp_cases(stamp):
    cols, _ = both([capture(BODY1, signature=test_signatures.SIG1, timestamp=stamp)])
    assert cols["verdict"] == ["malformed_timestamp"]


def _resigned(rec: dict, secret: str = SECRET) -> dict:
    """The record with a signature that matches its body and timestamp header."""
    body = rec["body"].encode()
    rec["headers"]["X-PhishFort-Signature"] = sign(
        secret, rec["headers"]["X-PhishFort-Timestamp"], body
    )
    return rec


# Each mutation keeps a correct signature, so only the shape decides.
MUTATIONS = {
    "status as string": {"response_status": "204"},
    "status bool": {"response_status": True},
    "status out of range": {"response_status": 42},
    "status huge": {"response_status": 99999999999999999999},
    "status float": {"response_status": 204.0},
    "status null": {"response_status": None},
    "ms bool": {"response_ms": False},
    "ms string": {"response_ms": "20"},
    "ms null": {"response_ms": None},
    "ms huge": {"response_ms": 1e308},
    "ms negative": {"response_ms": -5},
    "ms negative fraction": {"response_ms": -0.5},
    "ms negative zero": {"response_ms": -0.0},
    "ms at 2**53": {"response_ms": 2**53},
    "ms beyond 2**53": {"response_ms": 2**53 + 1},
    "ms below -2**53": {"response_ms": -(2**53) - 1},
    "url number": {"url": 5},
    "url null": {"url": None},
    "sub empty": {"subscription_id": ""},
    "sub null": {"subscription_id": None},
    "sub unknown": {"subscription_id": "wh_nope"},
    "sub number": {"subscription_id": 7},
    "extra key": {"note": "x"},
    "received naive": {"received_at": "2026-10-01T00:00:05"},
    "received ms": {"received_at": 1790812805123},
    "received float": {"received_at": 1790812805.25},
    "received bool": {"received_at": False},
    "received padded": {"received_at": " 2026-10-01T00:00:05Z "},
    "received date only": {"received_at": "2026-10-01"},
    "received offset": {"received_at": "2026-10-01T02:00:05+02:00"},
    "received stale": {"received_at": "2026-10-01T00:05:01Z"},
    "body and b64": {"body_b64": "e30="},
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_hostile_mutations_of_a_valid_record(name):
    rec = _resigned(valid()) | MUTATIONS[name]
    both([valid(), rec, valid()])


@pytest.mark.parametrize(
    "headers",
    [
        {"X-PhishFort-Signature": "S", "x-phishfort-signature": "S", "X-PhishFort-Timestamp": TS},
        {"X-PhishFort-Timestamp": TS, "x-phishfort-timestamp": TS, "X-PhishFort-Signature": "S"},
        {"X-PhishFort-Signature": "S", "X-PhishFort-Timestamp": TS, "X-PhishFort-Event": 5},
        {"X-PhishFort-Signature": "S", "X-PhishFort-Timestamp": TS, "Other": 5},
        {
            "X-PhishFort-Signature": "S",
            "X-PhishFort-Timestamp": TS,
            "x-phishfort-event": "a",
            "X-PHISHFORT-EVENT": "b",
        },
        [
            ["X-PhishFort-Signature", "S"],
            ["X-PhishFort-Timestamp", TS],
            ["X-PhishFort-Timestamp", TS],
        ],
        {"X-PhishFort-Signature": "S ", "X-PhishFort-Timestamp": TS},
    ],
)
def test_hostile_headers(headers):
    sig = sign(SECRET, TS, BODY1.encode())
    if isinstance(headers, dict):
        headers = {k: (sig if v == "S" else v) for k, v in headers.items()}
        if "S " in headers.values():
            headers = {k: (sig + " " if v == "S " else v) for k, v in headers.items()}
    else:
        headers = [[k, sig if v == "S" else v] for k, v in headers]
    both([capture(BODY1, headers=headers)])


def test_signature_with_whitespace_inside_the_hex_is_not_fast():
    sig = test_signatures.SIG1
    spaced = sig[:20] + " " + sig[21:]
    cols, slow = both([capture(BODY1, signature=spaced)])
    assert slow == 1 and cols["verdict"] == ["malformed_signature"]


def test_blank_crlf_and_bom_lines():
    line = json.dumps(valid())
    cols, _ = both([line + "\r", "", "   ", "\ufeff" + line, line])
    assert cols["line"] == [1, 4, 5]


def test_the_demo_data_agrees(tmp_path):
    from audit.demo import simulate

    sim = simulate(tmp_path / "d", seed=3, days=8, incidents=30)
    from audit.ingest.secrets import read_secrets

    secrets = read_secrets(sim.secrets)
    for path in sim.captures:
        lines = path.read_bytes().splitlines()
        _, slow = both(lines, secrets)
        assert slow < len(lines) / 2  # most records take the fast path


records = st.fixed_dictionaries(
    {
        "received_at": st.sampled_from(
            ["2026-10-01T00:00:05Z", 1790812805, 1790812805.5, "2026-10-01T00:00:05", "x", None]
        ),
        "response_status": st.sampled_from([204, 500, "204", 42, None, True, 600]),
        "response_ms": st.sampled_from([12, 12.5, "1", None, True]),
        "url": st.sampled_from(["https://r.example/h", None, 1]),
    },
    optional={"extra": st.just(1), "body_b64": st.just("e30=")},
)
subs = st.sampled_from(["wh_1", "", None, 3, "wh_2", "absent"])


@settings(max_examples=150, deadline=None)
@given(
    rec=records,
    sub=subs,
    upper=st.booleans(),
    resign=st.booleans(),
    ts_skew=st.sampled_from([0, 301]),
)
def test_random_records_agree(rec, sub, upper, resign, ts_skew):
    ts = str(1790812800 - ts_skew)
    base = capture(BODY1, signature=sign(SECRET, ts, BODY1.encode()), timestamp=ts)
    if upper:
        base["headers"] = {k.upper(): v for k, v in base["headers"].items()}
    merged = base | rec
    if sub == "absent":
        del merged["subscription_id"]
    else:
        merged["subscription_id"] = sub
    if not resign:
        merged["body"] = BODY1 + " "
    both([merged], SecretStore.from_values({"wh_1": [(SECRET, None)], "wh_2": [("other", None)]}))


def test_empty_input():
    cols, slow = both([])
    assert slow == 0 and cols["line"] == []
    assert isinstance(
        verify_chunk(
            b"",
            kind="jsonl",
            source="s",
            first_line=1,
            wanted=WANTED,
            secrets=STORE,
            tolerance_s=300,
            file_sha256="x",
        )[0],
        pa.Table,
    )


def _without_sub(**kw) -> dict:
    rec = capture(BODY1, **kw)
    del rec["subscription_id"]
    return rec


def test_an_unlogged_subscription_is_inferred_on_the_fast_path():
    secrets = SecretStore.from_values({"wh_other": [("zzz", None)], "wh_1": [(SECRET, None)]})
    rec = _without_sub(signature=test_signatures.SIG1)
    cols, slow = both([rec, _without_sub(signature="sha256=" + "0" * 64)], secrets)
    assert cols["verdict"] == ["valid", "signature_mismatch"] and slow == 1
    assert cols["subscription_id"][0] == "wh_1" and cols["subscription_logged"][0] is False


def test_a_secret_shared_by_two_subscriptions_leaves_inference_to_the_exact_path():
    secrets = SecretStore.from_values(
        {"wh_a": [("old", None), (SECRET, "2026-10-15T00:00:00Z")], "wh_b": [(SECRET, None)]}
    )
    cols, slow = both([_without_sub(signature=test_signatures.SIG1)], secrets)
    # The exact path tries wh_a's secret #2 (not yet issued) before wh_b's current one.
    assert slow == 1 and cols["verdict"] == ["signature_mismatch"]


@pytest.mark.parametrize(
    ("timestamp", "received_at", "signature", "verdict", "matched"),
    _cases(test_signatures.test_rotation),
)
def test_rotation_cases_without_subscription(timestamp, received_at, signature, verdict, matched):
    rec = _without_sub(signature=signature, timestamp=timestamp, received_at=received_at)
    secrets = SecretStore.from_values({"wh_0": [("zero", None)], **test_signatures.ROTATION})
    cols, _ = both([rec], secrets)
    assert cols["verdict"] == [verdict]


@pytest.mark.parametrize("spelling", ["escaped", "alike"])
@pytest.mark.parametrize("which", ["Signature", "Timestamp", "Event", "Delivery-Id"])
def test_a_header_repeated_is_a_repeat_on_both_paths(which, spelling):
    """``"X-PhishFort-Signatur\\u0065"``, or the same name spelled alike, is the same key to
    JSON (the last one wins) but the exact path sees both: the fast path must not take the
    last value as the only one."""
    rec = valid()
    rec["headers"]["X-PhishFort-Event"] = "incident.created"
    name = next(k for k in rec["headers"] if k.endswith(which))
    key = name[:-1] + f"\\u{ord(name[-1]):04x}" if spelling == "escaped" else name
    decoy = "sha256=" + "0" * 64 if which == "Signature" else "1"
    line = json.dumps(rec).replace('"headers": {', f'"headers": {{"{key}": "{decoy}", ', 1)
    assert json.loads(line)["headers"][name] == rec["headers"][name]  # JSON keeps the last
    cols, slow = both([line, valid()])
    assert slow == 1 and cols["verdict"][1] == "valid"
    assert cols["verdict"][0] != "valid" or which in ("Event", "Delivery-Id")


def test_a_header_repeated_with_an_escape_in_its_prefix_is_a_repeat_on_both_paths():
    """``"\\u0058-PhishFort-Signature"``: the escape hides the key from a prefix count."""
    rec = valid()
    line = json.dumps(rec).replace(
        '"headers": {', '"headers": {"\\u0058-PhishFort-Signature": "sha256=' + "0" * 64 + '", ', 1
    )
    cols, slow = both([line, valid()])
    assert slow == 1 and cols["verdict"][0] != "valid" and cols["verdict"][1] == "valid"


def test_a_body_that_quotes_a_delivery_header_name_agrees():
    """The body's text holds ``"X-PhishFort-Signature`` (more prefixes than header keys): the
    record is left to the exact path, which finds it valid."""
    note = {"X-PhishFort-Signature": 1}
    body = json.dumps({"id": "evt_q", "event": "incident.created", "note": note})
    rec = _resigned(capture(body, signature="x"))
    cols, slow = both([json.dumps(rec), valid()])
    assert slow == 1 and cols["verdict"] == ["valid", "valid"]


def test_the_exact_path_of_a_line_does_not_depend_on_the_lines_before_it():
    """A repeated header that is not a delivery header, beside a delivery-header prefix spelled
    as an earlier line spelled it: the exact path's re-read decision was made with every
    spelling met before in the piece, so the line's detail changed with where a file was cut."""
    first = json.dumps(
        valid(headers={"x-phishfort-signature": test_signatures.SIG1, "x-phishfort-timestamp": TS})
    )
    body, sig = json.dumps(BODY1), test_signatures.SIG1
    second = (
        f'{{"received_at":"2026-10-01T00:00:05Z","subscription_id":"wh_1","body":{body},'
        f'"headers":{{"Content-Type":1,"Content-Type":"a","X-PhishFort-Signature":"{sig}",'
        f'"X-PhishFort-Timestamp":"{TS}","x-phishfort-x":"y"}}}}'
    )
    json.loads(second)  # well-formed
    alone, _ = both([second])
    after, _ = both([first, second])
    assert after["detail"][1] == alone["detail"][0]
    assert after["verdict"][1] == alone["verdict"][0]


def test_a_record_over_the_size_limit_is_unreadable_unparsed_on_both_paths(monkeypatch):
    """A line longer than MAX_RECORD_BYTES is one unreadable row (its size in the detail),
    never parsed (parsing would take about 11 times its size); the lines around it are read."""
    from audit.ingest.formats import jsonl

    big = valid(body_pad="x" * 3000)  # a valid record but for its length
    monkeypatch.setattr(jsonl, "MAX_RECORD_BYTES", 2000)
    size = len(json.dumps(big).encode())
    cols, slow = both([valid(), big, valid()])
    assert cols["verdict"] == ["valid", "unreadable", "valid"] and slow == 1
    assert cols["detail"][1] == f"record of {size:,} bytes, over the 2,000-byte limit: not parsed"
    monkeypatch.setattr(jsonl, "MAX_RECORD_BYTES", size)  # at the limit: read as usual
    assert both([big])[0]["verdict"] != ["unreadable"]
