"""Render a run folder: papermill runs the notebook with ``run_dir``, nbconvert makes the HTML.

The kernel is this interpreter's ipykernel (``sys.executable -m ipykernel_launcher``, whatever
kernelspecs the user has installed) and talks to us over IPC (Unix sockets in a private
folder) rather than TCP on localhost: nothing listens on a port, and ipykernel has no reason
to print its "running over TCP without encryption" warning. Real kernel errors still reach
stderr and fail the rendering.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
import warnings
from importlib import resources
from pathlib import Path

from audit.errors import ReportError

__all__ = ["DEFAULT_NOTEBOOK", "TEMPLATE_DIR", "default_notebook", "render", "to_html"]

DEFAULT_NOTEBOOK = "compliance_report.ipynb"
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


def default_notebook() -> Path:
    """The packaged report notebook (package data, found with importlib.resources)."""
    ref = resources.files("audit.report").joinpath("notebooks", DEFAULT_NOTEBOOK)
    path = Path(str(ref))
    if not path.is_file():  # pragma: no cover - a broken installation
        raise ReportError(f"the packaged notebook {DEFAULT_NOTEBOOK} is missing: reinstall audit")
    return path


def _kernel_manager_class():
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class OwnPythonSpecs(KernelSpecManager):
        """``python3`` is always this interpreter's ipykernel."""

        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            if kernel_name == "python3":
                return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())
            return super().get_kernel_spec(kernel_name)

    class IPCKernelManager(AsyncKernelManager):
        """A kernel over Unix sockets in a private (0700) folder."""

        def __init__(self, **kwargs):
            folder = tempfile.mkdtemp(prefix="audit-kernel-")
            name = f"kernel-{uuid.uuid4().hex[:12]}"
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("connection_file", os.path.join(folder, f"{name}.json"))
            kwargs.setdefault("ip", os.path.join(folder, name))
            kwargs.setdefault("kernel_spec_manager", OwnPythonSpecs())
            super().__init__(**kwargs)
            self._audit_folder = folder

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client sends SIGINT before every shutdown request; when it lands while
            # the idle kernel handles a message, ipykernel logs "KeyboardInterrupt caught in
            # kernel" on stderr (seen about once in ten runs). Once every cell has run there
            # is nothing to interrupt: skip it and let the shutdown request (then a kill
            # after the grace period) end the kernel. Interrupts on a timeout still happen.
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            if not restart:
                import shutil

                shutil.rmtree(self._audit_folder, ignore_errors=True)

    return IPCKernelManager


def to_html(notebook: Path, target: Path, title: str) -> None:
    """Convert without code, no remote script or style (opens offline); ``<title>`` set."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(notebook, as_version=4)
    nb.metadata["title"] = title
    exporter = HTMLExporter(
        template_name="audit",
        extra_template_basedirs=[str(TEMPLATE_DIR)],
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        embed_images=True,
    )
    body, _ = exporter.from_notebook_node(nb)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, target)


def render(notebook: Path, run_dir: Path, *, title: str, timeout_s: int) -> Path:
    """Run ``notebook`` with ``run_dir`` into ``run_dir/report.ipynb``, then ``report.html``.

    Raises
    ------
    ReportError
        One line: the cell and exception that failed, a kernel that died or timed out, or a
        conversion error. The partial ``report.ipynb`` is kept.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    output = run_dir / "report.ipynb"
    env_before = os.environ.get("PYDEVD_DISABLE_FILE_VALIDATION")
    # debugpy (loaded by ipykernel) warns about frozen modules on Python 3.11+: noise for a
    # batch kernel that never debugs.
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    try:
        with warnings.catch_warnings():
            # nbformat's notice about a user's template written without cell ids is not ours to show
            warnings.filterwarnings("ignore", message="Cell is missing an id field")
            pm.execute_notebook(
                str(notebook),
                str(output),
                parameters={"run_dir": str(run_dir)},
                kernel_name="python3",
                progress_bar=False,
                cwd=str(run_dir),
                execution_timeout=timeout_s,
                start_timeout=120,
                kernel_manager_class=_kernel_manager_class(),
            )
    except PapermillExecutionError as e:
        first = (str(e.evalue).splitlines() or [""])[0][:300]
        raise ReportError(
            f"notebook cell {e.exec_count} raised {e.ename}: {first} (partial notebook: {output})"
        ) from None
    except Exception as e:  # kernel death, timeout, bad notebook: one line, never a traceback
        raise ReportError(f"notebook execution failed: {type(e).__name__}: {e}"[:400]) from None
    finally:
        if env_before is None:
            os.environ.pop("PYDEVD_DISABLE_FILE_VALIDATION", None)
        else:
            os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = env_before
    try:
        to_html(output, run_dir / "report.html", title)
    except Exception as e:
        raise ReportError(f"HTML conversion failed: {type(e).__name__}: {e}"[:400]) from None
    return run_dir / "report.html"


def python_executable() -> str:
    """The interpreter the kernel runs (for the manifest)."""
    return sys.executable
