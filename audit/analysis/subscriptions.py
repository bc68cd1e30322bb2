"""Subscription listings: the one listing-shape unwrapper, and snapshot files loaded into a frame.

The shape of the ``GET /webhooks`` response is not published (spec 4.2), so every reader of a
listing goes through :func:`unwrap_listing`, which accepts the three plausible shapes: a bare list,
``{"data": [...]}`` and ``{"data": {<any key>: [...]}}``. The service client uses it for live
answers, :func:`load_snapshots` for the files written by ``audit snapshot``.

A snapshot file is ``{"fetched_at": "<ISO time>", "base_url": "...", "response": <body>}``. A
``secret`` found in a listing is never kept: only the fact that one was shown survives, as
``secret_exposed``. A listing (a file, or the service's answer) whose objects name a key twice,
at any level (two ``data``: JSON readers keep one list and drop the other's subscriptions), is
refused with the reason (:func:`unique_keys`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.errors import LoadError
from audit.paths import expand, read_regular, source_name
from audit.redaction import exposes_secret, redact_secrets, scrub
from audit.tables import SUBSCRIPTIONS
from audit.text import NOT_TEXT, holds_lone_surrogate
from audit.timeutil import FIRST_YEAR, LAST_YEAR, ns_in_range, parse_iso_ns

if TYPE_CHECKING:  # pandas only where a frame is built: `audit snapshot` never needs it
    import pandas as pd

__all__ = [
    "SNAPSHOT_COLUMNS",
    "RepeatedKey",
    "SnapshotWarning",
    "load_snapshots",
    "secret_exposed",
    "unique_keys",
    "unwrap_listing",
]

#: Columns of the frame returned by :func:`load_snapshots`, in order.
SNAPSHOT_COLUMNS = tuple(SUBSCRIPTIONS.names)

_STRING_FIELDS = {
    "subscription_id": "id",
    "client_id": "clientId",
    "url": "url",
    "description": "description",
    "last_delivery_status": "lastDeliveryStatus",
}


class RepeatedKey(ValueError):
    """A JSON object names a key twice (the message says which)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, or :class:`RepeatedKey` when it
    names a key twice (JSON readers keep one value and drop the other silently).

    >>> try:
    ...     json.loads('{"data": [1], "data": [2]}', object_pairs_hook=unique_keys)
    ... except RepeatedKey as e:
    ...     print(e)
    names the key 'data' twice in one object (JSON readers keep one and drop the other)
    """
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                break
            seen.add(key)
        shown = repr(scrub(key)) if len(key) <= 40 else repr(scrub(key)[:37]) + "..."
        raise RepeatedKey(
            f"names the key {shown} twice in one object (JSON readers keep one and drop the other)"
        )
    return out


def unwrap_listing(body: Any) -> list[dict[str, Any]]:
    """Return the subscriptions of a ``GET /webhooks`` body, whatever its (unpublished) shape.

    Accepted shapes: a list of objects, ``{"data": [...]}`` and ``{"data": {<key>: [...]}}``
    where exactly one value of the inner object is a list. Other keys beside ``data`` (such as
    ``message``) are ignored.

    Parameters
    ----------
    body
        The decoded JSON body.

    Returns
    -------
    list of dict
        The subscription objects, in the order the service gave them (not copied).

    Raises
    ------
    ValueError
        One line saying why the body is not a listing; callers turn it into their own error.

    Examples
    --------
    >>> unwrap_listing({"data": {"webhooks": [{"id": "wh_1"}]}, "message": "Success"})
    [{'id': 'wh_1'}]
    >>> unwrap_listing([])
    []
    """
    if isinstance(body, list):
        items = body
    elif isinstance(body, dict):
        if "data" not in body:
            raise ValueError("listing is an object without a 'data' field")
        data = body["data"]
        if isinstance(data, list):
            items = data
        elif isinstance(data, dict):
            lists = [k for k, v in data.items() if isinstance(v, list)]
            if len(lists) != 1:
                found = "no list" if not lists else f"{len(lists)} lists ({', '.join(lists)})"
                raise ValueError(f"listing 'data' object holds {found}; expected exactly one")
            items = data[lists[0]]
        else:
            raise ValueError(f"listing 'data' is {_kind(data)}, not a list or an object")
    else:
        raise ValueError(f"listing is {_kind(body)}, not a list or an object")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"listing item {i + 1} is {_kind(item)}, not an object")
    return items


def secret_exposed(item: dict[str, Any]) -> bool:
    """Whether a listed subscription shows a secret value under a secret-like key (``secret``,
    ``signingKey``, ``token``...: :func:`audit.redaction.secret_like`; a null, empty, true or
    false value does not count).

    >>> secret_exposed({"id": "wh_1", "secret": "[redacted]"}), secret_exposed({"id": "wh_1"})
    (True, False)
    """
    return exposes_secret(item)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def snapshot_files(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> list[Path]:
    """Files named by ``paths`` (files, folders' ``*.json``, globs), each once, in order.

    The rules are those of :func:`audit.paths.expand`, except that a folder is not searched
    recursively and a folder without snapshots yields none.
    """
    named = [paths] if isinstance(paths, str | os.PathLike) else paths
    return expand(named, ("json",), what="snapshot file", empty_folder_ok=True, recursive=False)


def _read_snapshot(path: Path) -> tuple[int, list[dict[str, Any]]]:
    try:  # a regular file only (a name given on the command line may be a FIFO)
        raw = read_regular(path, limit=None, error=LoadError)
    except OSError as e:
        raise LoadError(
            f"{path}: cannot read snapshot ({e.strerror or type(e).__name__})"
        ) from None
    try:
        doc = json.loads(raw.decode("utf-8-sig"), object_pairs_hook=unique_keys)
    except RepeatedKey as e:
        raise LoadError(f"{path}: not a snapshot: {e}") from None
    except RecursionError:
        raise LoadError(f"{path}: not a snapshot: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise LoadError(f"{path}: not a snapshot: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        # Position only: the decoder's message could quote the text, and the text may hold a secret.
        raise LoadError(
            f"{path}: not a snapshot: invalid JSON (line {e.lineno}, column {e.colno})"
        ) from None
    if holds_lone_surrogate(doc):  # the service's text: one bad description broke every report
        raise LoadError(f"{path}: not a snapshot: {NOT_TEXT}")
    if not isinstance(doc, dict):
        raise LoadError(f"{path}: not a snapshot: expected an object, found {_kind(doc)}")
    missing = [k for k in ("fetched_at", "base_url", "response") if k not in doc]
    if missing:
        raise LoadError(f"{path}: not a snapshot: missing {', '.join(repr(k) for k in missing)}")
    if not isinstance(doc["base_url"], str):
        raise LoadError(f"{path}: not a snapshot: 'base_url' must be a string")
    try:
        fetched_ns, _ = parse_iso_ns(doc["fetched_at"])
    except ValueError:
        raise LoadError(f"{path}: not a snapshot: 'fetched_at' is not an ISO 8601 time") from None
    if not ns_in_range(fetched_ns):  # the file's one time: without it, no snapshot
        raise LoadError(
            f"{path}: not a snapshot: 'fetched_at' is out of range (years {FIRST_YEAR} to "
            f"{LAST_YEAR})"
        )
    try:
        items = unwrap_listing(doc["response"])
    except ValueError as e:
        raise LoadError(f"{path}: not a snapshot: {e}") from None
    # A secret known to this process (the secrets file, the API key) is cut out of every
    # field: a description may quote one, and descriptions reach the report and its tables.
    items, _ = redact_secrets(items)
    return fetched_ns, items


class SnapshotWarning(UserWarning):
    """A snapshot file was loaded, but some listed fields were odd and left empty."""


def _row(item: dict[str, Any], odd: list[str]) -> dict[str, Any]:
    """One listed subscription as a row; a field of the wrong type becomes empty (noted)."""
    row: dict[str, Any] = {}
    for col, key in _STRING_FIELDS.items():
        v = item.get(key)
        if v is not None and not isinstance(v, str):
            odd.append(f"{key!r} is {_kind(v)}")
            v = None
        row[col] = v
    events = item.get("events")
    if events is not None:
        if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
            odd.append("'events' is not a list of strings (read as an empty list)")
            events = []
        events = tuple(events)
    row["events"] = events
    active = item.get("active")
    if active is not None and not isinstance(active, bool):
        odd.append(f"'active' is {_kind(active)}")
        active = None
    row["active"] = active
    created = item.get("createdAt")
    if created is not None:
        try:
            created, _ = parse_iso_ns(created)
        except ValueError:
            odd.append("'createdAt' is not an ISO 8601 time")
            created = None
        else:
            if not ns_in_range(created):
                odd.append(f"'createdAt' is out of range (years {FIRST_YEAR} to {LAST_YEAR})")
                created = None
    row["created_at"] = created
    row["secret_exposed"] = secret_exposed(item)
    return row


def _utc(ns: Sequence[int | None]) -> pd.Series:
    import pandas as pd  # start-up: `audit snapshot` loads this module, never pandas

    return pd.to_datetime(pd.Series(pd.array(ns, dtype="Int64")), unit="ns", utc=True)


def load_snapshots(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
) -> pd.DataFrame:
    """Load ``GET /webhooks`` snapshot files into one frame, one row per listed subscription.

    Parameters
    ----------
    paths
        Snapshot files, folders (every ``*.json`` directly inside) or glob patterns; a single
        path is accepted too. A file named twice is read once.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SNAPSHOT_COLUMNS`: ``fetched_at`` and ``created_at`` are
        ``datetime64[ns, UTC]``; ``subscription_id``, ``client_id``, ``url``, ``description``,
        ``last_delivery_status`` and ``source`` (the file path) are strings; ``events`` holds a
        tuple of strings (None when the listing omits the field); ``active`` is the nullable
        ``boolean``; ``secret_exposed`` is ``bool``. Rows are ordered by ``fetched_at``, then
        by file and listing order. Secret values are never kept.

    Raises
    ------
    InputError
        A path does not exist or a pattern matches nothing.
    LoadError
        One line naming the file: not a regular file, not JSON or not of the snapshot shape
        (``fetched_at`` missing, not ISO 8601, or outside the years 1678 to 2261). A listed
        field of the wrong type (``events`` not a list of strings, ``active`` not a boolean,
        ``createdAt`` not an ISO 8601 time of those years, ...) is left empty (``events``: an
        empty tuple) with one :class:`SnapshotWarning` per file naming the fields.

    Examples
    --------
    >>> import tempfile
    >>> listing = {"data": [{"id": "wh_1", "url": "https://hooks.example/a", "active": True}]}
    >>> snapshot = {"fetched_at": "2026-10-01T12:00:00Z", "base_url": "https://api.example",
    ...             "response": listing}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = Path(folder, "snapshot.json").write_text(json.dumps(snapshot))
    ...     df = load_snapshots([folder])
    >>> print(df[["fetched_at", "subscription_id", "url", "active"]].to_string(index=False))
                   fetched_at subscription_id                     url  active
    2026-10-01 12:00:00+00:00            wh_1 https://hooks.example/a    True
    """
    rows: list[dict[str, Any]] = []
    fetched: list[int] = []
    for path in snapshot_files(paths):
        fetched_ns, items = _read_snapshot(path)
        odd: list[str] = []
        for i, item in enumerate(items):
            notes: list[str] = []
            row = _row(item, notes)
            odd.extend(f"item {i + 1}: {n}" for n in notes)
            row["source"] = source_name(path)
            rows.append(row)
            fetched.append(fetched_ns)
        if odd:
            more = f"; and {len(odd) - 5} more" if len(odd) > 5 else ""
            warnings.warn(
                f"{path}: odd listing fields left empty: {'; '.join(odd[:5])}{more}",
                SnapshotWarning,
                stacklevel=2,
            )
    import pandas as pd  # start-up: `audit snapshot` loads this module, never pandas

    df = pd.DataFrame(
        {
            "fetched_at": _utc(fetched),
            **{
                col: pd.Series([r[col] for r in rows], dtype="str")
                for col in ("subscription_id", "client_id", "url")
            },
            "events": pd.Series([r["events"] for r in rows], dtype=object),
            "active": pd.Series([r["active"] for r in rows], dtype="boolean"),
            "description": pd.Series([r["description"] for r in rows], dtype="str"),
            "created_at": _utc([r["created_at"] for r in rows]),
            "last_delivery_status": pd.Series(
                [r["last_delivery_status"] for r in rows], dtype="str"
            ),
            "secret_exposed": pd.Series([r["secret_exposed"] for r in rows], dtype=bool),
            "source": pd.Series([r["source"] for r in rows], dtype="str"),
        },
        columns=list(SNAPSHOT_COLUMNS),
    )
    return df.sort_values("fetched_at", kind="stable", ignore_index=True)
