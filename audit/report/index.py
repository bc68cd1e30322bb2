"""``DIR/index.html``: every run, newest first, with badges, trend and links to files that exist.

A run folder whose ``manifest.json`` cannot be read (corrupt JSON, not UTF-8) is listed as
"unreadable manifest" and breaks nothing else.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from audit.report.markup import CSS, badges, esc

__all__ = ["RunEntry", "build_index", "scan_runs"]

STATUS_ORDER = ("fail", "error", "pass", "skip", "info", "muted")


@dataclass(frozen=True)
class RunEntry:
    """One run folder: ``state`` is ``completed``, ``failed`` or ``unreadable``."""

    folder: Path
    manifest: dict | None
    state: str
    problem: str = ""


def scan_runs(root: Path) -> list[RunEntry]:
    """Every run folder under ``root/<period>/``, newest first (temporary folders skipped)."""
    entries = []
    for manifest in root.glob("*/*/manifest.json"):
        folder = manifest.parent
        if folder.name.startswith(".") or folder.parent.name.startswith("."):
            continue
        try:
            m = json.loads(manifest.read_text(encoding="utf-8"))
            if not isinstance(m, dict):
                raise ValueError("not an object")
        except (OSError, UnicodeDecodeError, ValueError) as e:
            entries.append(RunEntry(folder, None, "unreadable", type(e).__name__))
            continue
        ok = m.get("exit_status") in (0, 1, 2) and not folder.name.endswith(".failed")
        entries.append(RunEntry(folder, m, "completed" if ok else "failed"))
    entries.sort(
        key=lambda e: (str((e.manifest or {}).get("started", "")), e.folder.name), reverse=True
    )
    return entries


def _link(root: Path, path: Path, label: str) -> str:
    if not path.is_file():
        return ""
    return f'<a href="{esc(path.relative_to(root).as_posix())}">{esc(label)}</a>'


def _row(root: Path, e: RunEntry) -> str:
    m = e.manifest or {}
    period = m.get("period", {}).get("label") if isinstance(m.get("period"), dict) else None
    cells = [esc(period or e.folder.parent.name), esc(m.get("run_id") or e.folder.name)]
    started = str(m.get("started", ""))
    cells.append(esc(f"{started[:10]} {started[11:16]}" if len(started) >= 16 else started))
    if e.state == "unreadable":
        cells += [f"unreadable manifest ({esc(e.problem)})", "", ""]
    else:
        counts = m.get("findings", {}).get("status", {})
        cells.append(badges(counts, STATUS_ORDER) if counts else "")
        t = m.get("trend") or {}
        cells.append(
            badges(t, ("new", "resolved", "persisting"))
            + f"<br><span class='note'>vs {esc(t.get('previous_period'))}</span>"
            if t.get("previous_period")
            else "<span class='note'>no previous run</span>"
        )
        cells.append(esc(m.get("exit_status", "")))
    report = _link(root, e.folder / "report.html", "report")
    if not report:
        rendering = (m.get("rendering") or {}).get("status")
        report = "rendering failed" if rendering == "failed" else f"no report ({e.state})"
    files = [
        report,
        _link(root, e.folder / "findings.csv", "findings"),
        _link(root, e.folder / "manifest.json", "manifest"),
    ]
    cells.append(" · ".join(f for f in files if f))
    nowrap = "<td style='white-space:nowrap'>"
    return (
        "<tr>"
        + "".join(f"{nowrap if i < 3 else '<td>'}{c}</td>" for i, c in enumerate(cells))
        + "</tr>"
    )


def build_index(root: str | os.PathLike) -> Path:
    """Rebuild ``root/index.html`` (written whole: temporary file, then rename)."""
    root = Path(root)
    rows = [_row(root, e) for e in scan_runs(root)]
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<title>Webhook delivery compliance reports</title>"
        f"<style>{CSS} body{{margin:2em}}</style></head><body>"
        "<h1>Webhook delivery compliance reports</h1>"
        "<table class='audit'><thead><tr><th>Period</th><th>Run</th><th>Started (UTC)</th>"
        "<th>Findings by status</th><th>Failures vs previous period</th><th>Exit</th>"
        "<th>Files</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></body></html>\n"
    )
    tmp = root / f".index-{os.getpid()}.html"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, root / "index.html")
    return root / "index.html"
