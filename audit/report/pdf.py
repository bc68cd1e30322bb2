"""Print a rendered report to PDF through a headless Chromium, when one is installed.

The report's print stylesheet (``templates/html/style.css``, ``@media print`` and ``@page``)
decides the layout: wide tables print on landscape pages, finding cards are never split, and
each page's margin carries the run id and "page x of y".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from audit.errors import ReportError
from audit.redaction import for_terminal, scrub

__all__ = ["CHROMIUM_NAMES", "find_chromium", "print_pdf"]

#: The names a Chromium goes by on PATH, tried in this order.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The path of the first Chromium on PATH (:data:`CHROMIUM_NAMES`), or ``None``."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def print_pdf(html: Path, pdf: Path, *, timeout: float = 180.0) -> None:
    """Print ``html`` (a report file) to ``pdf`` with headless Chromium.

    Chromium runs with a private, temporary profile and no network access to speak of (the
    report is self-contained); ``--no-sandbox`` only when running as root, where Chromium
    refuses to start otherwise. The PDF is written beside its final name and renamed into
    place, so a failed print leaves no partial file.

    Raises
    ------
    ReportError
        No Chromium is installed, it failed, timed out or wrote no PDF (one line).
    """
    exe = find_chromium()
    if exe is None:
        raise ReportError(
            "no Chromium found on PATH (chromium, chromium-browser, google-chrome): "
            "install one to print the report to PDF"
        )
    html = Path(html).resolve()
    pdf = Path(pdf)
    if not html.is_file():
        raise ReportError(f"cannot print {html}: no such file")
    tmp_pdf = pdf.with_name(f".{pdf.name}.tmp")
    with tempfile.TemporaryDirectory(prefix="audit-chromium-") as profile:
        args = [
            exe,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-sync",
            "--mute-audio",
            f"--user-data-dir={profile}",
            # the page's own @page margin boxes carry the run id and "page x of y"
            "--no-pdf-header-footer",
            f"--print-to-pdf={tmp_pdf}",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")
        args.append(html.as_uri())
        try:
            # its own session: Chromium's renderers and helpers are stopped with it, as a group
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={**os.environ, "HOME": profile},
                start_new_session=True,
            )
        except OSError as e:
            raise ReportError(f"cannot run {exe}: {e.strerror or e}") from None
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            tmp_pdf.unlink(missing_ok=True)
            raise ReportError(
                f"Chromium did not print {html.name} within {timeout:.0f} s"
            ) from None
        except BaseException:  # Ctrl-C: no Chromium left behind
            _stop(proc)
            raise
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running
    if proc.returncode != 0 or not tmp_pdf.is_file() or tmp_pdf.stat().st_size == 0:
        tmp_pdf.unlink(missing_ok=True)
        last = _last_line(stderr)
        raise ReportError(
            f"Chromium failed to print {html.name} (exit {proc.returncode})"
            + (f": {last}" if last else "")
        )
    try:
        os.replace(tmp_pdf, pdf)
    except OSError as e:
        tmp_pdf.unlink(missing_ok=True)
        raise ReportError(f"cannot write {pdf}: {e.strerror or e}") from None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill Chromium's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _last_line(stderr: bytes) -> str:
    """Chromium's last meaningful error line, shortened (its log is long and noisy), with
    known secrets cut and control characters shown as codes (it reaches terminals and the
    manifest)."""
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln or "error" in ln] or lines
    return for_terminal(scrub(errors[-1]))[:200] if errors else ""
