"""Render a run folder: papermill runs the notebook with ``run_dir``, nbconvert makes the HTML.

The kernel (:mod:`audit.report.kernel`) is this interpreter's ipykernel over Unix sockets,
started here or ahead of time (:class:`~audit.report.kernel.WarmKernel`). Real kernel errors
still reach stderr and fail the rendering.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from audit.errors import ReportError
from audit.report.ahead import DrawingAhead
from audit.report.kernel import QUIET_ENV, WarmKernel, kernel_manager_class
from audit.report.params import DEFAULT_NOTEBOOK, default_notebook
from audit.report.rundir import RunData

__all__ = ["DEFAULT_NOTEBOOK", "TEMPLATE_DIR", "default_notebook", "preload", "render", "to_html"]

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


def preload() -> threading.Thread:
    """Import papermill and nbconvert and convert an empty notebook, in a daemon thread.

    A report run starts it when its analyses are done, while it writes the run folder (Parquet
    encoding releases the GIL), so the 0.6 s of imports and template compiling that rendering
    would otherwise pay is mostly done meanwhile. Not earlier: the 42 MiB of those modules would
    then add to the analyses' peak. Any error is left for rendering to meet (and report).
    """

    def work() -> None:
        with contextlib.suppress(Exception):
            import nbformat  # start-up: nbformat, papermill: imported here to be ready later
            import papermill  # start-up: its 0.6 s of imports paid meanwhile  # noqa: F401

            _exporter().from_notebook_node(nbformat.v4.new_notebook())

    # requests (papermill's) silences urllib3's SOCKS notice with a filter it adds while it is
    # imported; imported in the thread, that filter could be undone by a `catch_warnings` block
    # ending in this thread meanwhile, and the notice reach stderr. Here it costs 0.05 s.
    with contextlib.suppress(ImportError):
        import requests  # start-up: papermill's, imported here for its filter  # noqa: F401
    thread = threading.Thread(target=work, name="audit-preload", daemon=True)
    thread.start()
    return thread


def to_html(notebook: Path, target: Path, title: str) -> None:
    """Convert without code, no remote script or style (opens offline); ``<title>`` set."""
    import nbformat  # start-up: nbformat (jsonschema) only when a report is rendered

    nb = nbformat.read(notebook, as_version=4)
    nb.metadata["title"] = title
    body, _ = _exporter().from_notebook_node(nb)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, target)


def _exporter() -> Any:  # nbconvert's HTMLExporter (nbconvert has no type information)
    from nbconvert import HTMLExporter  # start-up: nbconvert (jinja2) only when rendering

    return HTMLExporter(
        template_name="audit",
        extra_template_basedirs=[str(TEMPLATE_DIR)],
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        embed_images=True,
    )


def render(
    notebook: Path,
    run_dir: Path,
    *,
    title: str,
    timeout_s: int,
    kernel: WarmKernel | None = None,
    ahead: Sequence[str] = (),
    drawn_from: RunData | None = None,
) -> Path:
    """Run ``notebook`` with ``run_dir`` into ``run_dir/report.ipynb``, then ``report.html``.

    With ``kernel`` (started earlier), the notebook runs on it when it is still alive; else
    papermill starts a kernel. Either way the kernel works in ``run_dir``. ``ahead``: names of
    figures of :mod:`audit.report.figures` that this process draws meanwhile, from the last,
    for the kernel to take (:mod:`audit.report.drawing`), from ``drawn_from`` (a
    :class:`~audit.report.rundir.RunData` in memory) when given, else from ``run_dir``.

    Raises
    ------
    ReportError
        One line: the cell and exception that failed, a kernel that died or timed out, or a
        conversion error. The partial ``report.ipynb`` is kept.
    """
    import papermill as pm  # start-up: papermill (0.6 s) only when a report is rendered
    from papermill.exceptions import PapermillExecutionError  # start-up: as papermill

    output = run_dir / "report.ipynb"
    start_timeout = 120
    km = None if kernel is None else kernel.take(run_dir, start_timeout)
    how = {"km": km} if km is not None else {"kernel_manager_class": kernel_manager_class()}
    env_before = {k: os.environ.get(k) for k in QUIET_ENV}
    os.environ.update(QUIET_ENV)  # a kernel papermill starts inherits it
    try:
        with warnings.catch_warnings():
            # nbformat's notice about a user's template written without cell ids is not ours to show
            warnings.filterwarnings("ignore", message="Cell is missing an id field")
            drawing = DrawingAhead(run_dir, ahead, drawn_from) if ahead else None
            with drawing or contextlib.nullcontext():
                pm.execute_notebook(
                    str(notebook),
                    str(output),
                    parameters={"run_dir": str(run_dir)},
                    kernel_name="python3",
                    engine_name=_engine(),
                    progress_bar=False,
                    cwd=str(run_dir),
                    execution_timeout=timeout_s,
                    start_timeout=start_timeout,
                    **how,
                )
    except PapermillExecutionError as e:
        first = (str(e.evalue).splitlines() or [""])[0][:300]
        raise ReportError(
            f"notebook cell {e.exec_count} raised {e.ename}: {first} (partial notebook: {output})"
        ) from None
    except Exception as e:  # kernel death, timeout, bad notebook: one line, never a traceback
        raise ReportError(f"notebook execution failed: {type(e).__name__}: {e}"[:400]) from None
    finally:
        if kernel is not None:
            kernel.close()
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        to_html(output, run_dir / "report.html", title)
    except Exception as e:
        raise ReportError(f"HTML conversion failed: {type(e).__name__}: {e}"[:400]) from None
    return run_dir / "report.html"


def _engine() -> str:
    """papermill's engine, saving the notebook before each code cell rather than before and
    after every cell (46 saves of a notebook growing to 0.4 MB at 1M deliveries, between the
    kernel's cells, against 13 now).

    The notebook as saved before a code cell holds every cell done, so a run killed by a signal
    during a long cell (a timer's timeout, the OOM killer) leaves what papermill left:
    the cells done, and the cell running. papermill's own saves during a long cell are kept,
    and so is its save when execution fails (a timeout, the kernel's death: as far as it ran);
    a notebook that ran through is written by papermill once, at the end, failing cell marked.
    """
    from papermill.engines import NBClientEngine, papermill_engines  # start-up: as render's

    class SavedBeforeCodeCells(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
            save, start, complete = nb_man.save, nb_man.cell_start, nb_man.cell_complete
            allowed = [True]

            def gated(**kw):
                if allowed[0]:
                    save(**kw)

            def at_start(cell, cell_index=None, **kw):
                allowed[0] = cell.cell_type == "code"
                try:
                    return start(cell, cell_index, **kw)
                finally:
                    allowed[0] = True

            def at_complete(cell, cell_index=None, **kw):
                allowed[0] = False  # saved before the next code cell, or at the end
                try:
                    return complete(cell, cell_index, **kw)
                finally:
                    allowed[0] = True

            nb_man.save, nb_man.cell_start, nb_man.cell_complete = gated, at_start, at_complete
            # Raising, the gate is open (each hook reopens it): papermill's last save keeps the
            # notebook as far as it ran. Ran through, papermill writes it anyway: no save here.
            done = super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
            allowed[0] = False
            return done

    papermill_engines.register(_ENGINE, SavedBeforeCodeCells)
    return _ENGINE


#: The name :func:`_engine` registers its engine under.
_ENGINE = "audit-saved-before-code-cells"


def python_executable() -> str:
    """The interpreter the kernel runs (for the manifest)."""
    return sys.executable
