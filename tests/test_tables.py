"""Declared table schemas: one declaration gives frames, checks and the Parquet schema."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from audit.analysis import event_fields
from audit.cli import main
from audit.errors import SchemaError
from audit.ingest.extract import EXTRACTED
from audit.ingest.fast import _KEYS as fast_keys
from audit.ingest.fast import _Row
from audit.ingest.formats.base import COLUMNS, Row
from audit.ingest.load import load_captures
from audit.ingest.parts import STORE_SCHEMA
from audit.ingest.verification import VERDICT_COLUMNS
from audit.schema import ORIGINS
from audit.tables import (
    ATTEMPTS,
    CAPTURE_KEYS,
    DATA_FIELDS,
    DELIVERIES,
    EVENTS,
    FINDINGS,
    INCIDENTS,
    LOADED,
    STATUS_INTERVALS,
    STORED_DELIVERIES,
    SUBSCRIPTIONS,
    TABLES,
    Column,
)
from audit.tables import VERDICT_COLUMNS as DECLARED_VERDICTS
from tests.builders import capture, rows_frame, write_jsonl, write_secrets


def test_empty_frame_has_every_column_in_its_dtype():
    df = DELIVERIES.empty()
    assert list(df.columns) == DELIVERIES.names
    assert df["received_at"].dtype == "datetime64[ns, UTC]"
    assert df["response_status"].dtype == "Int64"
    assert DELIVERIES.problems(df) == []


def test_validate_collects_every_problem_in_one_error():
    df = DELIVERIES.empty().drop(columns=["verdict"]).assign(line=pd.Series([], dtype="str"))
    df["received_at"] = pd.Series([], dtype="datetime64[ns]")  # naive: not allowed
    with pytest.raises(SchemaError) as err:
        DELIVERIES.validate(df)
    text = str(err.value)
    assert "missing column 'verdict'" in text
    assert "column 'line' has dtype" in text
    assert "column 'received_at' has dtype" in text


def test_not_nullable_columns_are_checked():
    df = DELIVERIES.empty().reindex([0])
    df["line"] = pd.Series([1], dtype="int64")
    df["source"] = pd.Series(["a.jsonl"], dtype="str")
    df = DELIVERIES.conform(df)
    problems = DELIVERIES.problems(df)
    assert any("'verdict' has 1 missing" in p for p in problems)
    assert not any("'detail'" in p for p in problems)


def test_loaded_deliveries_match_their_declaration(tmp_path):
    log = write_jsonl(tmp_path / "a.jsonl", [capture('{"id":"e"}'), "broken"])
    df = load_captures(log).deliveries
    extra = {"hmac_ok", "skew_s", "matched_secret"}
    declared = [n for n in DELIVERIES.names if n not in extra]
    assert list(df.columns) == declared


def test_parquet_schema_comes_from_the_declaration():
    schema = STORED_DELIVERIES.arrow_schema()
    assert schema.names == STORED_DELIVERIES.names
    assert schema.field("received_at").type == pa.timestamp("ns", tz="UTC")
    assert schema.field("verdict").nullable is False
    assert schema.field("verdict").metadata[b"meaning"]


def test_extracted_fields_are_the_incident_fields():
    assert [k for k, _ in DATA_FIELDS] == [k for k, _, _ in event_fields.FIELDS]


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="unknown dtype"):
        Column("x", "float32", True, "no")


# -- every analysis table is what its declaration says ---------------------------------------------


@pytest.fixture(scope="module")
def demo_tables(tmp_path_factory):
    import warnings

    from audit.analysis.analyze import analyze
    from audit.demo import simulate
    from audit.findings import run_controls

    sim = simulate(tmp_path_factory.mktemp("demo") / "d", seed=3, days=7, incidents=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = analyze(sim.captures, sim.secrets, snapshots=sim.snapshots)
        findings = run_controls(a, period_start=a.as_of - pd.Timedelta(days=7), period_end=a.as_of)
    return {
        "attempts": a.deliveries[ATTEMPTS.names],
        "events": a.events,
        "incidents": a.incidents,
        "status_intervals": a.status_intervals,
        "subscriptions": a.subscriptions,
        "findings": findings,
    }


@pytest.mark.parametrize(
    "table", [ATTEMPTS, EVENTS, INCIDENTS, STATUS_INTERVALS, SUBSCRIPTIONS, FINDINGS], ids=str
)
def test_each_analysis_table_matches_its_declaration(demo_tables, table):
    df = demo_tables[table.name]
    assert len(df) > 0
    assert list(df.columns) == table.names
    assert table.problems(df) == []


@pytest.mark.parametrize("table", list(TABLES.values()), ids=lambda t: t.name)
def test_empty_frames_and_rows_by_name_follow_the_declaration(table):
    assert table.problems(table.empty()) == []
    assert list(table.row()) == table.names
    with pytest.raises(KeyError, match="no column"):
        table.row(not_a_column=1)


def test_rows_by_name_cannot_shift_a_column():
    row = {"current": True, "status": "closed", "incident_id": "inc_1", "announced": False}
    df = rows_frame(STATUS_INTERVALS, [row | {"start": "2026-10-01T00:00:00Z", "duration_s": 1}])
    assert (df.loc[0, "incident_id"], df.loc[0, "status"]) == ("inc_1", "closed")
    assert str(df["start"].dtype) == "datetime64[ns, UTC]" and df["current"].dtype == bool
    assert STATUS_INTERVALS.problems(df) == ["column 'end' has 1 missing value(s)"]
    with pytest.raises(SchemaError, match="'status' cannot be missing"):
        rows_frame(STATUS_INTERVALS, [{"incident_id": "inc_1"}])


# -- docs/tables.md (and the findings section of docs/controls.md) against the declarations -------

DOCS = Path(__file__).parents[1] / "docs"


def _section(path: Path, heading: str) -> str:
    """From ``heading`` to the next heading of any level."""
    text = path.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start : end if end > 0 else len(text)]


def _table_rows(section: str) -> dict[str, str]:
    """Documented column -> its dtype cell (or '' when the table has none), from `| `name` |`
    rows; a row naming several columns gives each; `a` … `b` over data fields expands."""
    out = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`([a-z_0-9]+)`", cells[0])
        if "…" in cells[0]:
            cols = [c for _, c in DATA_FIELDS]
            names = cols[cols.index(names[0]) : cols.index(names[1]) + 1]
        for n in names:
            out[n] = cells[1] if len(cells) > 2 else ""
    return out


def _mentioned(section: str) -> set[str]:
    spans = re.findall(r"`([^`]+)`", section)
    return {w.strip() for s in spans for w in s.split(",") if re.fullmatch(r"\s*[a-z_0-9]+\s*", w)}


def _markdown_rows(section: str) -> list[str]:
    """The `| `name` | ...` rows of a docs section, as written."""
    return [line for line in section.splitlines() if line.startswith("| `")]


def test_docs_deliveries_table_is_the_declaration():
    # every column once, in order, with its dtype, origin, csv mark and meaning as declared
    # (a failure shows the row to write: DELIVERIES.markdown() prints them all)
    section = _section(DOCS / "tables.md", "## `deliveries`")
    assert _markdown_rows(section) == DELIVERIES.markdown().splitlines()


def test_docs_store_columns_are_the_declaration():
    section = _section(DOCS / "tables.md", "## The evidence store")
    extra = [n for n in STORED_DELIVERIES.names if n not in DELIVERIES.names]
    assert _markdown_rows(section) == STORED_DELIVERIES.markdown(extra).splitlines()


def test_markdown_rows_say_where_a_column_comes_from():
    rows = DELIVERIES.markdown(["received_at", "signature", "hmac_ok"]).splitlines()
    assert rows == [
        "| `received_at` | datetime | capture (`received_at`) | yes | receiver's clock at "
        "receipt (empty when unreadable) |",
        "| `signature` | str | capture (`headers`) |  | signature header, as received |",
        "| `hmac_ok` | boolean | verification | yes | whether a known secret of the subscription "
        "matches, whatever the timestamp checks said; empty when not computed |",
    ]


# -- one declaration of the deliveries: every list of their columns derives from it -----------


def test_the_readers_rows_are_the_declared_columns_in_order():
    # the hand-written NamedTuple (mypy needs its fields spelled out) against the declaration
    assert Row._fields == LOADED == COLUMNS
    assert (
        tuple(n for n in DELIVERIES.names if n not in {"hmac_ok", "skew_s", "matched_secret"})
        == LOADED
    )


def test_the_fast_paths_rows_are_the_declared_columns_in_order():
    assert _Row._fields[: len(DELIVERIES.names)] == tuple(DELIVERIES.names)
    assert _Row._fields[len(DELIVERIES.names) :] == ("subscription_logged", "extracted", "naive")
    assert "subscription_logged" in STORED_DELIVERIES.names


def test_the_fast_path_takes_the_declared_capture_fields():
    # by hand: the fields of a capture record (docs/formats.md) that are read into a column
    assert (
        fast_keys
        == CAPTURE_KEYS
        == {
            "received_at",
            "headers",
            "body",
            "subscription_id",
            "url",
            "response_status",
            "response_ms",
        }
    )


def test_verdict_columns_are_the_declared_ones_in_order():
    marked = [c.name for c in DELIVERIES.columns if c.verdicts]
    assert list(VERDICT_COLUMNS) == list(DECLARED_VERDICTS) == marked
    # by hand: what verdicts.csv holds, in declaration order
    assert VERDICT_COLUMNS == [
        "source",
        "line",
        "received_at",
        "subscription_id",
        "response_status",
        "response_ms",
        "delivery_id",
        "event_id",
        "event",
        "incident_id",
        "verdict",
        "detail",
        "hmac_ok",
        "skew_s",
        "matched_secret",
    ]


def test_audit_verify_writes_the_declared_verdict_columns(tmp_path):
    log = write_jsonl(tmp_path / "a.jsonl", [capture('{"id":"e"}'), "broken"])
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": "whsec_x"}]})
    out = tmp_path / "v.csv"
    assert main(["verify", str(log), "--secrets", str(secrets), "--out", str(out)]) == 0
    with out.open(encoding="utf-8", newline="") as f:
        header = next(csv.reader(f))
    assert header == VERDICT_COLUMNS


def test_the_store_schema_is_the_declaration():
    for schema in (STORED_DELIVERIES.arrow_schema(), STORE_SCHEMA):
        assert schema.names == STORED_DELIVERIES.names
    assert STORED_DELIVERIES.names[: len(DELIVERIES.names)] == DELIVERIES.names
    extracted = STORED_DELIVERIES.names_from("extraction")
    assert extracted == ("event_id", "event", "event_timestamp", "incident_id", *EXTRACTED)


def test_every_delivery_column_says_where_it_comes_from():
    assert {c.origin for c in STORED_DELIVERIES.columns} == set(ORIGINS)
    assert all(c.origin == "" for t in (EVENTS, INCIDENTS, FINDINGS) for c in t.columns)
    with pytest.raises(ValueError, match="unknown origin"):
        Column("x", "str", True, "x", "guess")
    with pytest.raises(ValueError, match="only a capture column"):
        Column("x", "str", True, "x", "store", "x")


@pytest.mark.parametrize(
    ("table", "heading"),
    [
        (ATTEMPTS, "### `deliveries.csv`"),
        (EVENTS, "### `events.csv`"),
        (INCIDENTS, "### `incidents.csv`"),
        (STATUS_INTERVALS, "### `status_intervals.csv`"),
        (SUBSCRIPTIONS, "### `subscriptions.csv`"),
    ],
    ids=str,
)
def test_docs_name_every_declared_column(table, heading):
    assert set(table.names) - _mentioned(_section(DOCS / "tables.md", heading)) == set()


def test_docs_finding_rows_are_the_declaration():
    rows = _table_rows(_section(DOCS / "controls.md", "## Finding rows"))
    assert set(rows) == set(FINDINGS.names)  # grouped by source in the docs, not in order
