"""``DIR/index.html``: every run, grouped by period, from ``templates/html/index.html.j2``.

Months, weeks and date ranges are listed apart, newest period first; in each period the newest
run is marked "latest". A run is *completed*, *failed* (with its cause: the manifest's
``failure``, or the message of a run marked failed after it was killed) or *damaged*.

The files of other run folders are attacker-reachable history (anyone who can write into
``--out``): :func:`read_history_json` reads one only if it is a regular file (not a link, FIFO
or device) under a size limit, with bounded nesting, and :func:`check_manifest` checks its
shape. A run folder that fails either is listed as "damaged (why)" and breaks nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from audit.errors import ParameterError
from audit.findings.catalogue import SEVERITIES
from audit.report.params import parse_period
from audit.report.templating import render

__all__ = [
    "FINDINGS_LIMIT",
    "MANIFEST_LIMIT",
    "MAX_DEPTH",
    "TREND_KINDS",
    "RunEntry",
    "build_index",
    "check_findings",
    "check_manifest",
    "period_kind",
    "read_history_json",
    "scan_runs",
]

#: Size limits of the files read from other run folders (bytes).
MANIFEST_LIMIT = 1 << 20
FINDINGS_LIMIT = 16 << 20
#: The deepest nesting accepted in them (a run's own files nest a few levels deep).
MAX_DEPTH = 64

STATUS_ORDER = ("fail", "error", "pass", "skip", "info", "muted")
#: The trend's kinds of failures against the previous period (``audit.report.trend``): new,
#: resolved (passing now), not judged (now skip, error, muted or absent), persisting.
TREND_KINDS = ("new", "resolved", "not_judged", "persisting")
#: Severities shown for every run (zero counts greyed); ``info`` only when counted.
SEVERITY_ORDER = tuple(s for s in SEVERITIES if s != "info")
_KINDS = {"month": "Months", "week": "Weeks", "range": "Date ranges", "other": "Other folders"}
#: What every finding of a run must hold, as text (the trend matches failures by them).
_FINDING_TEXT = ("finding_uid", "check_id", "status", "resource")
_RUN_TIME = re.compile(r"([0-9]{8}T[0-9]{6}Z)")


def read_history_json(path: Path, limit: int) -> Any:  # JSON: checked by the caller
    """The JSON in ``path``, read only if it is a regular file of at most ``limit`` bytes,
    UTF-8, nested at most :data:`MAX_DEPTH` levels; ValueError saying why not otherwise.

    A link is not followed, and a FIFO or a device is never read (nor waited on): the file is
    checked with ``lstat``, opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked again with
    ``fstat``; at most ``limit + 1`` bytes are read, whatever the file claims.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = Path(d, "m.json"); _ = p.write_text('{"a": [1, 2]}')
    ...     read_history_json(p, 100)
    {'a': [1, 2]}
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = Path(d, "m.json"); _ = p.write_text("[" * 100 + "]" * 100)
    ...     read_history_json(p, 1000)
    Traceback (most recent call last):
    ValueError: nested deeper than 64 levels
    """
    try:
        info = os.lstat(path)
    except OSError as e:
        raise ValueError(f"cannot read it: {e.strerror or type(e).__name__}") from None
    _regular(info, limit)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ValueError(f"cannot read it: {e.strerror or type(e).__name__}") from None
    try:
        _regular(os.fstat(fd), limit)  # replaced between lstat and open
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ValueError(f"cannot read it: {e.strerror or type(e).__name__}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"larger than {_size(limit)}")
    try:
        value = json.loads(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # JSONDecodeError, an integer of too many digits
        raise ValueError(f"not valid JSON ({str(e).splitlines()[0][:80]})") from None
    if _depth_over(value, MAX_DEPTH):
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return value


def _regular(info: os.stat_result, limit: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise ValueError("a link, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    if info.st_size > limit:
        raise ValueError(f"larger than {_size(limit)}")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _depth_over(value: object, limit: int) -> bool:
    """Whether ``value`` nests lists and objects deeper than ``limit`` (no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _text_or_none(m: dict, key: str) -> bool:
    return m.get(key) is None or isinstance(m.get(key), str)


def _counts(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0
        for k, n in value.items()
    )


def check_manifest(m: object) -> dict[str, Any]:
    """``m`` if it has the shape of a run's ``manifest.json`` (the keys the index, the trend
    and the pipeline read), else ValueError naming the first thing wrong.

    >>> check_manifest({"run_id": "r", "period": {"label": "2026-10"}, "exit_status": 0})["run_id"]
    'r'
    >>> check_manifest([1, 2])
    Traceback (most recent call last):
    ValueError: not a JSON object
    """
    if not isinstance(m, dict):
        raise ValueError("not a JSON object")
    if not isinstance(m.get("run_id"), str):
        raise ValueError("no run_id")
    period = m.get("period")
    if not isinstance(period, dict) or not isinstance(period.get("label"), str):
        raise ValueError("no period label")
    if not all(_text_or_none(period, k) for k in ("start", "end")):
        raise ValueError("period start or end is not text")
    status = m.get("exit_status")
    if not isinstance(status, int) or isinstance(status, bool):
        raise ValueError("no exit status")
    for key in ("started", "ended", "message"):
        if not _text_or_none(m, key):
            raise ValueError(f"{key} is not text")
    findings = m.get("findings", {})
    if not isinstance(findings, dict) or not all(_counts(v) for v in findings.values()):
        raise ValueError("findings counts are not counts")
    trend = m.get("trend", {})
    if not isinstance(trend, dict) or not all(
        _text_or_none(trend, k) for k in ("previous_period", "previous_run")
    ):
        raise ValueError("trend is not an object of counts")
    if not _counts({k: v for k, v in trend.items() if k in TREND_KINDS}):
        raise ValueError("trend counts are not counts")
    for key in ("rendering", "failure"):
        part = m.get(key, {})
        if not isinstance(part, dict) or not all(isinstance(v, str) for v in part.values()):
            raise ValueError(f"{key} is not an object of text")
    return m


def check_findings(records: object) -> list[dict]:
    """``records`` if it has the shape of a run's ``findings.json`` (a list of objects whose
    ``finding_uid``, ``check_id``, ``status`` and ``resource`` are text), else ValueError.

    >>> one = {"finding_uid": "u", "check_id": "A", "status": "fail", "resource": "x"}
    >>> check_findings([one])[0]["status"]
    'fail'
    >>> check_findings({"check_id": "A"})
    Traceback (most recent call last):
    ValueError: not a list of findings
    """
    if not isinstance(records, list):
        raise ValueError("not a list of findings")
    for n, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise ValueError(f"item {n + 1} is not an object")
        for key in _FINDING_TEXT:
            if not isinstance(rec.get(key), str):
                raise ValueError(f"item {n + 1} has no text {key}")
    return records


@dataclass(frozen=True)
class RunEntry:
    """One run folder: ``state`` is ``completed``, ``failed`` or ``damaged`` (``manifest`` is
    None, ``problem`` says why); a failed run's ``problem`` is its cause."""

    folder: Path
    manifest: dict | None
    state: str
    problem: str = ""

    @property
    def label(self) -> str:
        """The period's label: the name of the folder the run is in."""
        return self.folder.parent.name

    @property
    def when(self) -> datetime | None:
        """When the run started (the manifest's ``started``, else its run id's time)."""
        started = (self.manifest or {}).get("started")
        if started:
            try:
                t = datetime.fromisoformat(started)
                return t if t.tzinfo else t.replace(tzinfo=UTC)
            except ValueError:
                pass
        found = _RUN_TIME.match(self.folder.name)
        if found is None:
            return None
        try:
            return datetime.strptime(found[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:  # no such date
            return None


def _failure(folder: Path, m: dict[str, Any]) -> str | None:
    """Why the run failed (None when it completed: a rendering that failed leaves the
    findings standing, and the run completed without a report)."""
    failure = m.get("failure") or {}
    done = m["exit_status"] in (0, 1, 2) and not folder.name.endswith(".failed")
    if done and failure.get("stage") in (None, "rendering"):
        return None
    if failure:
        stage, cause = failure.get("stage"), failure.get("cause") or "no cause recorded"
        return f"while {stage}: {cause}" if stage and stage != "unknown" else cause
    return m.get("message") or f"exit status {m['exit_status']}"


def _entry(folder: Path) -> RunEntry:
    if folder.is_symlink():
        return RunEntry(folder, None, "damaged", "the run folder is a link (not followed)")
    try:
        m = check_manifest(read_history_json(folder / "manifest.json", MANIFEST_LIMIT))
    except ValueError as e:
        return RunEntry(folder, None, "damaged", f"manifest.json: {e}")
    cause = _failure(folder, m)
    findings = folder / "findings.json"
    if cause is None and os.path.lexists(findings):  # a failed run may have none
        try:
            check_findings(read_history_json(findings, FINDINGS_LIMIT))
        except ValueError as e:
            return RunEntry(folder, None, "damaged", f"findings.json: {e}")
    return RunEntry(folder, m, "completed" if cause is None else "failed", cause or "")


def _folders(root: Path) -> Iterator[Path]:
    """Every ``root/<period>/<run>`` holding an entry named ``manifest.json`` (of any type)."""
    try:
        periods = sorted(os.scandir(root), key=lambda d: d.name)
    except OSError:
        return
    for period in periods:
        if period.name.startswith(".") or not period.is_dir(follow_symlinks=False):
            continue
        try:
            runs = sorted(os.scandir(period.path), key=lambda d: d.name)
        except OSError:
            continue
        for run in runs:
            if run.name.startswith(".") or not run.is_dir():  # a link is listed as damaged
                continue
            if os.path.lexists(os.path.join(run.path, "manifest.json")):
                yield Path(run.path)


def _newest_first(e: RunEntry) -> tuple[float, str]:
    when = e.when
    return (when.timestamp() if when else float("-inf"), e.folder.name)


def scan_runs(root: Path) -> list[RunEntry]:
    """Every run folder under ``root/<period>/``, newest first (temporary folders skipped)."""
    return sorted((_entry(f) for f in _folders(Path(root))), key=_newest_first, reverse=True)


def period_kind(label: str) -> str:
    """``month``, ``week``, ``range`` or ``other`` (a folder that is no period label).

    >>> [period_kind(x) for x in ("2026-10", "2026-W44", "2026-10-01..2026-10-15", "misc")]
    ['month', 'week', 'range', 'other']
    """
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}", label):
        return "month"
    if re.fullmatch(r"[0-9]{4}-W[0-9]{2}", label):
        return "week"
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\.\.[0-9]{4}-[0-9]{2}-[0-9]{2}", label):
        return "range"
    return "other"


def _span(label: str) -> tuple[float, str]:
    """Sort key (start, label) and the dates a period label covers ("" when it is none)."""
    if period_kind(label) == "other":
        return float("-inf"), ""
    try:
        p = parse_period(label)
    except ParameterError:
        return float("-inf"), ""
    last = p.end - timedelta(days=1)  # the end is exclusive
    return p.start.timestamp(), f"{p.start:%-d %b %Y} to {last:%-d %b %Y}"


def _link(root: Path, path: Path, label: str) -> dict[str, str] | None:
    """A link to ``path`` if it is a regular file (not a link), else None."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    # Quoted: a folder named "javascript:..." cannot make the link a script (":" is "%3A").
    return {"href": quote(path.relative_to(root).as_posix()), "label": label}


_FILES = (
    ("report.html", "report"),
    ("report.pdf", "PDF"),
    ("findings.csv", "findings"),
    ("trend.json", "trend"),
    ("manifest.json", "manifest"),
)


def _row(root: Path, e: RunEntry) -> dict[str, Any]:
    """What the template shows of one run."""
    m = e.manifest or {}
    when = e.when
    row: dict[str, Any] = {
        "run_id": m.get("run_id") or e.folder.name,
        "started": f"{when:%Y-%m-%d %H:%M} UTC" if when else "not recorded",
        "state": e.state,
        "problem": e.problem,
        "latest": False,
        "latest_completed": False,
        "links": [],
        "note": "",
    }
    if e.state == "damaged":
        return row
    findings = m.get("findings") or {}
    status, severity = findings.get("status") or {}, findings.get("severity") or {}
    shown = SEVERITY_ORDER + (("info",) if severity.get("info") else ())
    row["failing"], row["errors"] = status.get("fail", 0), status.get("error", 0)
    row["total"] = sum(status.values())
    row["others"] = ", ".join(
        f"{status[k]} {k}" for k in STATUS_ORDER if k not in ("fail", "error") and status.get(k)
    )
    row["severity"], row["severity_order"] = severity, shown
    trend = m.get("trend") or {}
    row["trend"] = (
        {
            "previous": trend["previous_period"],
            "counts": {k: trend.get(k, 0) for k in TREND_KINDS},
        }
        if trend.get("previous_period")
        else None
    )
    row["links"] = [
        link for name, label in _FILES if (link := _link(root, e.folder / name, label)) is not None
    ]
    if not any(link["label"] == "report" for link in row["links"]):
        rendering = m.get("rendering") or {}
        if rendering.get("status") == "failed":
            row["note"] = rendering.get("message") or "rendering failed"
            if "rendering failed" not in row["note"]:
                row["note"] = f"rendering failed: {row['note']}"
        else:
            row["note"] = f"no report ({e.state})"
    return row


def _groups(root: Path, entries: list[RunEntry]) -> list[dict[str, Any]]:
    """Sections by kind of period, then periods newest first, then runs newest first."""
    by_label: dict[str, list[RunEntry]] = {}
    for e in entries:  # newest first already
        by_label.setdefault(e.label, []).append(e)
    sections = []
    for kind, title in _KINDS.items():
        labels = [label for label in by_label if period_kind(label) == kind]
        labels.sort(key=lambda label: (_span(label)[0], label), reverse=True)
        periods = []
        for label in labels:
            runs = by_label[label]
            rows = [_row(root, e) for e in runs]
            rows[0]["latest"] = True
            done = next((i for i, e in enumerate(runs) if e.state == "completed"), None)
            if done is not None and done > 0:
                rows[done]["latest_completed"] = True
            periods.append({"label": label, "dates": _span(label)[1], "runs": rows})
        if periods:
            sections.append({"kind": kind, "title": title, "periods": periods})
    return sections


def build_index(root: str | os.PathLike) -> Path:
    """Rebuild ``root/index.html`` (written whole: temporary file, then rename)."""
    root = Path(root)
    entries = scan_runs(root)
    page = render(
        "index.html.j2",
        sections=_groups(root, entries),
        runs=len(entries),
        damaged=sum(e.state == "damaged" for e in entries),
        failed=sum(e.state == "failed" for e in entries),
    )
    # A new file (O_EXCL), renamed over index.html: a link planted there is replaced, not followed.
    fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".html", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.chmod(tmp, 0o644)
        os.replace(tmp, root / "index.html")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return root / "index.html"
