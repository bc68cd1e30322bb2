"""The report pipeline, one way: check -> load -> analyse -> findings -> run folder -> render.

1. Parameters, period and notebook are checked (:mod:`audit.report.params`): nothing is
   written for a bad one.
2. :func:`~audit.report.inputs.load_inputs` reads the files once; :func:`compute` runs the
   analyses and the controls in this process (pure).
3. Under a lock on ``DIR/.lock`` the run folder is written to ``<period>/.tmp-<run id>``:
   findings, trend, tables, manifest. The exit code comes from the findings in memory.
4. Papermill renders the notebook with the one parameter ``run_dir``; nbconvert makes the
   HTML. If that fails, the findings and the exit code stand and the manifest (and the index)
   say "rendering failed".
5. The folder is renamed into place and the index rebuilt.

Temporary folders left by a killed run become ``<run id>.failed`` (``docs/report.md``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from audit.errors import ParameterError, ReportError
from audit.findings import SEVERITIES
from audit.ingest.side import Pending
from audit.locks import try_lock_file, unlock_file
from audit.memory import release_free_memory
from audit.report.ahead import drawing_aside
from audit.report.compute import Computed, compute
from audit.report.drawing import figures_folder, remove_figures_folder
from audit.report.figures import FIGURES, in_memory
from audit.report.index import build_index, scan_runs
from audit.report.inputs import Inputs, load_inputs
from audit.report.kernel import WarmKernel
from audit.report.params import Period, check_notebook, check_params, default_notebook
from audit.report.render import preload, render
from audit.report.rundir import LateWrites, RunData, versions, write_json, write_run

__all__ = [
    "EXIT_CONTROL_ERROR",
    "EXIT_FAILING",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "Computed",
    "ReportResult",
    "compute",
    "exit_code",
    "lock",
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
        # audit.locks' own: a forked child (the figures drawn aside) closes its copy
        if not try_lock_file(f):
            raise ReportError(f"{out_dir}: another report run holds the lock")
        try:
            yield
        finally:
            unlock_file(f)


def mark_stale(root: Path, by_run: str) -> list[Path]:
    """Rename ``<period>/.tmp-<id>`` folders of killed runs to ``<id>.failed`` (under the lock,
    no other run can be writing them) with a manifest saying so; return the new paths."""
    moved = []
    for tmp in sorted(root.glob("*/.tmp-*")):
        if not tmp.is_dir() or tmp.is_symlink():
            continue
        run_id = tmp.name.removeprefix(".tmp-")
        final = tmp.with_name(f"{run_id}.failed")
        if final.exists():
            final = tmp.with_name(f"{run_id}-{secrets.token_hex(2)}.failed")
        manifest = {
            "run_id": run_id,
            "period": {"label": tmp.parent.name},
            "exit_status": EXIT_RUNTIME,
            "started": "",
            "message": f"interrupted before it finished; marked failed by run {by_run}",
        }
        write_json(tmp / "manifest.json", manifest)
        remove_figures_folder(tmp)  # audit.report.drawing's, if killed
        os.replace(tmp, final)
        moved.append(final)
    return moved


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
    """Where a run wrote, and how it ended."""

    exit_code: int
    run_dir: Path | None
    html: Path | None
    index: Path
    manifest: dict[str, Any]
    message: str = ""
    skipped: bool = False
    rendering_failed: bool = False


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
) -> ReportResult:
    """Compute the findings of a period, write the run folder, render the report, index it.

    ``params`` may hold ``as_of``, ``client_id``, ``clock_start``, ``header_prefix`` and
    ``thresholds``; secrets travel only as the file's path. ``notebook`` defaults to the
    packaged report; any notebook with a ``run_dir`` parameter works (``docs/report.md``).
    ``progress`` receives one line per long stage. With ``store`` (an evidence store folder),
    ``logs`` (may be empty) are ingested into it, its records verified again where the secrets
    changed, and the period is read from the store; ``notice`` (default ``progress``) receives
    what that did to the store (:attr:`~audit.report.inputs.Inputs.notes`).

    Returns a :class:`ReportResult` whose ``exit_code`` is 0 (no failing finding at or above
    ``fail_on``), 1 (failing findings), 2 (a control errored). Bad input raises an
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
    for note in inputs.notes:
        (notice or say)(note)
    d = _deliveries(inputs)
    say(
        f"loaded {len(d)} records from {int((inputs.files['kind'] == 'capture log').sum())} "
        f"files ({int((d['verdict'] == 'valid').sum())} valid, "
        f"{int((d['verdict'] == 'unreadable').sum())} unreadable{_history(inputs, period)})"
    )
    del d  # compute takes the frame over, to free it
    run_id = f"{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
    tmp = root / period.label / f".tmp-{run_id}"
    figures = nb_path == default_notebook()  # the packaged notebook's figures are drawn ahead
    # The process drawing them, forked once the tables exist (None: a thread draws them).
    aside: list[Pending[list[str]] | None] = [None]

    def draw_aside(tables: dict[str, pd.DataFrame]) -> None:
        pending = aside[0] = drawing_aside(tmp, period, tables) if figures else None
        if pending is not None:  # stopped however the run ends
            stopping.callback(pending.cancel)

    # The notebook's kernel starts now, with its imports, on the core the analyses leave idle
    # (the load before used both); it is shut down however the run ends.
    with WarmKernel() as kernel, contextlib.ExitStack() as stopping:
        computed = compute(inputs, checked, period, on_tables=draw_aside)
        code = exit_code(computed.findings, fail_on)
        failing = int((computed.findings["status"] == "fail").sum())
        say(f"analyses and controls done: {len(computed.findings)} findings, {failing} failing")
        preloading = preload()  # beside the run folder's writing
        with lock(root), contextlib.ExitStack() as inside:  # stopped before its release
            if (pending := aside[0]) is not None:
                inside.callback(pending.cancel)
            mark_stale(root, run_id)
            tmp.mkdir(parents=True)
            # The child leaves the figures it drew in their folder; the tables only they read
            # are written while the notebook runs.
            drawn_in, figures = _figures_folder(tmp, aside, figures)
            manifest, csvs = write_run(
                tmp, period, checked, computed, code, nb_path, started, drawn_in
            )
            inside.callback(csvs.cancel)  # nothing is written into the folder after the lock
            # The notebook reads the run folder: the frames go before it runs (at 1M, 1.7 GB
            # beside the kernel's 0.6-1.8 GB), but copies of what the figures read (150 MB at
            # 1M) when no child process draws them already.
            drawn = in_memory(tmp, manifest, computed) if figures and not aside[0] else None
            del inputs, computed
            release_free_memory()
            preloading.join()
            return _render_run(
                _Rendering(
                    root=root,
                    tmp=tmp,
                    nb_path=nb_path,
                    timeout_s=timeout_s,
                    t0=t0,
                    say=say,
                    clock=clock,
                    kernel=kernel,
                    drawn=drawn,
                    csvs=csvs,
                    aside=aside[0],
                ),
                manifest,
                code,
            )


def _figures_folder(
    tmp: Path, aside: list[Pending[list[str]] | None], ahead: bool
) -> tuple[Path | None, bool]:
    """Make the figures' folder for the child drawing them (``aside[0]``): (the folder, whether
    figures are still drawn ahead). If it cannot be made (something is there already), the
    child is stopped and none is drawn ahead: the kernel draws them all, outside that folder."""
    pending = aside[0]
    if pending is None:
        return None, ahead
    try:
        return figures_folder(tmp), ahead
    except OSError:
        pending.cancel()
        aside[0] = None
        return None, False


@dataclass(frozen=True)
class _Rendering:
    """A run folder written under the run lock, to render, rename into place and index.

    ``tmp``: the folder (``<period>/.tmp-<run id>``) under ``root``; ``t0``: when the run
    started (``time.monotonic``); ``kernel``: the kernel started ahead; ``drawn``: the frames
    this process draws the figures from meanwhile (:func:`~audit.report.figures.in_memory`);
    ``aside``: the process drawing them instead
    (:func:`~audit.report.ahead.drawing_aside`), stopped after rendering; ``csvs``: the
    tables' CSV copies being written meanwhile, waited for before the rename.
    """

    root: Path
    tmp: Path
    nb_path: Path
    timeout_s: int
    t0: float
    say: Progress
    clock: Callable[[], datetime]
    kernel: WarmKernel | None = None
    drawn: RunData | None = None
    csvs: LateWrites | None = None
    aside: Pending[list[str]] | None = None


def _render_run(run: _Rendering, manifest: dict[str, Any], code: int) -> ReportResult:
    """Render the notebook into the run folder, rename it into place, rebuild the index; the
    run's ``manifest`` is completed and written again, ``code`` is its exit code."""
    tmp, say = run.tmp, run.say
    final = tmp.with_name(manifest["run_id"])
    say("rendering the report")
    message, failed = "", False
    try:
        # Drawn here from ``drawn``, else by the child (or by the kernel: a custom notebook).
        ahead: Sequence[str] = FIGURES if run.drawn is not None else ()
        render(
            run.nb_path,
            tmp,
            title=_title(manifest),
            timeout_s=run.timeout_s,
            kernel=run.kernel,
            ahead=ahead,
            drawn_from=run.drawn,
        )
        manifest["rendering"] = {"status": "ok"}
    except ReportError as e:
        message, failed = f"rendering failed: {e}".replace(str(tmp), str(final)), True
        manifest["rendering"] = {"status": "failed", "message": message}
    if run.aside is not None:  # done (the kernel has every figure), or drawing for nothing
        run.aside.cancel()
    # Again, now that the kernel is gone: a cell that timed out may have kept drawing after the
    # figures' folder was first removed.
    remove_figures_folder(tmp)
    if run.csvs is not None:
        run.csvs.wait()  # an error writing them fails the run, as before rendering
    manifest["ended"] = run.clock().isoformat()
    manifest["duration_s"] = round(time.monotonic() - run.t0, 3)
    write_json(tmp / "manifest.json", manifest)
    os.replace(tmp, final)
    index = build_index(run.root)
    html = final / "report.html"
    return ReportResult(
        code, final, html if html.is_file() else None, index, manifest, message, False, failed
    )


def _title(manifest: dict[str, Any]) -> str:
    client = manifest.get("client_id") or "all clients"
    return f"{manifest['title']} · {client} · {manifest['period']['label']} · {manifest['run_id']}"
