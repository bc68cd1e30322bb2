"""Report parameters, checked before anything starts: the period and the ``--params`` file.

A bad period, parameter file or value is a :class:`~audit.errors.ParameterError` (one line)
raised before the lock is taken, before any run folder exists and before any kernel starts.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from importlib import resources
from pathlib import Path

import pandas as pd
import yaml

from audit.errors import ParameterError, ReportError
from audit.findings.catalogue import load_catalogue, resolve_params
from audit.paths import read_regular
from audit.redaction import shown
from audit.spec import DEFAULT_HEADER_PREFIX
from audit.text import NOT_TEXT, holds_lone_surrogate, pairs_joined
from audit.timeutil import FIRST_YEAR as _FIRST_YEAR
from audit.timeutil import LAST_YEAR as _LAST_YEAR
from audit.timeutil import check_years

__all__ = [
    "DEFAULT_NOTEBOOK",
    "PARAMETER_NAMES",
    "Period",
    "ReportParams",
    "check_notebook",
    "check_params",
    "default_notebook",
    "parse_period",
    "read_params",
]

#: The keys a ``--params`` file may hold.
PARAMETER_NAMES = (
    "allow_quiet",
    "as_of",
    "client_id",
    "clock_start",
    "header_prefix",
    "thresholds",
)


@dataclass(frozen=True)
class Period:
    """A reporting period: ``[start, end)`` in UTC, and the label used as a folder name."""

    label: str
    start: pd.Timestamp
    end: pd.Timestamp

    def as_dict(self) -> dict[str, str]:
        """The period as a run's manifest records it (ISO times)."""
        return {"label": self.label, "start": self.start.isoformat(), "end": self.end.isoformat()}


def _day(d: date) -> pd.Timestamp:
    if not _FIRST_YEAR <= d.year <= _LAST_YEAR:
        raise ParameterError(f"{d.isoformat()}: years {_FIRST_YEAR} to {_LAST_YEAR} only")
    return pd.Timestamp(d.isoformat(), tz="UTC")


def _date(y: int, m: int, d: int, text: str) -> date:
    try:
        return date(y, m, d)
    except (ValueError, OverflowError):
        raise ParameterError(f"period {text!r}: not a valid date") from None


# [0-9], not \d: \d also matches other scripts' digits ("２０２６"), which int() accepts.
_MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")
_WEEK = re.compile(r"([0-9]{4})-W([0-9]{2})")
_RANGE = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})\.\.([0-9]{4}-[0-9]{2}-[0-9]{2})")


def parse_period(text: str, *, today: date | None = None) -> Period:
    """Parse ``2026-10``, ``2026-W44``, ``2026-10-01..2026-10-15`` (inclusive dates),
    ``previous-month`` or ``previous-week``. ASCII digits only.

    ``today`` is needed only for the relative forms; the CLI passes the wall-clock date (the
    one place it is read).

    >>> p = parse_period("2026-W44"); (p.start.date().isoformat(), p.end.date().isoformat())
    ('2026-10-26', '2026-11-02')
    >>> parse_period("previous-month", today=date(2026, 1, 15)).label
    '2025-12'
    """
    if not isinstance(text, str):
        raise ParameterError("period must be text")
    text = text.strip(" \t")
    if text in ("previous-month", "previous-week"):
        if today is None:
            raise ParameterError(f"{text} needs today's date")
        if text == "previous-month":
            first = today.replace(day=1)
            prev = (first - timedelta(days=1)).replace(day=1)
            return parse_period(f"{prev:%Y-%m}")
        monday = today - timedelta(days=today.weekday()) - timedelta(days=7)
        year, week, _ = monday.isocalendar()
        return parse_period(f"{year}-W{week:02d}")
    if m := _MONTH.fullmatch(text):
        y, mo = int(m[1]), int(m[2])
        if not 1 <= mo <= 12:
            raise ParameterError(f"period {text!r}: month must be 01 to 12")
        end = _date(y + (mo == 12), mo % 12 + 1, 1, text)
        return Period(text, _day(_date(y, mo, 1, text)), _day(end))
    if m := _WEEK.fullmatch(text):
        try:
            start = date.fromisocalendar(int(m[1]), int(m[2]), 1)
            end = start + timedelta(days=7)
        except (ValueError, OverflowError):
            raise ParameterError(f"period {text!r}: no such ISO week") from None
        return Period(text, _day(start), _day(end))
    if m := _RANGE.fullmatch(text):
        try:
            a, b = date.fromisoformat(m[1]), date.fromisoformat(m[2])
            after = b + timedelta(days=1)
        except (ValueError, OverflowError):
            raise ParameterError(f"period {text!r}: not valid dates") from None
        if b < a:
            raise ParameterError(f"period {text!r}: the end is before the start")
        return Period(text, _day(a), _day(after))
    raise ParameterError(
        f"period {shown(text)}: use YYYY-MM, YYYY-Www, YYYY-MM-DD..YYYY-MM-DD, "
        "previous-month or previous-week (ASCII digits)"
    )


@dataclass(frozen=True)
class ReportParams:
    """Checked report parameters (see :func:`check_params`).

    ``allow_quiet``: a period with no delivery at all exits 0 when nothing failed (by
    default it exits 1, so that a scheduler notices a receiver or a capture that stopped).
    """

    as_of: pd.Timestamp
    client_id: str | None = None
    clock_start: str = "created"
    header_prefix: str = DEFAULT_HEADER_PREFIX
    thresholds: Mapping[str, float] = field(default_factory=dict)
    allow_quiet: bool = False

    def as_dict(self) -> dict[str, object]:
        """JSON-able form, for the manifest."""
        return {
            "as_of": self.as_of.isoformat(),
            "client_id": self.client_id,
            "clock_start": self.clock_start,
            "header_prefix": self.header_prefix,
            "thresholds": dict(self.thresholds),
            "allow_quiet": self.allow_quiet,
        }


def _kind(value: object) -> str:
    return "binary data" if isinstance(value, bytes | bytearray) else type(value).__name__


def _as_of(value: object, period: Period) -> pd.Timestamp:
    if value is None or value == "":
        return period.end
    if isinstance(value, dt.datetime):
        value = value.isoformat()
    if not isinstance(value, str):
        raise ParameterError(f"as_of must be an ISO 8601 time, not {_kind(value)}")
    if re.match(r"\s*([0-9]{4})-", value) is None:
        raise ParameterError(f"as_of {shown(value)} is not an ISO 8601 time (YYYY-MM-DDThh:mmZ)")
    check_years(value, "as_of")  # the rule of every time argument (audit.timeutil.as_utc)
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        raise ParameterError(f"as_of {shown(value)} is not an ISO 8601 time") from None
    if pd.isna(ts):
        raise ParameterError("as_of is missing")
    if ts.tzinfo is None:
        raise ParameterError(f"as_of {shown(value)} has no UTC offset (add Z or +00:00)")
    ts = ts.tz_convert("UTC")
    if ts < period.start:
        raise ParameterError("as_of must not be before the start of the period")
    return ts


def _thresholds(value: object) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParameterError(f"thresholds must map parameter names to numbers, not {_kind(value)}")
    out: dict[str, float] = {}
    for name, v in value.items():
        if not isinstance(name, str):
            raise ParameterError(f"thresholds: a name is {_kind(name)}, not text")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ParameterError(f"thresholds: {shown(name, 60)} must be a number, not {_kind(v)}")
        out[name] = v
    resolve_params(load_catalogue(), out)  # unknown names and out-of-range values
    return out


def check_params(params: Mapping[str, object] | None, period: Period) -> ReportParams:
    """Type-check report parameters; raise one :class:`ParameterError` on the first bad one.

    >>> check_params({"as_of": "2026-10-20T00:00:00Z"}, parse_period("2026-10")).as_of.day
    20
    >>> check_params({"thresholds": {"ttt_median_h": b"x"}}, parse_period("2026-10"))
    Traceback (most recent call last):
    audit.errors.ParameterError: thresholds: 'ttt_median_h' must be a number, not binary data
    """
    params = dict(params or {})
    unknown = sorted(shown(k)[1:-1] for k in params if k not in PARAMETER_NAMES)
    if unknown:
        raise ParameterError(f"unknown report parameter(s): {', '.join(unknown)}")
    client_id = params.get("client_id")
    if client_id is not None and not isinstance(client_id, str):
        raise ParameterError(f"client_id must be text, not {_kind(client_id)}")
    clock_start = params.get("clock_start", "created")
    if clock_start not in ("created", "burn"):
        raise ParameterError("clock_start must be 'created' or 'burn'")
    prefix = params.get("header_prefix", DEFAULT_HEADER_PREFIX)
    if not isinstance(prefix, str) or not prefix:
        raise ParameterError("header_prefix must be non-empty text")
    allow_quiet = params.get("allow_quiet", False)
    if not isinstance(allow_quiet, bool):
        raise ParameterError(f"allow_quiet must be true or false, not {_kind(allow_quiet)}")
    return ReportParams(
        as_of=_as_of(params.get("as_of"), period),
        client_id=client_id,
        clock_start=str(clock_start),
        header_prefix=prefix,
        thresholds=_thresholds(params.get("thresholds")),
        allow_quiet=allow_quiet,
    )


def read_params(path: str | os.PathLike[str] | None) -> dict[str, object]:
    """Read a YAML/JSON ``--params`` file (safe loader); dates become ISO text.

    The values are checked by :func:`check_params`; this only reads the mapping. The file must
    be a regular file of at most 16 MiB (:func:`audit.paths.read_regular`); a key named twice in
    one mapping (YAML and JSON would keep the last) and nesting too deep are errors.
    """
    if path is None:
        return {}
    p = Path(path)
    try:
        text = read_regular(p, what="parameters file", error=ParameterError).decode("utf-8")
        data = yaml.load(text, Loader=_loader(p))  # a SafeLoader subclass
        data = pairs_joined(data)  # YAML leaves an escaped pair as two surrogates; JSON joins them
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ParameterError(f"{p}: cannot read parameters ({type(e).__name__})") from None
    except RecursionError:
        raise ParameterError(f"{p}: parameters nested too deeply") from None
    if data is None:
        return {}
    if holds_lone_surrogate(data):
        raise ParameterError(f"{p}: {NOT_TEXT}")
    if not isinstance(data, dict):
        raise ParameterError(f"{p}: parameters must be a mapping")
    return {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in data.items()}


def _loader(p: Path) -> type[yaml.SafeLoader]:
    """A safe YAML loader that refuses a key named twice in one mapping (naming it)."""

    class Loader(yaml.SafeLoader):
        def construct_mapping(
            self, node: yaml.MappingNode, deep: bool = False
        ) -> dict[Hashable, object]:
            seen: set[tuple[str, object]] = set()
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                if (key.tag, key.value) in seen:
                    raise ParameterError(f"{p}: parameter file names {shown(key.value)} twice")
                seen.add((key.tag, key.value))
            return super().construct_mapping(node, deep=deep)

    return Loader


#: The packaged report notebook's file name (package data, ``audit/report/notebooks/``).
DEFAULT_NOTEBOOK = "compliance_report.ipynb"


def default_notebook() -> Path:
    """The packaged report notebook (package data, found with importlib.resources)."""
    ref = resources.files("audit.report").joinpath("notebooks", DEFAULT_NOTEBOOK)
    path = Path(str(ref))
    if not path.is_file():  # pragma: no cover - a broken installation
        raise ReportError(f"the packaged notebook {DEFAULT_NOTEBOOK} is missing: reinstall audit")
    return path


def check_notebook(notebook: str | os.PathLike[str] | None) -> Path:
    """The report notebook: the packaged one (None), or ``notebook``, checked to be a
    notebook file (:class:`ParameterError` otherwise), before any work."""
    if notebook is None:
        return default_notebook()
    path = Path(notebook).expanduser()
    if not path.is_file():
        raise ParameterError(f"--notebook: {path} is not a file")
    try:  # a template that is not a notebook is a bad parameter, found before any work
        import nbformat  # start-up: nbformat (jsonschema) only for a notebook of the user's

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat's notices about old templates
            nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    except Exception as e:
        raise ParameterError(f"--notebook: {path} is not a notebook ({type(e).__name__})") from None
    return path.resolve()
