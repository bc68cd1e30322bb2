"""What analyses read from a body, extracted once at ingest (never parsed again downstream)."""

from __future__ import annotations

import hashlib

import orjson

from audit.tables import DATA_FIELDS

__all__ = ["EXTRACTED", "body_columns", "extract"]

#: Columns :func:`extract` gives, in order.
EXTRACTED = ("body_sha256", "fingerprint", *(col for _, col in DATA_FIELDS), "data_invalid")
_NOT_PARSED = object()


def extract(body: bytes | None, env: object = _NOT_PARSED) -> tuple:
    """What analyses read from one body (values in :data:`EXTRACTED` order): its sha256, the
    envelope fingerprint (sha256 of the canonical JSON of ``event`` and ``data``), the known
    ``data`` fields and how many had the wrong JSON type (the rules of
    :mod:`audit.analysis.incidents`).
    ``env`` is the body already parsed (None when it is not JSON), to parse it only once."""
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
    if type(data) is not dict:
        data = {}
    out: list = [sha, fp]
    bad = 0
    for key, _ in DATA_FIELDS:
        v = data.get(key)
        if type(v) is str:
            out.append(v)
        elif type(v) is bool and key == "waitForClient":
            out.append("true" if v else "false")
        else:
            out.append(None)
            bad += v is not None
    out.append(bad)
    return tuple(out)


def body_columns(bodies: list) -> dict[str, list]:
    """:func:`extract` for every body, as columns."""
    if not bodies:
        return {name: [] for name in EXTRACTED}
    rows = zip(*map(extract, bodies), strict=True)
    return {name: list(values) for name, values in zip(EXTRACTED, rows, strict=True)}
