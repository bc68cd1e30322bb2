"""The ``data`` fields of incident events: which fields an incident keeps, and how they are read
from bodies (raw captures) or typed after extraction (the evidence store).

A field of the wrong JSON type is ignored as missing and counted; a time that is a string but
not ISO 8601 becomes NaT and is counted. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "FIELDS",
    "FIELD_COLUMNS",
    "PLAIN_TIME",
    "field_frame",
    "parse_data",
    "parse_plain_time",
    "parse_times",
]

_UTC: Final = "datetime64[ns, UTC]"

#: ``data`` field -> (column, kind). Kinds: text (a JSON string), wait (boolean or string),
#: time (an ISO 8601 string). ``historyEntry`` belongs to one event, not to the state.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("clientId", "client_id", "text"),
    ("incidentClass", "incident_class", "text"),
    ("incidentType", "incident_type", "text"),
    ("source", "source", "text"),
    ("status", "status", "text"),
    ("domain", "domain", "text"),
    ("url", "url", "text"),
    ("safeDomain", "safe_domain", "text"),
    ("subject", "subject", "text"),
    ("reportedBy", "reported_by", "text"),
    ("waitForClient", "wait_for_client", "wait"),
    ("timestamp", "data_timestamp", "time"),
    ("lastHistoryUpdateTimestamp", "last_history_update_at", "time"),
    ("burnStartedTimestamp", "burn_started_at", "time"),
    ("takedownTimestamp", "takedown_timestamp", "time"),
)
FIELD_COLUMNS = tuple(col for _, col, _ in FIELDS)


_MIN_NS = pd.Timestamp.min.tz_localize("UTC")
_MAX_NS = pd.Timestamp.max.tz_localize("UTC")


def parse_times(raw: pd.Series) -> tuple[pd.Series, int]:
    """ISO 8601 strings to UTC ns; unparsable (or out of range) strings become NaT, counted.

    Each distinct string is parsed once (an incident's events repeat its times)."""
    codes, uniques = pd.factorize(raw)
    parsed = pd.to_datetime(pd.Series(uniques), utc=True, format="ISO8601", errors="coerce")
    parsed = parsed.where((parsed >= _MIN_NS) & (parsed <= _MAX_NS)).astype(_UTC)
    utc_ns = parsed.to_numpy(dtype="datetime64[ns]").view("i8")  # NaT: the int64 minimum
    ns = np.append(utc_ns, np.iinfo(np.int64).min)[codes]  # code -1 (missing): NaT
    bad = int(np.count_nonzero(parsed.isna().to_numpy()[codes[codes >= 0]]))
    times = pd.Series(ns.view("datetime64[ns]"), index=raw.index).dt.tz_localize("UTC")
    return times, bad


#: The times every engine parses as :func:`parse_times` does (a regular expression): UTC ISO 8601
#: with a ``T``, whole seconds or up to 6 decimals, ``Z`` or ``+00:00``, years 1900 to 2199 (in
#: pandas' range). An impossible date (February 30) is missing in every engine too.
PLAIN_TIME: Final = (
    r"^(19|20|21)[0-9][0-9]-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|\+00:00)$"
)


def parse_plain_time(text: ir.StringValue) -> ir.Value:
    """``text`` parsed in the rule when it is a :data:`PLAIN_TIME` (a UTC timestamp; missing
    when the date does not exist), else missing: the other texts are parsed by
    :func:`parse_times` and looked up, as no engine's parser takes exactly pandas' strings.

    >>> import re
    >>> [bool(re.match(PLAIN_TIME, t)) for t in ("2026-10-01T12:00:00.123Z", "2026-10-01",
    ...  "2026-10-01T12:00:00+02:00", "2026-10-01T24:00:00Z", "2026-10-01T12:00:00.1234567Z")]
    [True, False, False, False, False]
    """
    import ibis  # start-up: only an analysis needs it

    return ibis.ifelse(text.re_search(PLAIN_TIME), text.try_cast("timestamp('UTC')"), None)


_STR = pd.StringDtype(na_value=np.nan)  # pandas' "str" dtype
_TO_STR = {pa.large_string(): _STR}.get
#: The string-valued fields, as one Arrow struct: pyarrow converts the parsed dicts in C++,
#: ignoring other keys, and refuses a value that is not a string (then the slow path counts it).
_STRING_KEYS = tuple(key for key, _, kind in FIELDS if kind != "wait")
_STRUCT = pa.struct([(key, pa.large_string()) for key in _STRING_KEYS])


def _data_of(body: object) -> dict[str, object]:
    try:
        env = orjson.loads(body)  # type: ignore[arg-type]  # not bytes (None): TypeError, below
    except (orjson.JSONDecodeError, TypeError):
        return {}
    data = env.get("data") if type(env) is dict else None
    return data if type(data) is dict else {}


def parse_data(bodies: list[object]) -> list[dict[str, object]]:
    """The ``data`` object of each body (``{}`` when there is none)."""
    try:  # fast path: every body is an envelope with a data object
        datas = [env["data"] for env in map(orjson.loads, bodies)]  # type: ignore[arg-type]  # as above
        if all(type(x) is dict for x in datas):
            return datas
    except (orjson.JSONDecodeError, TypeError, KeyError):
        pass
    return [_data_of(b) for b in bodies]


def _str_series(values: Sequence[object]) -> tuple[pd.Series, int]:
    """Strings kept as ``str`` dtype; anything else (numbers, objects) becomes NaN, counted."""
    kept = [v if type(v) is str else None for v in values]
    arr = pa.array(kept, pa.large_string())
    return pd.Series(arr.to_pandas(types_mapper=_TO_STR)), kept.count(None) - values.count(None)


def field_frame(datas: list[dict[str, object]]) -> tuple[pd.DataFrame, int]:
    """Known fields of the ``data`` objects as columns (``data`` keys), and wrong-type count."""
    waits = [x.get("waitForClient") for x in datas]
    kept = [
        v if type(v) is str else ("true" if v else "false") if type(v) is bool else None
        for v in waits
    ]
    invalid = kept.count(None) - waits.count(None)
    try:
        arr = pa.array(datas, type=_STRUCT)
    except (pa.ArrowTypeError, pa.ArrowInvalid, TypeError):
        columns = {}
        for key in _STRING_KEYS:
            columns[key], bad = _str_series([x.get(key) for x in datas])
            invalid += bad
        frame = pd.DataFrame(columns)
    else:
        table = pa.Table.from_arrays(arr.flatten(), names=list(_STRING_KEYS))
        frame = table.to_pandas(types_mapper=_TO_STR)
    frame["waitForClient"] = _str_series(kept)[0]
    return frame, invalid
