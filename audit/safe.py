"""Safe output of attacker-controlled values (incident URLs, subjects, delivery ids).

Four defences, one place:

* CSV cells that a spreadsheet would run as a formula get a leading apostrophe (OWASP "CSV
  injection"): a text cell that starts with tab or carriage return, or whose first character
  after leading whitespace is ``=``, ``+``, ``-`` or ``@``. A text cell that is a plain number
  (``-1.5``, ``+3``) and does not start with tab or CR is left alone, and so are numeric
  columns. :func:`write_csv` is the one CSV writer: it quotes every text cell, so a CR, LF or
  any other line break stays inside its cell.
* Control and invisible characters in CSV cells are shown as their code (``\\u202e``), as the
  HTML report shows them (:func:`audit.report.markup.esc`): control characters but tab and line
  breaks (NUL, ESC, DEL, C1) and every format character (Unicode category Cf: bidi overrides
  such as U+202E that make ``evil.example`` read as something else, zero-width spaces, U+FEFF).
  :data:`SHOWN_AS_CODE` is the table.
* URLs in reports are defanged (``hxxps://evil[.]example/...``) so that nobody clicks them:
  every dot, including the ideographic and full-width forms a browser reads as one, is ``[.]``.
* HTML escaping is left to the renderer (nbconvert/pandas ``to_html`` escape by default);
  :func:`defang` output is plain text and still gets escaped.
"""

from __future__ import annotations

import csv
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from audit.atomic import atomic_output

__all__ = [
    "CSV_DATE_FORMAT",
    "DOTS",
    "FORMULA_PREFIXES",
    "LINK_SCHEMES",
    "SHOWN_AS_CODE",
    "defang",
    "neutralise_cell",
    "neutralise_frame",
    "shown_as_code",
    "write_csv",
    "write_csv_rows",
]

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
#: ISO format of times in every CSV.
CSV_DATE_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

# Live: starts with TAB/CR, or =+-@ after any leading whitespace (\s covers every line break).
# Their full-width forms (U+FF1D, U+FF0B, U+FF0D, U+FF20) count too, as a precaution: Excel
# with a CJK input method turns a typed full-width operator into its ASCII form, and an extra
# "'" on text that starts with one costs nothing.
_OPERATORS = "=+\\-@\uff1d\uff0b\uff0d\uff20"
_LIVE = re.compile(rf"[\t\r]|\s*[{_OPERATORS}]")
# The same test in RE2 (pyarrow), run on a whole column at once: its \s is ASCII only, so
# Python's whitespace (every character whose str.isspace() is true) is spelled out.
_SPACE = "".join(f"\\x{{{c:x}}}" for c in range(0x3001) if chr(c).isspace())
_LIVE_RE2 = rf"^(?:[\t\r]|[{_SPACE}]*[{_OPERATORS}])"
# A plain number (kept as it is), unless it starts with TAB or CR, which are always live.
_NUMBER = re.compile(r"(?![\t\r])\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*")

#: Every character a browser reads as a dot in a host name: ``.`` and U+3002, U+FF0E, U+FF61.
DOTS = ".\u3002\uff0e\uff61"
_DOT = re.compile(f"[{re.escape(DOTS)}]")
#: Schemes that make a link wherever they stand (not after a letter, digit, ``+``, ``-``, ``.``).
LINK_SCHEMES = (
    "https?|s?ftps?|file|javascript|vbscript|livescript|data|blob|wss?|mailto|smb|ssh|telnet"
)
_HTTP = re.compile(r"(?<![a-z0-9+.\-])(h)(tt)(ps?)(?=:)", re.IGNORECASE)
_LINK_SCHEME = re.compile(rf"(?<![a-z0-9+.\-])(?:{LINK_SCHEMES}):", re.IGNORECASE)
_ANY_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*):", re.IGNORECASE)


def _format_characters() -> str:
    """Every character of category Cf (all lie in planes 0, 1 and 14)."""
    planes = (*range(0x20000), *range(0xE0000, 0xE1000))
    return "".join(chr(c) for c in planes if unicodedata.category(chr(c)) == "Cf")


def _code(c: int) -> str:
    return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"


_CONTROLS = [c for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10, 13)]
#: ``str.translate`` table of the characters a CSV cell shows as their code: control characters
#: but tab and line breaks (NUL, ESC, DEL, C1) and every format character (category Cf).
SHOWN_AS_CODE = {c: _code(c) for c in (*_CONTROLS, *map(ord, _format_characters()))}
# The same characters as one RE2 class (pyarrow), to find the cells to translate at once.
_CODED_RE2 = "[" + "".join(f"\\x{{{c:x}}}" for c in sorted(SHOWN_AS_CODE)) + "]"


def shown_as_code(text: str) -> str:
    r"""``text`` with control and invisible format characters as their code (as in HTML).

    >>> shown_as_code("\u202eelpmaxe" + chr(27) + "[31m"), shown_as_code("a\tb\nc")
    ('\\u202eelpmaxe\\u001b[31m', 'a\tb\nc')
    """
    return text.translate(SHOWN_AS_CODE)


def neutralise_cell(value: object) -> object:
    """Prefix a string that a spreadsheet would evaluate with ``'``, after showing its control
    and invisible characters as codes (:func:`shown_as_code`); other values unchanged.

    >>> neutralise_cell('=HYPERLINK("http://x")')
    '\\'=HYPERLINK("http://x")'
    >>> neutralise_cell("  @SUM(1+1)"), neutralise_cell("-1.5"), neutralise_cell("inc_1")
    ("'  @SUM(1+1)", '-1.5', 'inc_1')
    """
    if isinstance(value, str):  # NUL too: a reader may cut the cell there
        value = value.translate(SHOWN_AS_CODE)
    if isinstance(value, str) and _LIVE.match(value) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def neutralise_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells are neutralised; numeric columns (e.g. negative skew) untouched."""
    out = df.copy()
    for col in out.columns:
        s = out[col]
        if s.dtype == object:
            out[col] = s.map(lambda v: neutralise_cell(v if isinstance(v, str) else _text(v)))
        elif pd.api.types.is_string_dtype(s):
            coded = _coded(s)  # NUL too: a reader may cut the cell there
            if coded.any():
                s = out[col] = s.mask(coded, s[coded].map(shown_as_code, na_action="ignore"))
            live = _live(s)
            if live.any():
                out[col] = s.mask(live, "'" + s)
    return out


def _coded(s: pd.Series) -> np.ndarray:
    """True where a text cell holds a character of :data:`SHOWN_AS_CODE`."""
    found = pc.match_substring_regex(pa.array(s, type=pa.large_string()), pattern=_CODED_RE2)
    return np.array(pc.fill_null(found, False), dtype=bool)


def _live(s: pd.Series) -> np.ndarray:
    """:func:`neutralise_cell`'s test on a text column: True where a cell would change."""
    found = pc.match_substring_regex(pa.array(s, type=pa.large_string()), pattern=_LIVE_RE2)
    live = np.array(pc.fill_null(found, False), dtype=bool)
    found = np.flatnonzero(live)  # few: a plain number (-1.5) stays, unless after TAB/CR
    for i, value in zip(found, s.iloc[found].tolist(), strict=True):
        live[i] = _NUMBER.fullmatch(value) is None
    return live


def _text(value: Any) -> object:
    """A non-string object cell as the CSV shows it (tuples, lists: their ``str``); any
    object a frame may hold."""
    if value is None or isinstance(value, int | float | bool):
        return value
    try:
        if pd.isna(value):
            return value
    except (TypeError, ValueError):
        pass
    if isinstance(value, pd.Timestamp):
        return value.strftime(CSV_DATE_FORMAT)
    return str(value)


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a frame as CSV: the one CSV writer of the toolkit.

    UTF-8, one header row, times as ISO 8601 (``CSV_DATE_FORMAT``), every text cell neutralised
    (:func:`neutralise_cell`) and quoted, numbers unquoted. Quoting every text cell keeps CR, LF
    and every other line break inside its cell for any reader, including spreadsheets and
    ``csv.reader(open(path, newline=""))``. Written to a temporary file and renamed into place.
    """
    with atomic_output(path, newline="") as f:
        write_csv_rows(df, f, header=True)


def write_csv_rows(df: pd.DataFrame, f: IO[str], *, header: bool) -> None:
    """Write a frame's rows as :func:`write_csv` does, into the open text file ``f`` (opened
    with ``newline=""``): a table written part by part, the header with the first part only.

    Frames of plain columns (text, numbers, booleans, times) are written by Arrow, a block of
    rows at a time (:func:`_arrow_csv`): the bytes pandas' writer gives, in a fifth of the
    time. Any other frame goes through pandas' writer."""
    frame = neutralise_frame(df)
    blocks = _arrow_csv(frame, header=header)
    if blocks is not None:
        _write_blocks(f, blocks)
        return
    frame = _times_as_text(frame)
    frame.to_csv(
        f,
        index=False,
        header=header,
        date_format=CSV_DATE_FORMAT,
        quoting=csv.QUOTE_NONNUMERIC,
        lineterminator="\n",
    )


#: Rows of a frame turned into CSV text at once by :func:`_arrow_csv`.
_CSV_BLOCK_ROWS = 65_536


def _arrow_csv(frame: pd.DataFrame, *, header: bool) -> Iterator[bytes | memoryview] | None:
    """The CSV of ``frame`` as blocks of UTF-8 bytes, exactly as ``to_csv`` in
    :func:`write_csv_rows` writes it (``QUOTE_NONNUMERIC``: text quoted with its quotes doubled,
    a missing value ``""``, numbers bare, floats as Python's ``repr``, booleans ``True`` and
    ``False``, times as in :func:`_times_as_text`); None when a column is of another kind
    (object, Python-backed text, categorical, durations, floats narrower than 64 bits, nullable
    numbers other than ``Int64``, ``Float64`` and ``boolean``) or a label is not text."""
    cells: list[Callable[[slice], pa.Array]] = []
    for name, s in frame.items():
        cell = _cell_maker(s)
        if cell is None or not isinstance(name, str):
            return None
        cells.append(cell)
    if not cells:
        return None

    def blocks() -> Iterator[bytes | memoryview]:
        if header:
            yield (",".join(_quoted(str(n)) for n in frame.columns) + "\n").encode("utf-8")
        for start in range(0, len(frame), _CSV_BLOCK_ROWS):
            rows = slice(start, start + _CSV_BLOCK_ROWS)
            line = pc.binary_join_element_wise(*(cell(rows) for cell in cells), _large(","))
            yield _string_bytes(pc.binary_join_element_wise(line, _large(""), _large("\n")))

    return blocks()


def _large(value: str | None) -> pa.Scalar:
    """A large-string scalar (Arrow's string kernels want their arguments of one type)."""
    return pa.scalar(value, pa.large_string())


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _cell_maker(s: pd.Series) -> Callable[[slice], pa.Array] | None:
    """A function of a row slice giving the column's CSV cells (an Arrow string array), or None
    for a column kind :func:`_arrow_csv` leaves to pandas."""
    dtype = s.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return lambda rows: _time_cells(_wall_us(s.iloc[rows]))
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":  # (no lone surrogate)
        return lambda rows: _text_cells(pa.array(s.iloc[rows], type=pa.large_string()))
    kind = getattr(dtype, "kind", "")
    if not isinstance(dtype, np.dtype | pd.BooleanDtype | pd.Int64Dtype | pd.Float64Dtype):
        return None  # other nullable widths, categories, objects: pandas' writer
    if kind not in "biuf":
        return None
    missing = s.isna().to_numpy() if not isinstance(dtype, np.dtype) else None
    if kind == "f":  # NaN is missing, as isna() says
        if dtype not in (np.float64, pd.Float64Dtype()):  # numpy's own repr (float32: 1e+06)
            return None
        values = s.to_numpy(dtype="float64", na_value=np.nan)
        return lambda rows: pa.array(
            [repr(v) if v == v else '""' for v in values[rows].tolist()], type=pa.large_string()
        )
    # The masked kinds left (boolean, Int64) as numpy holds them, a missing value as 0.
    numpy_dtype = (
        dtype if isinstance(dtype, np.dtype) else np.dtype(bool if kind == "b" else "int64")
    )
    values = s.to_numpy(dtype=numpy_dtype, na_value=0)

    def cells(rows: slice) -> pa.Array:
        if kind == "b":
            return pc.if_else(pa.array(values[rows]), _large("True"), _large("False"))
        return pc.cast(pa.array(values[rows]), pa.large_string())

    if missing is None:
        return cells
    return lambda rows: pc.if_else(pa.array(missing[rows]), _large('""'), cells(rows))


def _text_cells(text: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Text quoted, its quotes doubled; a missing value an empty quoted cell."""
    if isinstance(text, pa.ChunkedArray):  # a column read or concatenated in parts
        text = text.combine_chunks()
    doubled = pc.replace_substring(pc.fill_null(text, _large("")), '"', '""')
    return pc.binary_join_element_wise(_large('"'), doubled, _large('"'), _large(""))


def _time_cells(us: np.ndarray) -> pa.Array:
    """``datetime64[us]`` times as :func:`_times_as_text` writes them, quoted
    (``"2026-10-01T00:00:00.000000Z"``), a missing time ``""``; the digits are computed at once
    (Arrow's ``strftime`` takes ten times longer)."""
    n = len(us)
    nat = np.isnat(us)
    ticks = np.where(nat, 0, us.view(np.int64))
    days = np.floor_divide(ticks, 86_400_000_000)
    day_us = ticks - days * 86_400_000_000
    date = days.astype("datetime64[D]")
    month_start = date.astype("datetime64[M]")
    year = date.astype("datetime64[Y]").astype(np.int64) + 1970
    if n and (year.min() < 0 or year.max() > 9999):  # numpy's own spelling (+10000, -0001)
        text = np.char.add(np.datetime_as_string(us, unit="us"), 'Z"')
        text = pa.array(np.char.add('"', text), type=pa.large_string())
        return pc.if_else(pa.array(nat), _large('""'), text)
    fields = (
        (year, 4),
        (month_start.astype(np.int64) % 12 + 1, 2),
        ((date - month_start).astype(np.int64) + 1, 2),
        (day_us // 3_600_000_000, 2),
        (day_us // 60_000_000 % 60, 2),
        (day_us // 1_000_000 % 60, 2),
        (day_us % 1_000_000, 6),
    )
    out = np.frombuffer(bytearray(b'"0000-00-00T00:00:00.000000Z"' * n), np.uint8).reshape(n, 29)
    col = 1
    for value, width in fields:
        for k in range(width):
            out[:, col + k] += (value // 10 ** (width - 1 - k) % 10).astype(np.uint8)
        col += width + 1
    offsets = np.arange(0, 29 * n + 1, 29, dtype=np.int64)
    text = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out))
    return pc.if_else(pa.array(nat), _large('""'), text) if nat.any() else text


def _string_bytes(lines: pa.Array) -> memoryview:
    """The characters of a string array, end to end (no copy)."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    first, last = offsets[lines.offset], offsets[lines.offset + len(lines)]
    return memoryview(lines.buffers()[2])[first:last]


def _write_blocks(f: IO[str], blocks: Iterable[bytes | memoryview]) -> None:
    """Write byte blocks into the text file ``f`` (through its binary buffer when it has one)."""
    raw = getattr(f, "buffer", None)
    if raw is not None:
        f.flush()
    for block in blocks:
        if raw is not None:
            raw.write(block)
        else:
            f.write(bytes(block).decode("utf-8"))


def _wall_us(s: pd.Series) -> np.ndarray:
    """A time column's wall time in its own zone, as ``datetime64[us]`` (truncated)."""
    wall = s.dt.tz_localize(None) if isinstance(s.dtype, pd.DatetimeTZDtype) else s
    return wall.to_numpy(dtype="datetime64[ns]").astype("datetime64[us]")


def _times_as_text(df: pd.DataFrame) -> pd.DataFrame:
    """Datetime columns as ``CSV_DATE_FORMAT`` text, as ``to_csv(date_format=...)`` writes them
    (the wall time in the column's own zone, microseconds truncated, NaT empty), formatted by
    numpy at once instead of one value at a time."""
    for col in df.columns:
        s = df[col]
        if not pd.api.types.is_datetime64_any_dtype(s):
            continue
        us = _wall_us(s)
        text = np.char.add(np.datetime_as_string(us, unit="us"), "Z").astype(object)
        text[np.isnat(us)] = None
        df[col] = pd.Series(text, index=s.index, dtype="str")
    return df


def defang(url: object) -> object:
    """Defang a URL or domain for display: ``https://evil.example`` -> ``hxxps://evil[.]example``.

    Every dot, in any of the forms a browser reads as one (:data:`DOTS`), becomes ``[.]``;
    ``http``/``https`` become ``hxxp``/``hxxps`` wherever they stand before a colon; the scheme
    at the start (after any whitespace or invisible format character, such as U+200B or U+FEFF)
    and every :data:`LINK_SCHEMES` scheme elsewhere (``javascript:``, ``data:``) get their colon
    bracketed, so that none is a link any more. Other values are returned unchanged.

    >>> defang("https://login.evil.example/a.php?x=1")
    'hxxps://login[.]evil[.]example/a[.]php?x=1'
    >>> defang("javascript:alert(1)"), defang("\u200bHTTP://evil\u3002example")
    ('javascript[:]alert(1)', '\u200bHxxP://evil[.]example')
    """
    if not isinstance(url, str):
        return url
    text = _HTTP.sub(lambda m: f"{m.group(1)}xx{m.group(3)}", url)
    text = _LINK_SCHEME.sub(lambda m: m.group()[:-1] + "[:]", text)
    lead = _invisible_lead(text)
    first = _ANY_SCHEME.match(text, lead)
    if first and not first.group(1).lower().startswith("hxxp"):
        text = f"{text[: first.end() - 1]}[:]{text[first.end() :]}"
    return _DOT.sub("[.]", text)


def _invisible_lead(text: str) -> int:
    """Length of the leading run of whitespace and invisible format characters (category Cf)."""
    for i, c in enumerate(text):
        if not (c.isspace() or unicodedata.category(c) == "Cf"):
            return i
    return len(text)
