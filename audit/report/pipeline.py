"""The report pipeline, one way: check -> load -> analyse -> findings -> run folder -> render
-> index, each step a function, one after the other in this process.

1. :func:`~audit.report.params.check_params` and
   :func:`~audit.report.params.check_notebook`: nothing is written for a bad one.
2. :func:`~audit.report.inputs.load_inputs` reads the files once (input paths a folder walk
   skipped are kept for the manifest).
3. :func:`~audit.report.compute.compute` runs the analyses, the report tables and the controls
   (pure); :func:`exit_code` decides the exit code from the findings in memory.
4. Under a lock on ``DIR/.lock``, :func:`~audit.report.rundir.write_run` writes the run folder
   to ``<period>/.tmp-<run id>``: findings, trend, every table (Parquet and CSV), manifest.
   The frames are then let go.
5. :func:`~audit.report.render.render` runs the notebook in the run folder (it reads the
   folder only) and makes the HTML. If that fails, the findings and the exit code stand and
   the manifest says "rendering failed". With ``pdf``, ``report.pdf`` is printed from the
   HTML (:mod:`audit.report.pdf`); a missing Chromium or a failed print is recorded, never
   fatal.
6. The folder is renamed into place and :func:`~audit.report.index.build_index` rebuilds the
   index.

A run that fails after the folder was started (a full disk, an error writing, Ctrl-C) records
``failure`` (stage and cause) in its manifest and becomes ``<run id>.failed``; a folder left
by a killed run becomes one at the next run (:func:`mark_stale`, ``docs/report.md``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import stat
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from audit.errors import AuditError, ParameterError, ReportError
from audit.findings import SEVERITIES
from audit.locks import try_lock_file, unlock_file
from audit.memory import release_free_memory
from audit.paths import PathWarning, read_regular
from audit.report.compute import Computed, compute
from audit.report.index import build_index, scan_runs
from audit.report.inputs import Inputs, load_inputs
from audit.report.params import Period, check_notebook, check_params
from audit.report.pdf import find_chromium, print_pdf
from audit.report.render import render
from audit.report.rundir import versions, write_json, write_run

__all__ = [
    "EXIT_CONTROL_ERROR",
    "EXIT_FAILING",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "Computed",
    "ReportResult",
    "compute",
    "exit_code",
    "failure_cause",
    "lock",
    "mark_stale",
    "run_report",
    "versions",
]

EXIT_OK, EXIT_FAILING, EXIT_CONTROL_ERROR, EXIT_RUNTIME = 0, 1, 2, 3
SEVERITY_ORDER = tuple(reversed(SEVERITIES))  # least severe first
Progress = Callable[[str], None]


@contextlib.contextmanager
def lock(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out_dir/.lock``.

    The lock file is opened without following a symlink and never truncated (a symlink
    planted there cannot make us empty another file).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ".lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ReportError(
                f"{path}: is a symlink; remove it (the lock is never followed)"
            ) from None
        raise ReportError(f"{path}: cannot open the lock file ({e.strerror})") from None
    with os.fdopen(fd, "r+b") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReportError(f"{path}: is not a regular file")
        # audit.locks' own: a forked worker closes its copy
        if not try_lock_file(f):
            raise ReportError(f"{out_dir}: another report run holds the lock")
        try:
            yield
        finally:
            unlock_file(f)


#: What a folder left by a killed run says when it recorded no cause.
NO_CAUSE = "interrupted (no cause recorded)"

#: The most bytes of a stale folder's manifest read for its recorded failure.
_MANIFEST_LIMIT = 1 << 20


def mark_stale(root: Path, by_run: str) -> list[Path]:
    """Rename ``<period>/.tmp-<id>`` folders of killed runs to ``<id>.failed`` (under the lock,
    no other run can be writing them) with a manifest saying so; return the new paths.

    A ``failure`` the run recorded in its manifest before it died is kept; else the failure
    is ``interrupted (no cause recorded)``.
    """
    moved = []
    for tmp in sorted(root.glob("*/.tmp-*")):
        if not tmp.is_dir() or tmp.is_symlink():
            continue
        run_id = tmp.name.removeprefix(".tmp-")
        final = tmp.with_name(f"{run_id}.failed")
        if final.exists():
            final = tmp.with_name(f"{run_id}-{secrets.token_hex(2)}.failed")
        failure = _recorded_failure(tmp / "manifest.json") or {
            "stage": "unknown",
            "cause": NO_CAUSE,
        }
        manifest = {
            "run_id": run_id,
            "period": {"label": tmp.parent.name},
            "exit_status": EXIT_RUNTIME,
            "started": "",
            "failure": failure,
            "message": f"failed ({failure['cause']}); marked failed by run {by_run}",
        }
        try:
            write_json(tmp / "manifest.json", manifest)
            os.replace(tmp, final)
        except OSError as e:  # a folder this run cannot mark (planted, read-only): left as is
            warnings.warn(
                f"{tmp}: left as it is, not marked failed ({e.strerror or type(e).__name__})",
                PathWarning,
                stacklevel=2,
            )
            continue
        moved.append(final)
    return moved


def _recorded_failure(path: Path) -> dict[str, str] | None:
    """The ``failure`` a killed run's manifest recorded, or None (no manifest, or one that is
    not a small regular file of JSON with a failure of two strings)."""
    try:
        manifest = json.loads(read_regular(path, limit=_MANIFEST_LIMIT, what="manifest"))
        got = manifest["failure"]
        failure = {"stage": str(got["stage"])[:200], "cause": str(got["cause"])[:400]}
    except (AuditError, OSError, ValueError, RecursionError, TypeError, KeyError):
        return None
    return failure if failure["cause"] else None


def failure_cause(error: BaseException) -> str:
    """One line saying why a run failed, for its manifest's ``failure``.

    >>> failure_cause(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    'No space left on device'
    >>> failure_cause(KeyboardInterrupt())
    'interrupted (KeyboardInterrupt)'
    """
    if isinstance(error, KeyboardInterrupt | SystemExit):
        return f"interrupted ({type(error).__name__})"
    if isinstance(error, OSError) and not isinstance(error, AuditError) and error.strerror:
        where = f" ({error.filename})" if error.filename else ""
        return f"{error.strerror}{where}"
    first = (str(error).splitlines() or [""])[0].strip()
    return (first or type(error).__name__)[:400]


def exit_code(findings: pd.DataFrame, fail_on: str) -> int:
    """2 if a control errored, 1 if a finding at or above ``fail_on`` fails, else 0."""
    if findings.empty:
        return EXIT_OK
    if (findings["status"] == "error").any():
        return EXIT_CONTROL_ERROR
    floor = SEVERITY_ORDER.index(fail_on)
    rank = findings["severity"].map(lambda s: SEVERITY_ORDER.index(s) if s in SEVERITY_ORDER else 0)
    return EXIT_FAILING if ((findings["status"] == "fail") & (rank >= floor)).any() else EXIT_OK


@dataclass(frozen=True)
class ReportResult:
    """Where a run wrote, and how it ended; ``quiet``: one line when the period received no
    delivery at all (it exits 1 unless quiet periods are allowed or something else decides),
    else empty."""

    exit_code: int
    run_dir: Path | None
    html: Path | None
    index: Path
    manifest: dict[str, Any]
    message: str = ""
    skipped: bool = False
    rendering_failed: bool = False
    pdf: Path | None = None
    quiet: str = ""
    #: One line when most requests failed verification (the secrets file named as the likely
    #: cause), else empty; a period with deliveries but none valid then exits 1 too.
    doubt: str = ""


def _completed(root: Path, period: Period) -> Path | None:
    for e in scan_runs(root) if root.is_dir() else []:
        rendered = (e.manifest or {}).get("rendering", {}).get("status") == "ok"
        if e.state == "completed" and rendered and e.folder.parent.name == period.label:
            return e.folder
    return None


def _history(inputs: Inputs, period: Period) -> str:
    """What was read from before the period (memory grows with it), for the progress line.

    From raw captures, every record before the period is read for the incidents' history; from
    a store, the deliveries of the day before (the retries: the incidents' history is read
    apart, one first receipt per event, often in another process)."""
    d = _deliveries(inputs)
    before = int((d["received_at"] < period.start).sum()) if len(d) else 0
    raw = inputs.takedown is None and inputs.first_receipts is None
    why = "the incidents' history" if raw else "the retries"
    return f"; {before} received before the period, for {why}" if before else ""


def _deliveries(inputs: Inputs) -> pd.DataFrame:
    """The deliveries of inputs just loaded (not handed over yet)."""
    if inputs.deliveries is None:  # pragma: no cover - compute hands them over, after this
        raise ReportError("the deliveries were handed over already")
    return inputs.deliveries


def run_report(
    logs: Sequence[str | os.PathLike[str]],
    *,
    secrets_path: str | os.PathLike[str],
    period: Period,
    out_dir: str | os.PathLike[str] = "reports",
    snapshots: Sequence[str | os.PathLike[str]] = (),
    params: Mapping[str, object] | None = None,
    mutes_path: str | os.PathLike[str] | None = None,
    fail_on: str = "low",
    skip_if_exists: bool = False,
    notebook: str | os.PathLike[str] | None = None,
    timeout_s: int = 900,
    progress: Progress | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    store: str | os.PathLike[str] | None = None,
    notice: Progress | None = None,
    pdf: bool = False,
    allow_quiet: bool = False,
) -> ReportResult:
    """Compute the findings of a period, write the run folder, render the report, index it.

    ``params`` may hold ``as_of``, ``client_id``, ``clock_start``, ``header_prefix`` and
    ``thresholds``; secrets travel only as the file's path. ``notebook`` defaults to the
    packaged report; any notebook with a ``run_dir`` parameter works (``docs/report.md``).
    ``progress`` receives one line per long stage. With ``store`` (an evidence store folder),
    ``logs`` (may be empty) are ingested into it, its records verified again where the secrets
    changed, and the period is read from the store; ``notice`` (default ``progress``) receives
    what that did to the store (:attr:`~audit.report.inputs.Inputs.notes`). With ``pdf``, the
    rendered report is also printed to ``report.pdf`` through a headless Chromium
    (:mod:`audit.report.pdf`); the manifest's ``pdf`` says whether it was, and why not (that
    never changes the exit code).

    Returns a :class:`ReportResult` whose ``exit_code`` is 0 (no failing finding at or above
    ``fail_on``), 1 (failing findings, or a period with no delivery at all: ``quiet``, unless
    ``allow_quiet`` or the parameter ``allow_quiet``), 2 (a control errored). Bad input raises an
    :class:`~audit.errors.AuditError` before anything is written.
    """
    say = progress or (lambda _line: None)
    if fail_on not in SEVERITY_ORDER:
        raise ParameterError(f"fail_on must be one of {', '.join(SEVERITY_ORDER)}")
    checked = check_params(params, period)
    nb_path = check_notebook(notebook)
    root = Path(out_dir).expanduser().resolve()
    if skip_if_exists and (done := _completed(root, period)) is not None:
        return ReportResult(
            EXIT_OK,
            done,
            done / "report.html" if (done / "report.html").is_file() else None,
            root / "index.html",
            json.loads((done / "manifest.json").read_text("utf-8")),
            message=f"a report for {period.label} exists: {done}",
            skipped=True,
        )
    started, t0 = clock(), time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PathWarning)
        inputs = load_inputs(
            list(logs),
            secrets_path=secrets_path,
            snapshots=list(snapshots),
            mutes_path=mutes_path,
            header_prefix=checked.header_prefix,
            client_id=checked.client_id,
            store=store,
            start=period.start,
            end=period.end,
            as_of=checked.as_of,
            clock_start=checked.clock_start,
        )
    skipped = _reissued(caught)
    for note in inputs.notes:
        (notice or say)(note)
    d = _deliveries(inputs)
    say(
        f"loaded {len(d)} records from {int((inputs.files['kind'] == 'capture log').sum())} "
        f"files ({int((d['verdict'] == 'valid').sum())} valid, "
        f"{int((d['verdict'] == 'unreadable').sum())} unreadable{_history(inputs, period)})"
    )
    del d  # compute takes the frame over, to free it
    computed = compute(inputs, checked, period)
    del inputs
    code = exit_code(computed.findings, fail_on)
    quiet = ""
    if computed.coverage.get("deliveries") == 0:
        quiet = f"no delivery received in {period.label}"
        if allow_quiet or checked.allow_quiet:
            quiet += " (quiet period allowed)"
        elif code == EXIT_OK:
            code = EXIT_FAILING  # no evidence is no pass: a scheduler must notice it
            quiet += ": exit 1 (--allow-quiet, or allow_quiet: true in --params, accepts it)"
    # The secrets file as the likely cause is said on stderr too (a scheduler reads no page),
    # and a period whose requests none verified judged nothing: no evidence, no pass.
    verification = computed.coverage.get("verification") or {}
    doubt = str(verification.get("sentence") or "")
    if doubt and computed.coverage.get("deliveries") and not computed.coverage.get("valid"):
        doubt += " No request of the period verified"
        if code == EXIT_OK:
            code = EXIT_FAILING
            doubt += ": exit 1"
        doubt += "."
    failing = int((computed.findings["status"] == "fail").sum())
    say(f"analyses and controls done: {len(computed.findings)} findings, {failing} failing")
    run_id = f"{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    tmp = root / period.label / f".tmp-{run_id}"
    with lock(root):
        mark_stale(root, run_id)
        if tmp.parent.is_symlink():  # the run would land elsewhere, unseen by the index
            raise ReportError(
                f"{tmp.parent}: a symbolic link; a period's folder must be a plain folder of "
                f"{root} (remove the link)"
            )
        run = _Run(root=root, tmp=tmp, t0=t0, clock=clock)
        try:
            tmp.mkdir(parents=True)
            manifest = run.manifest = write_run(
                tmp,
                period,
                checked,
                computed,
                code=code,
                nb_path=nb_path,
                started=started,
                skipped_inputs=skipped,
            )
            # The notebook reads the run folder: the frames go before it runs.
            del computed
            release_free_memory()
            run.stage = "rendering"
            say("rendering the report")
            message = _render(run, nb_path, timeout_s)
            if pdf:
                run.stage = "printing the PDF"
                say("printing the report to PDF")
                manifest["pdf"] = _print(tmp, final_name=run_id)
            run.stage = "finishing the run folder"
            manifest["ended"] = clock().isoformat()
            manifest["duration_s"] = round(time.monotonic() - t0, 3)
            write_json(tmp / "manifest.json", manifest)
            final = tmp.with_name(run_id)
            os.replace(tmp, final)
        except BaseException as e:  # Ctrl-C included: the folder says why it failed
            failed = _fail(run, e)
            if not isinstance(e, Exception):
                raise
            raise ReportError(
                f"the run failed while {run.stage}: {failure_cause(e)}"
                f" (run folder marked failed: {failed})"
            ) from None
        index = build_index(root)
    html, printed = final / "report.html", final / "report.pdf"
    return ReportResult(
        code,
        final,
        html if html.is_file() else None,
        index,
        manifest,
        message,
        False,
        bool(message),
        printed if pdf and printed.is_file() else None,
        quiet,
        doubt,
    )


def _reissued(caught: Sequence[warnings.WarningMessage]) -> list[dict[str, str]]:
    """Issue again the warnings caught while loading (the skipped paths still reach stderr);
    return the skipped input paths of the :class:`~audit.paths.PathWarning` among them as
    ``{"path", "reason"}`` records."""
    skipped: list[dict[str, str]] = []
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if isinstance(w.message, PathWarning):
            for entry in getattr(w.message, "skipped", ()):
                path, _, reason = str(entry).rpartition(" (")
                skipped.append(
                    {"path": path or str(entry), "reason": reason.removesuffix(")") or "skipped"}
                )
    return skipped


@dataclass
class _Run:
    """A run folder being written under the run lock: ``tmp`` (``<period>/.tmp-<run id>``)
    under ``root``; ``t0``: when the run started (``time.monotonic``); ``stage``: what it is
    doing (for a failure); ``manifest``: once written."""

    root: Path
    tmp: Path
    t0: float
    clock: Callable[[], datetime]
    stage: str = "writing the run folder"
    manifest: dict[str, Any] | None = None


def _render(run: _Run, nb_path: Path, timeout_s: int) -> str:
    """Render the notebook into the run folder; the manifest's ``rendering`` says how it went.
    Returns "" or the one-line message of a failed rendering (the findings stand)."""
    manifest = run.manifest if run.manifest is not None else {}
    try:
        render(nb_path, run.tmp, title=_title(manifest), timeout_s=timeout_s)
    except ReportError as e:  # the paths it names are those of the folder renamed into place
        cause = str(e).replace(str(run.tmp), str(run.tmp.with_name(manifest["run_id"])))
        manifest["rendering"] = {"status": "failed", "message": f"rendering failed: {cause}"}
        manifest["failure"] = {"stage": "rendering", "cause": cause}
        return f"rendering failed: {cause}"
    manifest["rendering"] = {"status": "ok"}
    return ""


#: The manifest's ``pdf`` reason when no Chromium is installed.
NO_CHROMIUM = "no Chromium found (chromium, chromium-browser, google-chrome on PATH)"


def _print(folder: Path, *, final_name: str) -> dict[str, str]:
    """Print ``folder/report.html`` to ``folder/report.pdf``: the manifest's ``pdf``
    (``status`` ok, skipped or failed, and a ``reason`` when not ok); paths named in a reason
    are those of the folder once renamed ``final_name``."""
    if not (folder / "report.html").is_file():
        return {"status": "skipped", "reason": "the report was not rendered"}
    if find_chromium() is None:
        return {"status": "skipped", "reason": NO_CHROMIUM}
    try:
        print_pdf(folder / "report.html", folder / "report.pdf")
    except Exception as e:  # ReportError, or anything else: the findings stand either way
        why = failure_cause(e).replace(str(folder), str(folder.with_name(final_name)))
        return {"status": "failed", "reason": why}
    return {"status": "ok"}


def _fail(run: _Run, error: BaseException) -> Path:
    """Record why the run failed (``failure``: stage and cause) in its manifest, as far as it
    can still be written, rename the folder ``<run id>.failed`` and rebuild the index; return
    the folder. On a full disk the partial tables are removed first if the manifest cannot be
    written otherwise."""
    tmp, run_id = run.tmp, run.tmp.name.removeprefix(".tmp-")
    failure = {"stage": run.stage, "cause": failure_cause(error)}
    manifest = dict(run.manifest or {})
    manifest.update(
        {
            "run_id": run_id,
            "exit_status": EXIT_RUNTIME,
            "failure": failure,
            "message": f"failed while {failure['stage']}: {failure['cause']}",
            "ended": run.clock().isoformat(),
            "duration_s": round(time.monotonic() - run.t0, 3),
        }
    )
    manifest.setdefault("period", {"label": tmp.parent.name})
    manifest.setdefault("started", "")
    for attempt in range(2):
        try:
            write_json(tmp / "manifest.json", manifest)
            break
        except OSError:
            if attempt == 0:  # a full disk: the partial tables make room for the cause
                shutil.rmtree(tmp / "tables", ignore_errors=True)
    final = tmp.with_name(f"{run_id}.failed")
    try:
        os.replace(tmp, final)
    except OSError:  # left as it is: the next run marks it failed, with the cause recorded
        return tmp
    with contextlib.suppress(Exception):
        build_index(run.root)
    return final


def _title(manifest: dict[str, Any]) -> str:
    client = manifest.get("client_id") or "all clients"
    return f"{manifest['title']} · {client} · {manifest['period']['label']} · {manifest['run_id']}"
