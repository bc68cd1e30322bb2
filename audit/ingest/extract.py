"""What analyses read from a body, extracted once at ingest (never parsed again downstream)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson

from audit.tables import DATA_FIELDS

__all__ = ["EXTRACTED", "Extracted", "body_columns", "extract", "extracted_columns"]

#: Columns :func:`extract` gives, in order.
EXTRACTED = ("body_sha256", "fingerprint", *(col for _, col in DATA_FIELDS), "data_invalid")
_NOT_PARSED = object()


class Extracted(NamedTuple):
    """What :func:`extract` reads from one body."""

    body_sha256: str | None
    fingerprint: str | None
    #: The known ``data`` fields, in :data:`audit.tables.DATA_FIELDS` order.
    data: tuple[str | None, ...]
    #: How many known ``data`` fields had the wrong JSON type (ignored).
    data_invalid: int


def extract(body: bytes | None, env: object = _NOT_PARSED) -> Extracted:
    """What analyses read from one body: its sha256, the envelope fingerprint (sha256 of the
    canonical JSON of ``event`` and ``data``), the known ``data`` fields and how many had the
    wrong JSON type (the rules of :mod:`audit.analysis.incidents`).
    ``env`` is the body already parsed (None when it is not JSON), to parse it only once.

    >>> e = extract(b'{"event": "x", "data": {"clientId": "c1", "status": 3}}')
    >>> e.data[0], e.data_invalid, len(e.body_sha256)
    ('c1', 1, 64)
    >>> extract(None).body_sha256 is None
    True
    """
    data: object = None
    if body is None:
        sha = fp = None
    else:
        sha = hashlib.sha256(body).hexdigest()
        if env is _NOT_PARSED:
            try:
                env = orjson.loads(body)
            except orjson.JSONDecodeError:
                env = None
        if type(env) is dict:
            data = env.get("data")
            canon = orjson.dumps(
                {"data": data, "event": env.get("event")}, option=orjson.OPT_SORT_KEYS
            )
            fp = hashlib.sha256(canon).hexdigest()
        else:
            fp = None
    fields: dict[str, object] = data if type(data) is dict else {}
    out: list[str | None] = []
    bad = 0
    for key, _ in DATA_FIELDS:
        v = fields.get(key)
        if type(v) is str:
            out.append(v)
        elif type(v) is bool and key == "waitForClient":
            out.append("true" if v else "false")
        else:
            out.append(None)
            bad += v is not None
    return Extracted(sha, fp, tuple(out), bad)


def extracted_columns(values: Iterable[Extracted]) -> dict[str, list[Any]]:
    """:func:`extract`'s results as the columns :data:`EXTRACTED`."""
    got = list(values)
    if not got:
        return {name: [] for name in EXTRACTED}
    sha, fp, data, bad = zip(*got, strict=True)
    fields = zip(*data, strict=True)
    columns = [sha, fp, *fields, bad]
    return {name: list(v) for name, v in zip(EXTRACTED, columns, strict=True)}


def body_columns(bodies: list[bytes | None]) -> dict[str, list[Any]]:
    """:func:`extract` for every body, as columns."""
    return extracted_columns(map(extract, bodies))
