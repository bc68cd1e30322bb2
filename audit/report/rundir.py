"""The run folder: what the pipeline writes and the only thing the report notebook reads.

Layout of ``DIR/<period>/<run id>/``::

    findings.json, findings.csv   the findings (exit code decided from them, in memory)
    trend.json                    new, resolved, persisting failures against the previous period
    manifest.json                 run id, period, as_of, parameters, inputs with sha256, counts,
                                  versions, notebook and its sha256, rendering status
    tables/<name>.parquet         every table; <name>.csv as well for the small ones
    report.ipynb, report.html     the rendered notebook (absent when rendering failed)

:func:`open_run` reads a run folder back as a :class:`RunData` for the views.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pandas as pd
import pyarrow.parquet as pq

from audit.errors import OutputError, ParameterError, ReportError
from audit.locks import unlock_file
from audit.report.drawing import FOLDER, tables_pending, tables_written
from audit.report.params import Period, ReportParams
from audit.report.trend import trend_for
from audit.safe import write_csv
from audit.tables import CSV_TABLES, longest_first

if TYPE_CHECKING:  # annotations only: the run folder is written from what compute returns
    from audit.report.compute import Computed

__all__ = [
    "CSV_TABLES",
    "FIGURE_ONLY_TABLES",
    "LateWrites",
    "RunData",
    "finding_counts",
    "findings_records",
    "open_run",
    "versions",
    "write_json",
    "write_run",
    "write_tables",
]


def write_json(path: Path, data: object) -> None:
    """Sorted, indented JSON, written to a temporary file and renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", "utf-8")
    os.replace(tmp, path)


def findings_records(findings: pd.DataFrame) -> list[dict[str, Any]]:
    """Findings as JSON records; ``evidence`` as an object, times ISO 8601."""
    records = json.loads(findings.to_json(orient="records", date_format="iso"))
    for rec in records:
        if isinstance(rec.get("evidence"), str):
            with contextlib.suppress(json.JSONDecodeError):
                rec["evidence"] = json.loads(rec["evidence"])
    return records


def write_tables(
    tables: Mapping[str, pd.DataFrame], folder: Path, *, csv: bool = True, make: bool = True
) -> list[Path]:
    """Parquet for every table, CSV (through the one CSV writer) for :data:`CSV_TABLES`
    (unless ``csv`` is false: then :class:`LateWrites` writes them); ``make``: the folder is
    made first if need be (else one that is gone is an error)."""
    if make:
        folder.mkdir(parents=True, exist_ok=True)

    def one(name: str, frame: pd.DataFrame) -> list[Path]:
        path = folder / f"{name}.parquet"
        try:
            frame.to_parquet(path, index=False)
        except OSError as e:  # Arrow's error names no file (a full disk: "[errno 28]")
            why = e.strerror or str(e).splitlines()[0]
            raise OutputError(f"{path}: cannot write ({why})") from None
        if name not in CSV_TABLES or not csv:
            return [path]
        write_csv(frame, folder / f"{name}.csv")
        return [path, folder / f"{name}.csv"]

    # Two at a time, as ``Analysis.write`` does: Parquet encoding releases the GIL; the
    # costliest first, so that the two threads end together.
    sizes = {name: (frame.size, csv and name in CSV_TABLES) for name, frame in tables.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = {name: pool.submit(one, name, tables[name]) for name in longest_first(sizes)}
        return [path for name in tables for path in done[name].result()]


#: The run-folder tables the packaged notebook reads only through its figures: when they are
#: drawn aside (:func:`audit.report.ahead.drawing_aside`), these are written while it runs
#: (:class:`LateWrites`), and a :class:`RunData` that reads one waits for them.
FIGURE_ONLY_TABLES = ("deliveries", "events")


#: The scheduling priority (nice value) of the late writes: the figures' process, which the
#: kernel waits for, then takes the core first ("Twenty-first pass" of docs/scale.md, in git
#: history).
LATE_NICE = 10


def _behind() -> None:
    """Lower this thread's CPU priority to :data:`LATE_NICE` (Linux: per thread, and the
    threads it starts inherit it); elsewhere, or where it is refused, nothing changes."""
    if sys.platform != "linux":  # elsewhere the id of a thread is not a process id to setpriority
        return
    with contextlib.suppress(AttributeError, OSError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(LATE_NICE, os.getpriority(os.PRIO_PROCESS, tid)))


class LateWrites:
    """What a thread writes into a run's ``folder`` (its ``tables``) while the notebook renders:
    the Parquet files of ``parquet`` (tables only the figures read, drawn aside already:
    :func:`audit.report.ahead.drawing_aside`), and meanwhile, by a second thread, the CSV
    copies of :data:`CSV_TABLES`, the largest first (the notebook reads the Parquet files
    only): at 1M deliveries a month, the incidents of a store with history take 3.6 s as CSV,
    in Python.

    ``held`` (an open file whose lock this process holds: the figures' ``tables.lock``) is
    released once the Parquet files are written (or failed), so that a kernel that must draw a
    figure itself waits for them. :meth:`wait` waits for everything and raises what the writing
    raised (an :class:`~audit.errors.OutputError`), before the run folder is renamed into
    place."""

    def __init__(
        self,
        tables: Mapping[str, pd.DataFrame],
        folder: Path,
        *,
        parquet: Sequence[str] = (),
        held: BinaryIO | None = None,
    ) -> None:
        frames = {name: tables[name] for name in CSV_TABLES if name in tables}
        late = {name: tables[name] for name in parquet if name in tables}
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # The thread holds the frames (its arguments) until it ends, then lets them go.
        self._thread = threading.Thread(
            target=self._write, args=(late, frames, folder, held), name="audit-late", daemon=True
        )
        self._thread.start()

    def _write(
        self,
        late: dict[str, pd.DataFrame],
        frames: dict[str, pd.DataFrame],
        folder: Path,
        held: BinaryIO | None,
    ) -> None:
        _behind()  # this thread and the writers it starts
        # The CSV copies are written beside the Parquet files, by a thread of their own (the
        # Parquet encoding releases the GIL): at the end of a rendering both cores are free.
        csvs = threading.Thread(
            target=self._write_csvs, args=(frames, folder), name="audit-late-csv", daemon=True
        )
        del frames
        csvs.start()
        try:
            if late and not self._stop.is_set():  # the folder is never made again here
                write_tables(late, folder, csv=False, make=False)
        except BaseException as e:  # raised again by wait(), in the caller's thread
            self._failed(e)
        finally:
            late.clear()
            if held is not None:
                with contextlib.suppress(OSError):
                    unlock_file(held)
                held.close()
            csvs.join()

    def _write_csvs(self, frames: dict[str, pd.DataFrame], folder: Path) -> None:
        try:
            for name in longest_first({n: (f.size, True) for n, f in frames.items()}):
                if self._stop.is_set() or self._error is not None:
                    return
                write_csv(frames[name], folder / f"{name}.csv")
        except BaseException as e:
            self._failed(e)

    def _failed(self, error: BaseException) -> None:
        """Keep the first error (the other writer then stops at its next file)."""
        with self._lock:
            if self._error is None:
                self._error = error

    def cancel(self) -> None:
        """Write no further file, and wait for the one being written (the run failed: nothing
        may be written into its folder once its run lock is released)."""
        self._stop.set()
        self._thread.join()

    def wait(self) -> None:
        """Wait for every file; raise the error that stopped their writing, if any."""
        self._thread.join()
        if self._error is not None:
            raise self._error


@dataclass
class RunData:
    """A run folder read back (or built in memory for an analyst notebook).

    ``tables`` are read from Parquet on first use; a missing table is an empty frame.
    """

    manifest: dict[str, Any]
    findings: pd.DataFrame
    trend: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    #: Frames computed from the tables and kept for the next figure (see audit.report.figures).
    derived: dict[object, object] = field(default_factory=dict, repr=False, compare=False)

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The table ``name`` (``tables/<name>.parquet``), or an empty frame.

        With ``columns``, only those of them the table has: read from the file alone (a
        figure that draws three columns of a million rows does not read twenty), or taken
        from the whole table when it is already in memory. Each answer is kept, so asking
        again gives the same frame object (until the whole table is replaced).
        """
        if columns is None:
            if name not in self.tables:
                self.tables[name] = self._read(name, None)
            return self.tables[name]
        if isinstance(columns, str):  # one column named, not its letters
            columns = [columns]
        key = ("columns", name, tuple(columns))
        whole = self.tables.get(name)
        kept = self.derived.get(key)
        if not isinstance(kept, tuple) or kept[0] is not whole:  # new, or the table replaced
            if whole is not None:
                cut = whole[[c for c in columns if c in whole.columns]]
            else:
                cut = self._read(name, columns)
            kept = self.derived[key] = (whole, cut)
        return kept[1]

    def _read(self, name: str, columns: Sequence[str] | None) -> pd.DataFrame:
        if self.run_dir is None:
            return pd.DataFrame()
        path = self.run_dir / "tables" / f"{name}.parquet"
        if name in FIGURE_ONLY_TABLES:  # maybe still being written
            tables_written(self.run_dir / FOLDER)
        if not path.is_file():
            return pd.DataFrame()
        if columns is not None:
            present = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in present]
        return pd.read_parquet(path, columns=columns)


def _read_json(path: Path, default: object) -> Any:  # JSON: whatever the file holds
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: unreadable ({type(e).__name__})") from None


def open_run(run_dir: str | os.PathLike[str] | None) -> RunData:
    """Read a run folder written by ``audit report`` (the notebook's one data parameter).

    Raises
    ------
    ParameterError
        ``run_dir`` is not given or holds no ``manifest.json``.
    """
    if run_dir is None:
        raise ParameterError("run_dir: give a run folder written by `audit report`")
    folder = Path(run_dir)
    if not (folder / "manifest.json").is_file():
        raise ParameterError(f"run_dir: {folder} holds no manifest.json")
    manifest = _read_json(folder / "manifest.json", {})
    records = _read_json(folder / "findings.json", [])
    findings = pd.DataFrame(records)
    if "evidence" in findings.columns:
        findings["evidence"] = findings["evidence"].map(
            lambda e: json.dumps(e, sort_keys=True) if isinstance(e, dict | list) else e
        )
    trend = _read_json(folder / "trend.json", {})
    return RunData(manifest, findings, trend, folder)


def versions() -> dict[str, str]:
    """The toolkit's and its main libraries' versions, and Python's."""
    out = {"python": platform.python_version()}
    for name in ("audit", "pandas", "numpy", "pyarrow", "matplotlib", "papermill", "nbconvert"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover
            out[name] = "unknown"
    return out


def finding_counts(findings: pd.DataFrame) -> dict[str, dict[str, int]]:
    """How many findings have each status, and each severity among the failing or erring."""
    out: dict[str, dict[str, int]] = {"status": {}, "severity": {}}
    for rec in findings[["status", "severity"]].to_dict("records") if len(findings) else []:
        out["status"][rec["status"]] = out["status"].get(rec["status"], 0) + 1
        if rec["status"] in ("fail", "error"):
            out["severity"][rec["severity"]] = out["severity"].get(rec["severity"], 0) + 1
    return out


def write_run(
    tmp: Path,
    period: Period,
    checked: ReportParams,
    computed: Computed,
    code: int,
    nb_path: Path,
    started: datetime,
    figures: Path | None = None,
) -> tuple[dict[str, Any], LateWrites]:
    """Write a run folder (under the run lock) into ``tmp`` (``<period>/.tmp-<run id>``):
    findings, trend, tables and manifest; return (the manifest, what is still being written:
    the CSV copies, and with ``figures`` (the figures' folder, where they are drawn aside) the
    tables only the figures read, :data:`FIGURE_ONLY_TABLES`). Nothing can fail here once that
    writing has started: the caller stops it (:meth:`LateWrites.cancel`) if it fails later."""
    root, run_id = tmp.parents[1], tmp.name.removeprefix(".tmp-")
    write_csv(computed.findings, tmp / "findings.csv")
    write_json(tmp / "findings.json", findings_records(computed.findings))
    trend = trend_for(root, period, computed.findings)
    write_json(tmp / "trend.json", trend)
    late: Sequence[str] = FIGURE_ONLY_TABLES if figures is not None else ()
    write_tables(
        {n: t for n, t in computed.tables.items() if n not in late}, tmp / "tables", csv=False
    )
    manifest = {
        "run_id": run_id,
        "title": "Webhook delivery compliance report",
        "period": period.as_dict(),
        "as_of": checked.as_of.isoformat(),
        "client_id": checked.client_id,
        "parameters": checked.as_dict(),
        "versions": versions(),
        "inputs": json.loads(computed.tables["inputs"].to_json(orient="records")),
        "notebook": {"path": str(nb_path), "sha256": _sha256(nb_path)},
        "started": started.isoformat(),
        "findings": finding_counts(computed.findings),
        "trend": {
            "previous_period": (trend["previous"] or {}).get("period"),
            "previous_run": (trend["previous"] or {}).get("run_id"),
            **{k: len(trend[k]) for k in ("new", "resolved", "persisting")},
        },
        "notes": computed.notes,
        "exit_status": code,
        "rendering": {"status": "pending"},
        "python": platform.python_version(),
    }
    write_json(tmp / "manifest.json", manifest)
    held = None
    if figures is not None:  # ``late`` holds the tables only the figures read
        try:
            held = tables_pending(figures)
        except OSError:  # something planted at the lock: those tables are written now
            write_tables(
                {n: computed.tables[n] for n in late if n in computed.tables},
                tmp / "tables",
                csv=False,
            )
            late = ()
    return manifest, LateWrites(computed.tables, tmp / "tables", parquet=late, held=held)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
