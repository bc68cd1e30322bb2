"""Small HTML pieces shared by the report and the index: badges, escaping, the style sheet.

Every text that may come from incident data goes through :func:`text` (escaped, URLs defanged).
Badges carry a word and a symbol as well as a colour, so they read in grey print too.
"""

from __future__ import annotations

import html
import re

from audit.safe import defang

__all__ = ["CSS", "badge", "badges", "esc", "text"]

_SYMBOL = {
    "fail": "✗",
    "error": "!",
    "pass": "✓",
    "skip": "–",
    "info": "i",
    "muted": "∅",
    "critical": "▲",
    "high": "▲",
    "medium": "■",
    "low": "▼",
    "new": "+",
    "resolved": "✓",
    "persisting": "=",
}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1f24; }
.audit-header h1 { margin-bottom: 0.2em; }
.audit-header dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px;
  margin: 0.5em 0 1em; }
.audit-header dt { font-weight: 600; color: #444; white-space: nowrap; }
.audit-header dd { margin: 0; }
.badge { display: inline-block; border-radius: 3px; padding: 1px 7px; margin: 1px 4px 1px 0;
  font-size: 0.85em; font-weight: 600; border: 1px solid transparent; white-space: nowrap; }
.badge.fail, .badge.error, .badge.critical, .badge.high, .badge.new {
  background: #fde8e8; color: #8b1111; border-color: #d33; }
.badge.pass, .badge.resolved { background: #e6f4ea; color: #0d5b25; border-color: #2b8a3e; }
.badge.skip, .badge.muted, .badge.low, .badge.persisting {
  background: #f1f3f5; color: #343a40; border-color: #868e96; }
.badge.info, .badge.medium { background: #e7f1fb; color: #0b4a8b; border-color: #3b7dd8; }
.badge.medium { background: #fff4e0; color: #7a4a00; border-color: #d48806; }
.badge-row { margin: 0.3em 0 0.8em; }
.finding { border: 1px solid #d0d7de; border-left: 5px solid #d33; border-radius: 4px;
  padding: 0.5em 0.9em; margin: 0.6em 0; }
.finding h4 { margin: 0.1em 0 0.4em; }
.finding dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; margin: 0; }
.finding dt { font-weight: 600; color: #444; white-space: nowrap; }
.finding dd { margin: 0; overflow-wrap: anywhere; }
.uid { font-family: ui-monospace, monospace; font-size: 0.85em; color: #555; }
table.audit { border-collapse: collapse; margin: 0.4em 0 1.2em; font-size: 0.88em; }
table.audit caption { text-align: left; font-weight: 600; padding: 0.3em 0;
  white-space: nowrap; }
table.audit th, table.audit td { border: 1px solid #d0d7de; padding: 3px 8px;
  vertical-align: top; }
table.audit th { background: #f3f4f6; text-align: left; white-space: nowrap;
  overflow-wrap: normal; word-break: keep-all; hyphens: none; }
table.audit td { max-width: 36em; overflow-wrap: break-word; }
table.audit td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.note { color: #555; font-size: 0.9em; }
figure.audit { margin: 0.5em 0 1.5em; }
figure.audit img { max-width: 100%; height: auto; }
figure.audit figcaption { color: #444; font-size: 0.9em; max-width: 60em; }
"""


def esc(value: object) -> str:
    r"""HTML-escape ``str(value)``; bidi controls (which can make ``evil.example`` read as
    something else) are shown as their ``\uXXXX`` code.

    >>> esc(chr(0x202E) + "elpmaxe<")
    '\\u202eelpmaxe&lt;'
    """
    text = html.escape("" if value is None else str(value), quote=True)
    return _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def text(value: object) -> str:
    """Escape, after defanging anything that looks like a URL or a scheme.

    >>> text("https://evil.example/<b>")
    'hxxps://evil[.]example/&lt;b&gt;'
    """
    s = "" if value is None else str(value)
    if "://" in s or s.lower().lstrip().startswith(("javascript:", "data:", "vbscript:")):
        s = str(defang(s))
    return esc(s)


def badge(kind: str, label: str | None = None, count: int | None = None) -> str:
    """A badge: colour for the eye, a symbol and a word for everyone else.

    >>> badge("fail", count=3)
    '<span class="badge fail">✗ FAIL 3</span>'
    """
    word = (label or kind).upper()
    tail = f" {count}" if count is not None else ""
    symbol = _SYMBOL.get(kind, "")
    return f'<span class="badge {esc(kind)}">{esc(symbol)} {esc(word)}{tail}</span>'.replace(
        '"> ', '">'
    )


def badges(counts: dict[str, int], order: tuple[str, ...]) -> str:
    """One badge per kind in ``order`` (zero counts included, so a quiet month says so)."""
    return "".join(badge(k, count=int(counts.get(k, 0))) for k in order)
