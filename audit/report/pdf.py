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
import threading
import time
from pathlib import Path
from typing import IO

from audit.errors import ReportError
from audit.redaction import for_terminal, scrub

__all__ = ["CHROMIUM_NAMES", "STDERR_KEPT", "find_chromium", "print_pdf"]

#: The bytes of Chromium's stderr kept for its error line (the end of its log).
STDERR_KEPT = 64 * 1024
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

    Chromium runs with a private, temporary profile (removed however the print ends) and no
    network access to speak of (the report is self-contained); ``--no-sandbox`` only when
    running as root, where Chromium refuses to start otherwise. Only the last
    :data:`STDERR_KEPT` bytes of its stderr are kept, for its error line. The PDF is written
    beside its final name and renamed into place, so a failed print leaves no partial file.

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
    profile = tempfile.mkdtemp(prefix="audit-chromium-")
    try:
        proc, stderr = _run(exe, profile, html, tmp_pdf, timeout)
    finally:  # whatever happened (a timeout, ^C): the profile and what Chromium put in it go
        _remove(profile)
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


def _run(
    exe: str, profile: str, html: Path, tmp_pdf: Path, timeout: float
) -> tuple[subprocess.Popen[bytes], bytes]:
    """Run Chromium on ``html`` with the profile folder ``profile``; (its process, the last
    :data:`STDERR_KEPT` bytes of its stderr)."""
    args = [
        exe,
        "--headless",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-sync",
        "--disable-breakpad",
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
    assert proc.stderr is not None  # a pipe, asked for above
    tail = _Tail(proc.stderr)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        tmp_pdf.unlink(missing_ok=True)
        raise ReportError(f"Chromium did not print {html.name} within {timeout:.0f} s") from None
    except BaseException:  # Ctrl-C: no Chromium left behind
        _stop(proc)
        raise
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running
        tail.join()
    return proc, tail.value()


class _Tail(threading.Thread):
    """Reads a pipe to its end, keeping only its last :data:`STDERR_KEPT` bytes (Chromium's
    log of a long print once reached 4.3 GB, all of it held)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        super().__init__(name="chromium-stderr", daemon=True)
        self.pipe = pipe
        self.kept = bytearray()
        self.start()

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while block := os.read(self.pipe.fileno(), 65536):
                self.kept += block
                if len(self.kept) > 2 * STDERR_KEPT:
                    del self.kept[:-STDERR_KEPT]

    def join(self, timeout: float | None = 5.0) -> None:
        """Wait for the pipe's end (a helper that kept it open is not waited for long)."""
        super().join(timeout)
        with contextlib.suppress(OSError):
            self.pipe.close()

    def value(self) -> bytes:
        """The last bytes read (at most :data:`STDERR_KEPT`)."""
        return bytes(self.kept[-STDERR_KEPT:])


def _remove(profile: str) -> None:
    """Remove Chromium's profile folder; a helper still writing into it as it dies gets a
    few tries, and a folder that cannot go is left quietly (the PDF is what was asked for)."""
    for _ in range(5):
        shutil.rmtree(profile, ignore_errors=True)
        if not os.path.lexists(profile):
            return
        time.sleep(0.1)


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
