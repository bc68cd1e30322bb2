"""Render a run folder: papermill runs the notebook in it, nbconvert makes the HTML.

The notebook gets one parameter, ``run_dir="."``, and runs with the run folder as its working
directory, so the ``report.ipynb`` it leaves there names no path: ``cd <run folder> &&
papermill report.ipynb out.ipynb`` runs it again, wherever the folder was moved. The kernel
(:mod:`audit.report.kernel`) is this interpreter's ipykernel over Unix sockets. Real kernel
errors reach stderr and fail the rendering.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

from audit.errors import ReportError
from audit.report.kernel import QUIET_ENV, kernel_manager_class
from audit.report.params import DEFAULT_NOTEBOOK, default_notebook

__all__ = ["DEFAULT_NOTEBOOK", "TEMPLATE_DIR", "default_notebook", "render", "to_html"]

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


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


def render(notebook: Path, run_dir: Path, *, title: str, timeout_s: int) -> Path:
    """Run ``notebook`` in ``run_dir`` (its working directory, parameter ``run_dir="."``) into
    ``run_dir/report.ipynb``, then ``report.html``.

    Raises
    ------
    ReportError
        One line: the cell and exception that failed, a kernel that died or timed out, or a
        conversion error. The partial ``report.ipynb`` is kept.
    """
    import papermill as pm  # start-up: papermill (0.6 s) only when a report is rendered
    from papermill.exceptions import PapermillExecutionError  # start-up: as papermill

    output = run_dir / "report.ipynb"
    env_before = {k: os.environ.get(k) for k in QUIET_ENV}
    os.environ.update(QUIET_ENV)  # the kernel papermill starts inherits it
    try:
        with warnings.catch_warnings():
            # nbformat's notice about a user's template written without cell ids is not ours to show
            warnings.filterwarnings("ignore", message="Cell is missing an id field")
            pm.execute_notebook(
                str(notebook),
                str(output),
                parameters={"run_dir": "."},
                kernel_name="python3",
                engine_name=_engine(),
                progress_bar=False,
                cwd=str(run_dir),
                execution_timeout=timeout_s,
                start_timeout=120,
                kernel_manager_class=kernel_manager_class(),
                # Every output is in by then and the kernel has nothing to save: at 1M
                # deliveries a shutdown request took 0.5 s (freeing objects one by one).
                shutdown_kernel="immediate",
            )
    except PapermillExecutionError as e:
        _without_paths(output)
        first = (str(e.evalue).splitlines() or [""])[0][:300]
        raise ReportError(
            f"notebook cell {e.exec_count} raised {e.ename}: {first} (partial notebook: {output})"
        ) from None
    except Exception as e:  # kernel death, timeout, bad notebook: one line, never a traceback
        raise ReportError(f"notebook execution failed: {type(e).__name__}: {e}"[:400]) from None
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    _without_paths(output)
    try:
        to_html(output, run_dir / "report.html", title)
    except Exception as e:
        raise ReportError(f"HTML conversion failed: {type(e).__name__}: {e}"[:400]) from None
    return run_dir / "report.html"


def _without_paths(output: Path) -> None:
    """Make the notebook papermill wrote name itself only by its file name: papermill records
    where it wrote it (``metadata.papermill.output_path``), the run folder's temporary name,
    which would be wrong once the folder is renamed into place. Nothing is done to a notebook
    that cannot be read (a kernel that died before the first save)."""
    import nbformat  # start-up: as to_html's

    try:
        nb = nbformat.read(output, as_version=4)
    except Exception:  # no notebook, or half of one: left as it is
        return
    recorded = nb.metadata.get("papermill", {})
    if "output_path" in recorded:
        recorded["output_path"] = output.name
        tmp = output.with_name(f".{output.name}.tmp")
        nbformat.write(nb, tmp)
        os.replace(tmp, output)


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
