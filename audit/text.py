"""Text in what the toolkit reads: JSON and YAML may escape half a UTF-16 pair.

``json.loads`` (and YAML's double-quoted strings) turn ``"\\ud800"`` into a lone surrogate: a
``str`` that is not text, which no UTF-8 output, Arrow column or HTTP request can hold. Read
from a snapshot, a mutes or parameters file, a secrets file or an answer of the service, it
ended later in an "internal error". Readers check a decoded document once with
:func:`holds_lone_surrogate` and refuse it in one line naming the file.
"""

from __future__ import annotations

import re

__all__ = ["NOT_TEXT", "holds_lone_surrogate", "pairs_joined"]

_SURROGATE = re.compile("[\ud800-\udfff]")

#: How a refusal says why (after the file's name).
NOT_TEXT = "a \\u escape of half a UTF-16 pair (\\ud800-\\udfff alone) is not text"


def holds_lone_surrogate(value: object) -> bool:
    """Whether any string of a decoded document (object keys included) holds a lone surrogate.

    >>> holds_lone_surrogate({"a": ["ok", {"b": "x\\ud800"}]}), holds_lone_surrogate({"é": "😀"})
    (True, False)
    """
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if not v.isascii() and _SURROGATE.search(v) is not None:
                return True
        elif isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list | tuple):
            todo.extend(v)
    return False


def pairs_joined(value: object) -> object:
    """A decoded YAML document with each escaped UTF-16 pair joined into its character: YAML
    reads ``"\\ud83d\\ude00"`` as two surrogates where JSON reads one emoji (a JSON parameters
    file is read as YAML). Half a pair is left as it is, for :func:`holds_lone_surrogate`.

    >>> pairs_joined({"a": ["\\ud83d\\ude00", "\\ud800"]}) == {"a": ["\\U0001f600", "\\ud800"]}
    True
    """
    if isinstance(value, str):
        if value.isascii() or _SURROGATE.search(value) is None:
            return value
        try:
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            return value
    if isinstance(value, dict):
        return {pairs_joined(k): pairs_joined(v) for k, v in value.items()}
    if isinstance(value, list):
        return [pairs_joined(v) for v in value]
    return value
