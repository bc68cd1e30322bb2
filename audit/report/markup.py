"""Small HTML pieces shared by the report and the index: badges, escaping, the style sheet.

Every text that may come from incident data goes through :func:`text` (escaped, URLs and host
names defanged one by one, invisible characters shown as their code).
Badges carry a word and a symbol as well as a colour, so they read in grey print too.
"""

from __future__ import annotations

import html
import re
import unicodedata
from importlib.resources import files

from audit.safe import DOTS, LINK_SCHEMES, defang
from audit.spec import EVENTS

__all__ = ["CSS", "SYMBOLS", "badge", "badges", "defang_text", "esc", "text"]

#: The symbol of each status, severity and trend kind: a distinct one for each severity (the
#: badge's word says it too), so a badge reads without colour.
SYMBOLS = {
    "fail": "✗",
    "error": "!",
    "pass": "✓",
    "skip": "–",
    "info": "i",
    "muted": "∅",
    "critical": "◆",
    "high": "▲",
    "medium": "■",
    "low": "▼",
    "new": "+",
    "resolved": "✓",
    "persisting": "=",
}
_SYMBOL = SYMBOLS

CSS = (files("audit.report") / "templates" / "html" / "style.css").read_text(encoding="utf-8")
"""The one stylesheet (``templates/html/style.css``), inlined in every page."""


def esc(value: object) -> str:
    r"""HTML-escape ``str(value)``; invisible format characters (Unicode category Cf: bidi
    controls, which can make ``evil.example`` read as something else, zero-width spaces and
    joiners, U+2060, U+FEFF, the soft hyphen) and control characters but tab and line breaks
    (NUL, ESC, DEL, C1) are shown as their ``\uXXXX`` code.

    >>> esc(chr(0x202E) + "elpmaxe<"), esc("pay\u200bpal")
    ('\\u202eelpmaxe&lt;', 'pay\\u200bpal')
    """
    text = html.escape("" if value is None else str(value), quote=True)
    return text.translate(_SHOWN)


def _format_characters() -> str:
    """Every character of category Cf (all lie in planes 0, 1 and 14)."""
    planes = (*range(0x20000), *range(0xE0000, 0xE1000))
    return "".join(chr(c) for c in planes if unicodedata.category(chr(c)) == "Cf")


_CF = _format_characters()
_SHOWN = {ord(c): f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}" for c in _CF}
# Control characters but tab and line breaks (NUL is a parse error in HTML), DEL and C1 too.
_SHOWN |= {c: f"\\u{c:04x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10, 13)}

# A URL: from a scheme (LINK_SCHEMES, or any word before "://") to the end of its token.
_URL = re.compile(
    rf"(?:(?<![a-z0-9+.\-])(?:{LINK_SCHEMES}):|(?<![a-z0-9+.\-])[a-z][a-z0-9+.\-]*://|://)\S*",
    re.IGNORECASE,
)
# A host: labels of letters, digits, "-", "_" (and invisible characters, which IDNA drops)
# joined by any dot form; which of its dots are defanged is decided by _host below.
_LABEL = rf"[\w\-{_CF}]+"
# Each starts where a label starts (the lookbehinds): a long run of letters is tried once, not
# from each of its characters (which made a 40,000-character cell take 30 s).
_HOST = re.compile(rf"(?<![\w\-{_CF}]){_LABEL}(?:[{re.escape(DOTS)}]{_LABEL})+")
_SPLIT = re.compile(rf"([{re.escape(DOTS)}])")
#: Dotted names of the spec's own events: not hosts, shown as they are.
_OWN = frozenset(EVENTS)


def defang_text(value: str) -> str:
    """Defang each URL and host name in a text, leaving everything else as it is.

    A URL (a :data:`~audit.safe.LINK_SCHEMES` scheme anywhere, or a word before ``://``, to
    the next whitespace) is defanged by :func:`~audit.safe.defang`. In a host name (labels of
    letters, digits, ``-`` and ``_`` joined by any dot form) each dot that has, after it, a
    label starting with a letter and at least two characters long becomes ``[.]``: numbers
    (``532.08``, ``1.5e3``) and versions (``2.0.1``) are never touched.

    >>> defang_text("+evil.example at 532.08, see javascript:alert(1)")
    '+evil[.]example at 532.08, see javascript[:]alert(1)'
    """
    out, at = [], 0
    for m in _URL.finditer(value):
        out += [_HOST.sub(_host, value[at : m.start()]), str(defang(m.group()))]
        at = m.end()
    out.append(_HOST.sub(_host, value[at:]))
    return "".join(out)


def _host(m: re.Match[str]) -> str:
    if m.group() in _OWN:
        return m.group()
    parts = _SPLIT.split(m.group())  # label, dot, label, dot, ..., label
    labels = [p.translate(_DROP) for p in parts[::2]]
    if labels[-1].lower() in _FILE_TYPES:  # a capture file's name, not a host
        return m.group()
    live = [len(lb) >= 2 and lb[0].isalpha() for lb in labels]
    last = max((i for i, ok in enumerate(live) if ok), default=0)
    return "".join("[.]" if i % 2 and i // 2 < last else p for i, p in enumerate(parts))


_DROP = dict.fromkeys(map(ord, _CF))
#: Name endings of the files a report names (capture logs, tables), none of them a top-level
#: domain: ``receiver-2026-10-02.jsonl.gz`` stays readable.
_FILE_TYPES = frozenset(("jsonl", "json", "gz", "har", "csv", "parquet", "log", "txt", "ndjson"))


def text(value: object) -> str:
    """Escape, after defanging every URL and host name in it (:func:`defang_text`).

    >>> text("https://evil.example/<b>"), text("waited 532.08 h on www.evil.example")
    ('hxxps://evil[.]example/&lt;b&gt;', 'waited 532.08 h on www[.]evil[.]example')
    """
    return esc(defang_text("" if value is None else str(value)))


def badge(kind: str, label: str | None = None, count: int | None = None) -> str:
    """A badge: colour for the eye, a symbol and a word for everyone else; a zero count is
    grey (class ``zero``). The templates' ``badge`` macro (``macros.j2``) draws the same.

    >>> badge("fail", count=3), badge("high", count=0)
    ('<span class="badge fail">✗ FAIL 3</span>', '<span class="badge high zero">▲ HIGH 0</span>')
    """
    word = (label or kind).upper()
    tail = f" {count:,}" if count is not None else ""
    symbol = _SYMBOL.get(kind, "")
    zero = " zero" if count == 0 else ""
    return f'<span class="badge {esc(kind)}{zero}">{esc(symbol)} {esc(word)}{tail}</span>'.replace(
        '"> ', '">'
    )


def badges(counts: dict[str, int], order: tuple[str, ...]) -> str:
    """One badge per kind in ``order`` (zero counts included, so a quiet month says so)."""
    return "".join(badge(k, count=int(counts.get(k, 0))) for k in order)
