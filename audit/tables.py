"""One declared schema per table: column -> dtype, nullable, meaning.

Each table is a :class:`~audit.schema.Table` (see :mod:`audit.schema` for the dtype names): the
store's Parquet schema, empty frames, rows by name and checks all come from the declaration
here, so a column cannot mean one thing in a frame and another in a file. ``docs/tables.md``
describes the same columns for readers and is tested against them.

The tables: :data:`DELIVERIES` (loaded and verified), :data:`STORED_DELIVERIES` (the evidence
store), :data:`ATTEMPTS` (the columns attempt inference adds), :data:`EVENTS`,
:data:`INCIDENTS`, :data:`STATUS_INTERVALS`, :data:`SUBSCRIPTIONS` and :data:`FINDINGS`.
:data:`TABLES` lists them by name; ``docs/tables.md`` is tested against them.

>>> DELIVERIES.column("verdict").meaning
'see Verdicts below'
>>> list(DELIVERIES.empty().columns[:3])
['source', 'line', 'received_at']
"""

from __future__ import annotations

from audit.schema import Column, Table

__all__ = [
    "ATTEMPTS",
    "CAPTURE_KEYS",
    "CSV_TABLES",
    "DELIVERIES",
    "EVENTS",
    "EVIDENCE_COLUMNS",
    "FINDINGS",
    "INCIDENTS",
    "LOADED",
    "STATUS_INTERVALS",
    "STORED_DELIVERIES",
    "SUBSCRIPTIONS",
    "TABLES",
    "VERDICT_COLUMNS",
    "Column",
    "Table",
    "longest_first",
]


#: Tables also written as CSV next to their Parquet file, wherever they are written (``audit
#: analyze --format parquet``, a report's run folder): one row per incident, takedown group,
#: subscription, verdict, event outcome, latency metric or input file, never per delivery, so
#: they stay small enough for an auditor's spreadsheet.
CSV_TABLES = (
    "incidents",
    "subscriptions",
    "takedown_summary",
    "verdict_counts",
    "success_by_subscription",
    "success_by_event",
    "latency",
    "inputs",
)


#: A text cell costs about this many Parquet cells to write (CSV text is built in Python, with
#: every cell neutralised; measured: the 1M month's incidents CSV 1.1 s for 1.6M cells, its
#: deliveries Parquet 0.58 s for 21.8M).
CSV_CELL_COST = 25


def longest_first(sizes: dict[str, tuple[int, bool]]) -> list[str]:
    """Table names in the order to hand them to writer threads: the costliest first (so that
    the last to start is a short one), from each table's ``(cells, also as CSV)``.

    >>> longest_first({"deliveries": (21_800_000, False), "incidents": (1_600_000, True),
    ...                "latency": (28, True)})
    ['incidents', 'deliveries', 'latency']
    """

    def cost(name: str) -> int:
        cells, csv = sizes[name]
        return cells * (1 + CSV_CELL_COST * csv)

    return sorted(sizes, key=cost, reverse=True)


def _c(name: str, dtype: str, meaning: str, nullable: bool = True) -> Column:
    return Column(name, dtype, nullable, meaning)


def _d(
    name: str,
    dtype: str,
    origin: str,
    meaning: str,
    *,
    nullable: bool = True,
    key: str | None = None,
    verdicts: bool = False,
) -> Column:
    """A delivery column: where it comes from (:data:`audit.schema.ORIGINS`), the capture
    record's field it is read from (``key``), and whether ``audit verify`` writes it."""
    return Column(name, dtype, nullable, meaning, origin, key, verdicts)


# Every column of the deliveries, declared once. The loader's rows
# (:class:`audit.ingest.formats.base.Row`: :data:`LOADED`), the fast path's record shape
# (:data:`CAPTURE_KEYS`), ``verdicts.csv`` (:data:`VERDICT_COLUMNS`), the store's Parquet schema
# (:data:`STORED_DELIVERIES`) and ``docs/tables.md`` (:meth:`Table.markdown`) come from here.
DELIVERIES = Table(
    "deliveries",
    (
        _d(
            "source",
            "str",
            "capture",
            "file the record came from (a byte of its name that is not UTF-8 written `\\xNN`: "
            "`caf\\xe9.jsonl`)",
            nullable=False,
            verdicts=True,
        ),
        _d(
            "line",
            "int",
            "capture",
            "1-based line (JSONL) or entry index (HAR)",
            nullable=False,
            verdicts=True,
        ),
        _d(
            "received_at",
            "time",
            "capture",
            "receiver's clock at receipt (empty when unreadable)",
            key="received_at",
            verdicts=True,
        ),
        _d(
            "subscription_id",
            "str",
            "capture",
            "as logged, or inferred from the matching secret",
            key="subscription_id",
            verdicts=True,
        ),
        _d("url", "str", "capture", "where it was received", key="url"),
        _d(
            "response_status",
            "Int",
            "capture",
            "receiver's answer (HTTP status)",
            key="response_status",
            verdicts=True,
        ),
        _d(
            "response_ms",
            "Float",
            "capture",
            "receiver's answer time, ms",
            key="response_ms",
            verdicts=True,
        ),
        _d("signature", "str", "capture", "signature header, as received", key="headers"),
        _d("timestamp_header", "str", "capture", "timestamp header, as received", key="headers"),
        _d("event_header", "str", "capture", "event header, as received", key="headers"),
        _d(
            "delivery_id",
            "str",
            "capture",
            "`X-PhishFort-Delivery-Id`: one attempt; **not** authenticated",
            key="headers",
            verdicts=True,
        ),
        _d("body", "bytes", "capture", "the raw body bytes, exactly as signed", key="body"),
        _d(
            "event_id",
            "str",
            "extraction",
            "envelope `id` (empty when the body is not a JSON envelope)",
            verdicts=True,
        ),
        _d("event", "str", "extraction", "envelope `event`", verdicts=True),
        _d("event_timestamp", "time", "extraction", "envelope `timestamp`"),
        _d("incident_id", "str", "extraction", "envelope `data.incidentId`", verdicts=True),
        _d(
            "verdict",
            "str",
            "verdict",
            "see Verdicts below",
            nullable=False,
            verdicts=True,
        ),
        _d("detail", "str", "verdict", "why, in one line (empty for `valid`)", verdicts=True),
        _d(
            "hmac_ok",
            "bool",
            "verification",
            "whether a known secret of the subscription matches, whatever the timestamp checks "
            "said; empty when not computed",
            verdicts=True,
        ),
        _d(
            "skew_s",
            "Float",
            "verification",
            "`received_at` minus the timestamp header, seconds",
            verdicts=True,
        ),
        _d(
            "matched_secret",
            "str",
            "verification",
            "`<subscription>#<n>`: the n-th issued secret that matched (never its value)",
            verdicts=True,
        ),
    ),
)
"""Loaded and verified deliveries: one row per input record (``audit.ingest.load``)."""

#: The columns the capture readers give (``audit.ingest.formats.base.Row``), in order: every
#: delivery column but the verification's.
LOADED: tuple[str, ...] = DELIVERIES.names_from("capture", "extraction", "verdict")

#: The fields of a capture record read into a column (``received_at``, ``headers``, ``body``,
#: ...): the record shape the fast path (``audit.ingest.fast``) takes; a record with any other
#: field goes through the exact path.
CAPTURE_KEYS: frozenset[str] = frozenset(c.key for c in DELIVERIES.columns if c.key is not None)

#: The columns ``audit verify`` writes (``verdicts.csv``), in order.
VERDICT_COLUMNS: tuple[str, ...] = tuple(c.name for c in DELIVERIES.columns if c.verdicts)

#: Incident ``data`` keys extracted once at ingest: (key, column).
DATA_FIELDS: tuple[tuple[str, str], ...] = (
    ("clientId", "data_client_id"),
    ("incidentClass", "data_incident_class"),
    ("incidentType", "data_incident_type"),
    ("source", "data_source"),
    ("status", "data_status"),
    ("domain", "data_domain"),
    ("url", "data_url"),
    ("safeDomain", "data_safe_domain"),
    ("subject", "data_subject"),
    ("reportedBy", "data_reported_by"),
    ("waitForClient", "data_wait_for_client"),
    ("timestamp", "data_timestamp"),
    ("lastHistoryUpdateTimestamp", "data_last_history_update"),
    ("burnStartedTimestamp", "data_burn_started"),
    ("takedownTimestamp", "data_takedown_timestamp"),
)

STORED_DELIVERIES = DELIVERIES.extend(
    "stored_deliveries",
    _d(
        "subscription_logged",
        "bool",
        "store",
        "the receiver logged `subscription_id` (false: inferred from the matching secret)",
    ),
    _d(
        "file_sha256",
        "str",
        "store",
        "sha256 of the capture file the record was read from",
        nullable=False,
    ),
    _d(
        "body_sha256",
        "str",
        "extraction",
        "sha256 of the raw body (tells copies of an event apart without the body)",
    ),
    _d(
        "fingerprint",
        "str",
        "extraction",
        "as `events.fingerprint`: sha256 of canonical JSON of `event` + `data`",
    ),
    *(
        _d(
            col,
            "str",
            "extraction",
            f"`data.{key}` as sent (strings only; `true`/`false` for a boolean)",
        )
        for key, col in DATA_FIELDS
    ),
    _d(
        "data_invalid",
        "int",
        "extraction",
        "`data` fields of the wrong JSON type, ignored",
        nullable=False,
    ),
    _d(
        "record_sha256",
        "str",
        "store",
        "sha256 of the request as captured (`docs/scale.md`): one record however many files "
        "or versions of a file hold it",
        nullable=False,
    ),
)
"""Rows of the evidence store (``audit.ingest.store``): deliveries plus what analyses read
instead of parsing bodies again. Partitioned by ``month`` (``YYYY-MM`` of ``received_at``,
``none`` for unreadable records without a time)."""


#: What a report shows of a request it rejected (as received), beyond the analysis columns.
EVIDENCE_COLUMNS: tuple[str, ...] = ("signature", "timestamp_header", "event_header", "body")

ATTEMPTS = Table(
    "attempts",
    (
        _c("is_test", "flag", "webhook.test or a test_ incident: the one rule", nullable=False),
        _c("attempt_no", "Int", "inferred from timing against the schedule"),
        _c("delay_s", "Float", "seconds since the previous observed attempt"),
        _c("expected_delay_s", "Float", "scheduled delay for the number assigned"),
        _c("on_schedule", "bool", "the observed delay matched the schedule"),
        _c("missing_before", "Int", "attempts skipped (never reached the receiver)"),
        _c("success", "bool", "2xx within the delivery timeout; empty when not captured"),
    ),
)
"""The columns :func:`audit.analysis.deliveries.infer_attempts` adds to the deliveries."""

EVENTS = Table(
    "events",
    (
        _c("subscription_id", "str", "the subscription delivered to", nullable=False),
        _c("event_id", "str", "envelope id", nullable=False),
        _c("event", "str", "envelope event"),
        _c("event_timestamp", "time", "envelope timestamp"),
        _c("incident_id", "str", "envelope data.incidentId"),
        _c("is_test", "flag", "webhook.test or a test_ incident", nullable=False),
        _c("fingerprint", "str", "sha256 of canonical JSON of event and data"),
        _c("attempts", "int", "attempts observed", nullable=False),
        _c("first_received_at", "time", "first receipt"),
        _c("last_received_at", "time", "last receipt"),
        _c("emission_latency_s", "Float", "first receipt minus event time, seconds"),
        _c("outcome", "str", "delivered, exhausted, pending, lost or unknown", nullable=False),
        _c("delivered_at", "time", "first successful attempt"),
        _c("accepted_count", "int", "2xx answers, however slow", nullable=False),
        _c("retry_after_success", "flag", "an attempt arrived after a timely 2xx", False),
        _c("too_many_attempts", "flag", "an attempt number above the schedule's", False),
        _c("off_schedule", "int", "attempts not on schedule", nullable=False),
        _c("missing_attempts", "int", "attempts that never reached the receiver", False),
        _c("last_attempt_no", "int", "the last attempt's number", nullable=False),
    ),
)
"""One row per (subscription, event id) of the valid deliveries (``events_table``)."""

INCIDENTS = Table(
    "incidents",
    (
        _c("incident_id", "str", "data.incidentId", nullable=False),
        *(
            _c(name, "str", f"data.{key}, last value sent")
            for key, name in (
                ("clientId", "client_id"),
                ("incidentClass", "incident_class"),
                ("incidentType", "incident_type"),
                ("source", "source"),
                ("status", "status"),
                ("domain", "domain"),
                ("url", "url"),
                ("safeDomain", "safe_domain"),
                ("subject", "subject"),
                ("reportedBy", "reported_by"),
                ("waitForClient", "wait_for_client"),
            )
        ),
        _c("created_at", "time", "data.timestamp, else the first created or first event"),
        _c("created_at_inferred", "flag", "created_at is not data.timestamp", nullable=False),
        _c("created_at_source", "str", "where created_at came from"),
        _c("burn_started_at", "time", "data.burnStartedTimestamp"),
        _c("takedown_at", "time", "data.takedownTimestamp, else the change to takedown_success"),
        _c("closed_at", "time", "the change to closed"),
        _c("first_event_at", "time", "first event time"),
        _c("last_event_at", "time", "last event time"),
        _c("last_history_update_at", "time", "data.lastHistoryUpdateTimestamp"),
        _c("time_to_takedown_s", "float", "takedown_at minus created_at, seconds"),
        _c("taken_down", "flag", "takedown_at is known", nullable=False),
        _c("awaiting_client_s", "float", "time in a status waiting on the client, seconds"),
        _c("events", "int", "valid events folded", nullable=False),
        _c("suspected_missed_events", "int", "statuses seen but never announced", False),
        _c("missed_statuses", "str", "those statuses, comma-separated"),
    ),
)
"""One row per incident, folded from valid events (``incidents_table``)."""

STATUS_INTERVALS = Table(
    "status_intervals",
    (
        _c("incident_id", "str", "data.incidentId", nullable=False),
        _c("status", "str", "the status held", nullable=False),
        _c("start", "time", "when it began", nullable=False),
        _c("end", "time", "when it ended (as_of for the current one)", nullable=False),
        _c("duration_s", "float", "end minus start, seconds", nullable=False),
        _c("announced", "flag", "a status_changed event carried it", nullable=False),
        _c("current", "flag", "the last interval, open until as_of", nullable=False),
    ),
)
"""Each incident's statuses over time (``status_intervals``)."""

SUBSCRIPTIONS = Table(
    "subscriptions",
    (
        _c("fetched_at", "time", "when the listing was fetched", nullable=False),
        _c("subscription_id", "str", "listed id", nullable=False),
        _c("client_id", "str", "listed clientId"),
        _c("url", "str", "listed delivery URL"),
        _c("events", "list", "listed event types", nullable=False),
        _c("active", "bool", "listed active flag"),
        _c("description", "str", "listed description"),
        _c("created_at", "time", "listed createdAt"),
        _c("last_delivery_status", "str", "listed lastDeliveryStatus"),
        _c("secret_exposed", "flag", "a secret field was listed (never kept)", nullable=False),
        _c("source", "str", "the snapshot file", nullable=False),
    ),
)
"""One row per subscription per ``GET /webhooks`` snapshot (``load_snapshots``)."""

FINDINGS = Table(
    "findings",
    (
        _c("finding_uid", "str", "stable id of check, resource and period", nullable=False),
        _c("check_id", "str", "the control, e.g. SIG-01", nullable=False),
        _c("title", "str", "the control's title", nullable=False),
        _c("severity", "str", "from the catalogue", nullable=False),
        _c("status", "str", "pass, fail, info, skip, error or muted", nullable=False),
        _c("reason", "str", "why, in words", nullable=False),
        _c("resource", "str", "what was checked", nullable=False),
        _c("evidence", "str", "JSON with the numbers behind the reason", nullable=False),
        _c("remediation", "str", "what to do", nullable=False),
        _c("period_start", "time", "the period checked, start", nullable=False),
        _c("period_end", "time", "the period checked, end (exclusive)", nullable=False),
        _c("spec_ref", "str", "the rule's section of the spec, e.g. spec 5.2", nullable=False),
        _c("docs_ref", "str", "its entry in docs, e.g. docs/controls.md#sig-01", nullable=False),
    ),
)
"""One row per control and resource (``run_controls``)."""

#: Every declared table by name.
TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        DELIVERIES,
        STORED_DELIVERIES,
        ATTEMPTS,
        EVENTS,
        INCIDENTS,
        STATUS_INTERVALS,
        SUBSCRIPTIONS,
        FINDINGS,
    )
}
