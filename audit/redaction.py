"""Secret values cut out of what the toolkit shows or stores (listings, messages).

The service may expose signing secrets in a ``GET /webhooks`` listing; :func:`redact_secrets`
replaces them (and any other string given, such as the API key) with :data:`REDACTED`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "redact_secrets"]

#: What a secret value is replaced by wherever the toolkit writes or shows a listing.
REDACTED = "[redacted]"


def redact_secrets(value: Any, *, also: Iterable[str] = ()) -> tuple[Any, int]:
    """Copy a decoded JSON value with every non-empty ``secret`` field replaced by ``[redacted]``.

    Keys are matched case-insensitively at any depth. Strings listed in ``also`` (e.g. the API
    key) are cut out of every string value as well.

    Returns
    -------
    (copy, count)
        ``count`` is the number of ``secret`` values replaced.

    Examples
    --------
    >>> redact_secrets({"data": [{"id": "wh_1", "secret": "s3cret"}]})
    ({'data': [{'id': 'wh_1', 'secret': '[redacted]'}]}, 1)
    """
    extra = [s for s in also if s]
    count = 0

    def walk(v: Any) -> Any:
        nonlocal count
        if isinstance(v, dict):
            out = {}
            for k, item in v.items():
                if isinstance(k, str) and k.lower() == "secret" and item not in (None, ""):
                    out[k] = REDACTED
                    count += 1
                else:
                    out[k] = walk(item)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str):
            for s in extra:
                v = v.replace(s, REDACTED)
        return v

    return walk(value), count
