"""Safe output of attacker-controlled values (incident URLs, subjects, delivery ids).

Three defences, one place:

* CSV cells that a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``,
  tab or carriage return) get a leading apostrophe (OWASP "CSV injection").
* URLs in reports are defanged (``hxxps://evil[.]example/...``) so that nobody clicks them.
* HTML escaping is left to the renderer (nbconvert/pandas ``to_html`` escape by default);
  :func:`defang` output is plain text and still gets escaped.
"""

from __future__ import annotations

import os
import re

import pandas as pd

__all__ = ["FORMULA_PREFIXES", "defang", "neutralise_cell", "neutralise_frame", "write_csv"]

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")

_SCHEME = re.compile(r"^\s*(h)(tt)(ps?)(:)", re.IGNORECASE)
_OTHER_SCHEME = re.compile(r"^\s*([a-z][a-z0-9+.-]*):", re.IGNORECASE)


def neutralise_cell(value: object) -> object:
    """Prefix a string that a spreadsheet would evaluate with ``'``; other values unchanged.

    >>> neutralise_cell('=HYPERLINK("http://x")')
    '\\'=HYPERLINK("http://x")'
    >>> neutralise_cell("inc_1")
    'inc_1'
    """
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def neutralise_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells are neutralised; numeric columns (e.g. negative skew) untouched."""
    out = df.copy()
    for col in out.columns:
        s = out[col]
        if pd.api.types.is_string_dtype(s) or s.dtype == object:
            out[col] = s.map(neutralise_cell)
    return out


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a frame as CSV (UTF-8, ISO times) with every text cell neutralised."""
    neutralise_frame(df).to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S.%fZ")


def defang(url: object) -> object:
    """Defang a URL or domain for display: ``https://evil.example`` -> ``hxxps://evil[.]example``.

    Every dot becomes ``[.]``; ``http``/``https`` become ``hxxp``/``hxxps``; any other scheme
    (``javascript:``, ``data:``) gets its colon bracketed so that it is no longer a link.

    >>> defang("https://login.evil.example/a.php?x=1")
    'hxxps://login[.]evil[.]example/a[.]php?x=1'
    >>> defang("javascript:alert(1)")
    'javascript[:]alert(1)'
    """
    if not isinstance(url, str):
        return url
    text = url.replace(".", "[.]")
    if _SCHEME.match(text):
        return _SCHEME.sub(lambda m: f"{m.group(1)}xx{m.group(3)}{m.group(4)}", text, count=1)
    return _OTHER_SCHEME.sub(lambda m: f"{m.group(1)}[:]", text, count=1)
