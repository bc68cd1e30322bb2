"""Secret values cut out of what the toolkit shows or stores (listings, messages).

The service may expose signing secrets in a ``GET /webhooks`` listing; :func:`redact_secrets`
replaces them (and any other string given, such as the API key) with :data:`REDACTED`. The
value of every secret-like key (:func:`secret_like`: ``secret``, ``signingKey``, ``x-api-key``,
``HMAC_SECRET``, ``access_token``, ``password``... at any depth) is redacted, whatever its type.

Process-wide, the values the toolkit knows to be sensitive (the API key once read, every secret
read from a secrets file) are registered with :func:`register_sensitive`; :func:`scrub` cuts
them out of any text (the CLI applies it to every error and warning), and
:func:`for_terminal` escapes control characters (ANSI escapes from the service or from
captures) before text reaches a terminal.

Captured incident data is attacker-controlled and may quote a secret. :func:`cut_secrets`
(a frame) and :func:`cut_secrets_arrow` (an Arrow table) cut every registered value out of
every text and bytes cell of a table before it is written: the report's tables and findings
(:func:`audit.report.compute.compute`), ``audit analyze --out`` (every table it writes) and
``audit verify --out``.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from audit.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "REDACTED",
    "ScrubFilter",
    "cut_secrets",
    "cut_secrets_arrow",
    "exposes_secret",
    "for_terminal",
    "install_log_filter",
    "json_for_terminal",
    "redact_secrets",
    "refuse_known_secrets",
    "register_sensitive",
    "scrub",
    "secret_like",
    "shown",
]

#: Registered values shorter than this are not scrubbed from text (they would mangle it);
#: secrets and keys are far longer.
MIN_SENSITIVE_LEN = 6
#: A string found under a secret-like key of a listing is cut from the listing's other strings
#: when it is at least this long: ``sha256`` under ``{"secret": {"alg": ...}}`` is not.
MIN_EXPOSED_LEN = 10
_SENSITIVE: set[str] = set()
_LOCK = threading.Lock()
_VERSION = 0  # of _SENSITIVE: the last _Cutter made is used again until it changes
_LAST: dict[tuple[int, tuple[str, ...]], _Cutter] = {}  # {(version, also): cutter}, one entry
# C0 controls except none, DEL, C1 controls, and bidi overrides/isolates that reorder text.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def register_sensitive(values: Iterable[object] | str) -> None:
    """Remember values (an API key, secrets) that :func:`scrub` must cut out of any text.

    Values that are not strings, or shorter than :data:`MIN_SENSITIVE_LEN`, are ignored.
    """
    if isinstance(values, str):
        values = [values]
    global _VERSION
    with _LOCK:
        _SENSITIVE.update(v for v in values if isinstance(v, str) and len(v) >= MIN_SENSITIVE_LEN)
        _VERSION += 1


class ScrubFilter(logging.Filter):
    """A logging filter that cuts registered sensitive values out of every record it passes.

    Installed on the loggers of httpx and httpcore, which log reason phrases and headers.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if _SENSITIVE:
            text = record.getMessage()
            clean = scrub(text)
            if clean != text:
                record.msg, record.args = clean, ()
        return True


#: Loggers that can repeat what a server said (reason phrases) or sent.
HTTP_LOGGERS = ("httpx", "httpcore.http11", "httpcore.http2", "httpcore.connection")


def install_log_filter(names: Iterable[str] = HTTP_LOGGERS) -> None:
    """Put one :class:`ScrubFilter` on each named logger (idempotent)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ScrubFilter) for f in logger.filters):
            logger.addFilter(ScrubFilter())


def known_sensitive() -> list[str]:
    """The registered values, longest first (so a value inside another is cut after it)."""
    with _LOCK:
        return sorted(_SENSITIVE, key=len, reverse=True)


def scrub(text: str, also: Iterable[str] = ()) -> str:
    """``text`` with every registered sensitive value (and those in ``also``) replaced.

    >>> register_sensitive("k3y-abcdef")
    >>> scrub("401 bad key k3y-abcdef")
    '401 bad key [redacted]'
    """
    key = (_VERSION, tuple(also))
    cutter = _LAST.get(key)
    if cutter is None:  # one made per listing, not per cell (300k rows)
        cutter = _Cutter(key[1])
        _LAST.clear()
        _LAST[key] = cutter
    return cutter.cut(text)


class _Cutter:
    """The values :func:`scrub` cuts (the registered ones and ``also``), with the escaped
    forms a message shows (``repr`` in ``{x!r}``, JSON) of a value with quotes, backslashes or
    non-ASCII characters; made once for many texts (:func:`redact_secrets`: every string of a
    listing). With many values, each is found through its first :data:`MIN_SENSITIVE_LEN`
    characters, so that a text costs its length, not the number of values (a listing of 1,000
    subscriptions with 2,000 secrets known took 31 s when every string compared every value)."""

    #: Up to this many values, each is looked for in the text (C speed); beyond, by its start.
    DIRECT = 64

    def __init__(self, also: Iterable[str] = ()) -> None:
        values = {*known_sensitive(), *(a for a in also if a)}
        values |= {f(v) for v in values for f in (_repr_inner, _json_inner)}
        self._values = sorted(values, key=len, reverse=True)
        self._short = [v for v in self._values if len(v) < MIN_SENSITIVE_LEN]
        self._by_start: dict[str, list[str]] = {}
        for v in self._values:
            if len(v) >= MIN_SENSITIVE_LEN:
                self._by_start.setdefault(v[:MIN_SENSITIVE_LEN], []).append(v)
        self._shortest = len(self._values[-1]) if self._values else 0

    @property
    def values(self) -> list[str]:
        """Every value cut, with its escaped forms, longest first."""
        return self._values

    def cut(self, text: str) -> str:
        """``text`` with each value replaced by :data:`REDACTED`, longest first."""
        if not self._values or len(text) < self._shortest:
            return text
        if len(self._values) <= self.DIRECT:
            found = self._values
        else:
            n, starts = MIN_SENSITIVE_LEN, self._by_start
            seen = [*self._short]
            for i in range(len(text) - n + 1):
                seen.extend(starts.get(text[i : i + n], ()))
            found = sorted(set(seen), key=len, reverse=True)
        for value in found:
            if value in text:
                text = text.replace(value, REDACTED)
        return text


def _repr_inner(value: str) -> str:
    return repr(value)[1:-1]


def _json_inner(value: str) -> str:
    return json.dumps(value)[1:-1]


def refuse_known_secrets(path: object, text: str, also: Iterable[str] = ()) -> None:
    """Raise InputError when ``text`` (a params or mutes file) holds a known secret value.

    Secrets travel by file path or variable name only; a value pasted into a parameters file
    would end up in the executed notebook and the manifest. The error names the file and the
    line, never the value.
    """
    for value in {*known_sensitive(), *(a for a in also if len(a) >= MIN_SENSITIVE_LEN)}:
        at = text.find(value)
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            raise InputError(
                f"{path}: line {line} holds the value of a known secret or API key; remove it "
                "(secrets go by file path or environment-variable name only)"
            )


def shown(value: object, limit: int = 40) -> str:
    """``repr`` of a user's value for a message: registered secrets cut first, then at most
    ``limit`` characters (shortening first would leave a secret's start that no longer matches
    the whole secret, and so would not be cut from the message).

    >>> shown("x" * 50, 5)
    "'xxxxx'"
    """
    return repr(scrub(str(value))[:limit])


def for_terminal(text: str) -> str:
    r"""Escape control characters so that text from outside cannot drive the terminal.

    >>> for_terminal("ok" + chr(27) + "[31m red" + chr(13))
    'ok\\x1b[31m red\\x0d'
    """
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def json_for_terminal(text: str) -> str:
    """JSON text with the characters JSON leaves raw but terminals obey (C1, bidi) escaped."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


#: What a secret value is replaced by wherever the toolkit writes or shows a listing.
REDACTED = "[redacted]"


#: Words that make a key secret-like wherever they stand in it (``signing_secret``,
#: ``SECRET_V2``, ``auth_token``, ``db-password``, ``hmac``, ``apiKey`` spelled as one word).
SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "token",
        "tokens",
        "password",
        "passwords",
        "passwd",
        "passphrase",
        "hmac",
        "credential",
        "credentials",
        "authorization",
        "apikey",
        "apikeys",
    }
)
#: A word holding one of these (``clientsecret``, ``mypassword``) is secret-like too; one
#: ending in ``token`` as well (``accesstoken``, ``refreshtoken``), not one starting with it
#: (``tokenizer``).
_SECRET_STEMS = ("secret", "password", "passwd", "passphrase", "credential")
#: ``key`` (or ``keys``) is secret-like after one of these words (``signing_key``, ``x-api-key``,
#: ``privateKey``) or glued to one (``signingkey``, ``HMACKEY``); alone it is not (``key`` names
#: header names, sort keys, idempotency keys).
KEY_QUALIFIERS = frozenset(
    {"signing", "api", "hmac", "private", "secret", "access", "client", "shared", "encryption"}
)
#: A key ending in one of these words describes a secret without holding it
#: (``secret_rotated_at``, ``tokenCount``, ``token_type``, ``signing_key_id``).
METADATA_WORDS = frozenset(
    {
        "at",
        "on",
        "time",
        "timestamp",
        "date",
        "created",
        "updated",
        "rotated",
        "expires",
        "expiry",
        "expiration",
        "ttl",
        "count",
        "length",
        "len",
        "size",
        "type",
        "kind",
        "version",
        "id",
        "ids",
        "status",
        "url",
        "uri",
        "name",
        "header",
        "algorithm",
        "alg",
        "scheme",
        "format",
    }
)
# Word boundaries: any run of non-alphanumerics; a lower-case letter or digit then a capital
# (signingKey); the last capital of an acronym before a capitalised word (HMACKey).
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")


def key_words(key: str) -> list[str]:
    """The words of a key, lower-cased, as :func:`secret_like` sees them.

    >>> key_words("HMACSigningKey"), key_words("x-api-key"), key_words("HMAC_SECRET_v2")
    (['hmac', 'signing', 'key'], ['x', 'api', 'key'], ['hmac', 'secret', 'v2'])
    """
    return [w.lower() for w in _WORD.findall(key)]


def _secret_word(word: str, before: str | None) -> bool:
    word = word.rstrip("0123456789") or word  # secret2, accessToken2
    if word in SECRET_WORDS or any(stem in word for stem in _SECRET_STEMS):
        return True
    if word.endswith(("token", "tokens")):
        return True
    if word in ("key", "keys"):
        return before in KEY_QUALIFIERS
    stem = word.removesuffix("s").removesuffix("key")
    return stem != word.removesuffix("s") and stem in KEY_QUALIFIERS


@functools.lru_cache(maxsize=4096)  # a listing repeats the same few keys 300,000 times
def secret_like(key: str) -> bool:
    """Whether a listing's key names a secret value, in any case and spelling style.

    The key is split into words at case changes and at any character other than a letter or
    digit (``signingKey``, ``Signing-Key``, ``signing_key``, ``SIGNING KEY``: ``signing key``).
    It is secret-like when one word is a secret word (:data:`SECRET_WORDS`; or a word holding
    ``secret``, ``password``, ``passwd``, ``passphrase``, ``credential``, or ending in
    ``token``; digits at a word's end do not count), or is ``key``/``keys`` after a qualifier
    (:data:`KEY_QUALIFIERS`: ``api_key``, ``x-api-key``, ``hmacKey``, ``apikey``) -- unless the
    key's last word is a metadata word (:data:`METADATA_WORDS`: ``secret_rotated_at``,
    ``token_count``, ``api_key_id``), which describes a secret without holding it.

    >>> [k for k in ["signingKey", "X-API-Key", "HMAC_SECRET", "access_token", "passwd"]
    ...  if secret_like(k)]
    ['signingKey', 'X-API-Key', 'HMAC_SECRET', 'access_token', 'passwd']
    >>> [k for k in ["secret_rotated_at", "tokenCount", "key", "public_key", "monkey"]
    ...  if secret_like(k)]
    []
    """
    words = key_words(key)
    if not words or (words[-1] in METADATA_WORDS):
        return False
    return any(_secret_word(w, words[i - 1] if i else None) for i, w in enumerate(words))


def redact_secrets(value: Any, *, also: Iterable[str] = ()) -> tuple[Any, int]:
    """Copy a decoded JSON value with every secret-like field's value replaced by ``[redacted]``.

    A field is secret-like when its key is (:func:`secret_like`: ``secret``, ``signingSecret``,
    ``signing_key``, ``hmacKey``, ``x-api-key``, ``token``, ``password``..., at any depth); its
    whole value is replaced, whatever its type, unless it holds no secret (null, empty, true or
    false). Known values are cut out of every other string, keys included, wherever they stand
    in it: the strings in ``also`` (e.g. the API key), every value registered with
    :func:`register_sensitive`, and every string value of :data:`MIN_EXPOSED_LEN` characters
    or more found under a secret-like key (a description or URL quoting the exposed secret).

    Returns
    -------
    (copy, count)
        ``count`` is the number of secret-like values replaced.

    Examples
    --------
    >>> redact_secrets({"data": [{"id": "wh_1", "secret": "s3cret"}]})
    ({'data': [{'id': 'wh_1', 'secret': '[redacted]'}]}, 1)
    >>> redact_secrets({"signing_key": "k-12345678", "note": "k-12345678!", "token_count": 2})
    ({'signing_key': '[redacted]', 'note': '[redacted]!', 'token_count': 2}, 1)
    """
    exposed = (s for field in _secret_fields(value) for s in _strings(field))
    cutter = _Cutter([*also, *(s for s in exposed if len(s) >= MIN_EXPOSED_LEN)])
    count = 0
    # An explicit stack, not recursion: a listing nested 100,000 deep must not crash.
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        v, parent, slot = stack.pop()
        if isinstance(v, dict):
            out: dict = {}
            for k, item in v.items():
                key = cutter.cut(k) if isinstance(k, str) else k
                if _holds_secret(k, item):
                    out[key] = REDACTED
                    count += 1
                else:
                    out[key] = None
                    stack.append((item, out, key))
            parent[slot] = out
        elif isinstance(v, list):
            items: list = [None] * len(v)
            stack.extend((x, items, i) for i, x in enumerate(v))
            parent[slot] = items
        elif isinstance(v, str):
            parent[slot] = cutter.cut(v)
        else:
            parent[slot] = v
    return root[0], count


def exposes_secret(value: Any) -> bool:
    """Whether :func:`redact_secrets` would redact a field of ``value`` (a listed subscription):
    a secret-like key at any depth with a value that is not null, empty, true or false.
    ``[redacted]`` itself counts, so a redacted listing still shows that a secret was exposed.

    >>> exposes_secret({"id": "wh_1", "hmacKey": "[redacted]"}), exposes_secret({"secret": ""})
    (True, False)
    """
    return next(_secret_fields(value), None) is not None


def _holds_secret(key: object, item: object) -> bool:
    """Whether ``item``, under ``key`` in an object, is a secret value to redact."""
    if not isinstance(key, str) or not secret_like(key):
        return False
    return not (item is None or isinstance(item, bool) or item in ("", [], {}))


def _secret_fields(value: Any) -> Iterator[Any]:
    """Every value to redact in ``value``, outermost first (not looked into further)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, item in v.items():
                if _holds_secret(k, item):
                    yield item
                else:
                    stack.append(item)
        elif isinstance(v, list):
            stack.extend(v)


def _strings(value: Any) -> Iterator[str]:
    """Every string value in a decoded JSON value (not the keys: ``{"value": ...}``)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


# --------------------------------------------------------------------------------------------
# Known secrets cut out of tables (captured incident data may quote one)
# --------------------------------------------------------------------------------------------


def _cut_value(cutter: _Cutter, value: Any) -> Any:
    """``value`` with the cutter's values cut: text, bytes (as UTF-8), and the strings of lists,
    tuples and dicts (a listing's ``events``); other values unchanged."""
    if isinstance(value, str):
        return cutter.cut(value)
    if isinstance(value, bytes | bytearray):
        out = bytes(value)
        for v in cutter.values:
            out = out.replace(v.encode("utf-8", "surrogatepass"), REDACTED.encode())
        return out
    if isinstance(value, list | tuple):
        return type(value)(_cut_value(cutter, v) for v in value)
    if isinstance(value, dict):
        return {_cut_value(cutter, k): _cut_value(cutter, v) for k, v in value.items()}
    return value


def _holds(cutter: _Cutter, value: Any) -> bool:
    return _cut_value(cutter, value) != value


def _hits(cutter: _Cutter, array: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """Where a text or binary Arrow array holds one of the cutter's values (a boolean numpy
    array), or None when nowhere. Vectorised: one pass per distinct start of a value (the
    secrets of a file share ``whsec_``), then the few cells holding a start are checked whole."""
    import numpy as np  # start-up: the CLI imports this module for scrub
    import pyarrow as pa  # start-up: as above
    import pyarrow.compute as pc  # start-up: as above

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    binary = pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type)
    starts = {v[:MIN_SENSITIVE_LEN] for v in cutter.values}
    found = None
    for start in starts:
        needle = start.encode("utf-8", "surrogatepass") if binary else start
        try:
            hit = pc.match_substring(array, needle)
        except (pa.ArrowInvalid, UnicodeEncodeError):  # a value Arrow cannot look for
            hit = pa.array([x is not None for x in array.to_pylist()], pa.bool_())
        found = hit if found is None else pc.or_(found, hit)
    if found is None:
        return None
    # a null cell holds nothing (fill_null(False) would build a scalar, which imports pandas)
    found = pc.and_kleene(found, pc.is_valid(found))
    if not pc.any(found).as_py():
        return None
    rows = np.flatnonzero(np.asarray(found.to_numpy(zero_copy_only=False)))
    cells = array.take(pa.array(rows)).to_pylist()
    out = np.zeros(len(array), dtype=bool)
    out[rows] = [_holds(cutter, x) for x in cells]
    return out if out.any() else None


def _text_like(typ: pa.DataType) -> bool:
    import pyarrow as pa  # start-up: the CLI imports this module for scrub

    t = pa.types
    return t.is_string(typ) or t.is_large_string(typ) or t.is_binary(typ) or t.is_large_binary(typ)


def cut_secrets(frame: pd.DataFrame, also: Iterable[str] = ()) -> pd.DataFrame:
    """``frame`` with every known secret value cut out of its text and bytes cells.

    The values are those registered with :func:`register_sensitive` (every secret of a
    secrets file read in this process, the API key) and ``also``, each in its plain, ``repr``
    and JSON-escaped forms, replaced by :data:`REDACTED`. Text columns are searched at once
    (Arrow), one pass per value; only the cells that hold one are rewritten. Object columns
    (bytes bodies, lists) are searched cell by cell. ``frame`` itself is returned when no cell
    holds a value (no copy).

    >>> import pandas as pd
    >>> register_sensitive("whsec_doctest_cut")
    >>> f = pd.DataFrame({"url": ["https://x/?k=whsec_doctest_cut", "ok"], "n": [1, 2]})
    >>> cut_secrets(f)["url"].tolist()
    ['https://x/?k=[redacted]', 'ok']
    """
    import numpy as np  # start-up: the CLI imports this module for scrub
    import pandas as pd  # start-up: as above
    import pyarrow as pa  # start-up: as above

    cutter = _Cutter(also)
    if not cutter.values or frame.empty:
        return frame
    out = frame
    for i, (_name, s) in enumerate(frame.items()):
        if s.dtype == object:
            hit = np.fromiter((_holds(cutter, v) for v in s.tolist()), bool, len(s))
        elif isinstance(s.dtype, pd.StringDtype) or (
            isinstance(s.dtype, pd.ArrowDtype) and _text_like(s.dtype.pyarrow_dtype)
        ):
            found = _hits(cutter, pa.array(s.array))
            if found is None:
                continue
            hit = found
        else:
            continue
        if not hit.any():
            continue
        if out is frame:
            out = frame.copy()
        rows = np.flatnonzero(hit)
        column = out.iloc[:, i].copy()
        column.iloc[rows] = [_cut_value(cutter, v) for v in s.iloc[rows].tolist()]
        out.isetitem(i, column.array)
    return out


def cut_secrets_arrow(table: pa.Table, also: Iterable[str] = ()) -> pa.Table:
    """An Arrow table with every known secret value cut out of its text and binary columns,
    as :func:`cut_secrets` does (schema and metadata kept); ``table`` itself when none holds
    one."""
    import pyarrow as pa  # start-up: the CLI imports this module for scrub
    import pyarrow.compute as pc  # start-up: as above

    cutter = _Cutter(also)
    if not cutter.values:
        return table
    for i, field in enumerate(table.schema):
        if not _text_like(field.type):
            continue
        column = table.column(i).combine_chunks()
        found = _hits(cutter, column)
        if found is None:
            continue
        mask = pa.array(found)
        shown = pc.filter(column, mask).to_pylist()
        cut = pa.array([_cut_value(cutter, v) for v in shown], field.type)
        table = table.set_column(i, field, pc.replace_with_mask(column, mask, cut))
    return table
