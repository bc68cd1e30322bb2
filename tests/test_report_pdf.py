"""audit.report.pdf: the demo report printed through headless Chromium loses no column and no
finding, and each page names its run; without Chromium, printing says so in one line."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from audit.cli import main
from audit.errors import ReportError
from audit.redaction import register_sensitive
from audit.report import pdf
from audit.report.pdf import find_chromium, print_pdf


def _squeeze(text: str) -> str:
    """Text without any whitespace: a header wrapped over two lines still matches."""
    return re.sub(r"\s+", "", text)


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    if find_chromium() is None:
        pytest.skip("no Chromium on PATH")
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    out = tmp_path_factory.mktemp("print")
    assert main(["demo", "--out", str(out), "--quiet"]) == 0
    run = next(out.glob("reports/2026-10/*/"))
    print_pdf(run / "report.html", run / "report.pdf")
    text = subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(run / "report.pdf"), "-"],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout.decode("utf-8")
    return {"run": run, "text": text}


@pytest.mark.slow
def test_every_column_header_and_every_finding_uid_is_printed(printed):
    run, text = printed["run"], printed["text"]
    assert isinstance(run, Path) and isinstance(text, str)
    page = (run / "report.html").read_text(encoding="utf-8")
    headers = {
        _squeeze(html.unescape(re.sub(r"<[^>]+>", "", h)))
        for h in re.findall(r"<th[^>]*>(.*?)</th>", page, flags=re.S)
    } - {""}
    # the columns the issue saw lost on paper are among them
    for wanted in ("Line", "Detail", "Median, lower 95%", "Median, upper 95%", "Last delivery"):
        assert _squeeze(wanted) in headers
    flat = _squeeze(text)
    missing = sorted(h for h in headers if h not in flat)
    assert missing == [], f"column headers not in the PDF's text: {missing}"
    uids = [f["finding_uid"] for f in json.loads((run / "findings.json").read_text("utf-8"))]
    failing = [
        f["finding_uid"]
        for f in json.loads((run / "findings.json").read_text("utf-8"))
        if f["status"] in ("fail", "error")
    ]
    assert len(uids) >= 28 and len(failing) == 11  # the demo's, and CAP-01 since issue 42
    assert [u for u in uids if u not in flat] == []  # every finding, the passing ones too


@pytest.mark.slow
def test_each_printed_page_names_the_run_and_counts_pages(printed):
    run, text = printed["run"], printed["text"]
    assert isinstance(run, Path) and isinstance(text, str)
    pages = [p for p in text.split("\f") if p.strip()]
    assert len(pages) > 3
    for n, body in enumerate(pages, start=1):
        assert f"Run {run.name}" in body, f"page {n} does not name its run"
        assert f"page {n} of {len(pages)}" in body


def test_without_chromium_printing_says_so_in_one_line(monkeypatch, tmp_path):
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>", encoding="utf-8")
    monkeypatch.setattr(pdf.shutil, "which", lambda name: None)
    assert find_chromium() is None
    with pytest.raises(ReportError, match="no Chromium found on PATH") as e:
        print_pdf(page, tmp_path / "report.pdf")
    assert "\n" not in str(e.value) and not (tmp_path / "report.pdf").exists()


def test_a_chromium_that_fails_leaves_no_pdf_and_one_line(monkeypatch, tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\necho 'ERROR:something broke' >&2\nexit 3\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setattr(pdf.shutil, "which", lambda name: str(fake))
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>", encoding="utf-8")
    with pytest.raises(ReportError, match=r"exit 3\): ERROR:something broke") as e:
        print_pdf(page, tmp_path / "report.pdf")
    assert "\n" not in str(e.value)
    assert list(tmp_path.glob("*.pdf*")) == [] and list(tmp_path.glob(".*pdf*")) == []


def test_a_chromium_that_hangs_is_stopped_with_everything_it_started(monkeypatch, tmp_path):
    pidfile = tmp_path / "child.pid"
    fake = tmp_path / "chromium"
    # a helper process left running in the background, as Chromium's renderers are
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nsleep 300\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setattr(pdf.shutil, "which", lambda name: str(fake))
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>", encoding="utf-8")
    with pytest.raises(ReportError, match=r"did not print report\.html within 1 s"):
        print_pdf(page, tmp_path / "report.pdf", timeout=1)
    child = int(pidfile.read_text())
    for _ in range(50):  # reaped by init once killed
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail("the helper Chromium started was left running")


def test_chromium_s_error_line_has_known_secrets_cut_and_controls_shown(monkeypatch, tmp_path):
    secret = "whsec_pdf_" + "7" * 24
    register_sensitive([secret])
    fake = tmp_path / "chromium"
    fake.write_text(
        f"#!/bin/sh\nprintf 'ERROR: boom {secret} \\033]0;title\\007\\n' >&2\nexit 1\n",
        encoding="utf-8",
    )
    fake.chmod(0o755)
    monkeypatch.setattr(pdf.shutil, "which", lambda name: str(fake))
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>", encoding="utf-8")
    with pytest.raises(ReportError) as e:
        print_pdf(page, tmp_path / "report.pdf")
    assert secret not in str(e.value) and "\x1b" not in str(e.value) and "boom" in str(e.value)


@pytest.mark.slow
def test_every_finding_uid_on_the_page_survives_pdftotext_whole(printed):
    # issue 42: 11 of 28 uids wrapped mid-id on paper; a uid on one line is one token
    run, text = printed["run"], printed["text"]
    assert isinstance(run, Path) and isinstance(text, str)
    page = (run / "report.html").read_text(encoding="utf-8")
    tokens = set(re.findall(r"[0-9a-f]{16}", text))
    on_page = {
        f["finding_uid"]
        for f in json.loads((run / "findings.json").read_text("utf-8"))
        if f["finding_uid"] in page
    }
    assert len(on_page) >= 28
    assert sorted(on_page - tokens) == []


@pytest.mark.slow
def test_the_first_printed_page_lists_the_failing_controls(printed):
    run, text = printed["run"], printed["text"]
    assert isinstance(run, Path) and isinstance(text, str)
    first = text.split("\f", 1)[0]
    failing = [
        f["check_id"]
        for f in json.loads((run / "findings.json").read_text("utf-8"))
        if f["status"] in ("fail", "error")
    ]
    assert "What failed" in first
    assert all(c in first for c in failing)


def _fake_chromium(tmp_path: Path, body: str) -> Path:
    """A stand-in Chromium: a shell script that notes its profile folder, then runs ``body``
    (``$PROFILE`` and ``$PDF`` set from its arguments)."""
    fake = tmp_path / "chromium"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in\n'
        "  --user-data-dir=*) PROFILE=${a#--user-data-dir=} ;;\n"
        "  --print-to-pdf=*) PDF=${a#--print-to-pdf=} ;;\n"
        "esac; done\n"
        f'echo "$PROFILE" > {tmp_path / "profile.txt"}\n' + body,
        encoding="utf-8",
    )
    fake.chmod(0o755)
    return fake


def test_chromium_s_stderr_is_read_to_its_end_but_only_its_last_bytes_kept(monkeypatch, tmp_path):
    # Before: communicate() held the whole log (4.3 GB once); here 16 MiB of it.
    fake = _fake_chromium(
        tmp_path,
        "head -c 16777216 /dev/zero | tr '\\0' 'x' >&2\n"
        "printf '\\nERROR: the last line\\n' >&2\nexit 1\n",
    )
    monkeypatch.setattr(pdf.shutil, "which", lambda name: str(fake))
    seen: list[int] = []
    last_line = pdf._last_line
    monkeypatch.setattr(pdf, "_last_line", lambda b: seen.append(len(b)) or last_line(b))
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>", encoding="utf-8")
    with pytest.raises(ReportError, match=r"\(exit 1\): ERROR: the last line$"):
        print_pdf(page, tmp_path / "report.pdf")
    assert seen == [pdf.STDERR_KEPT]


@pytest.mark.parametrize(
    ("body", "timeout"),
    [
        ('mkdir -p "$PROFILE/Default/Cache"; echo x > "$PROFILE/Default/Cache/a"\n'
         'printf %s "%PDF-1.4 x" > "$PDF"\n', 60.0),  # printed
        ('mkdir -p "$PROFILE/Default"; echo x > "$PROFILE/Default/a"\nexit 2\n', 60.0),  # failed
        ('mkdir -p "$PROFILE/Default"\nsleep 300\n', 1.0),  # stopped
    ],
    ids=["printed", "failed", "stopped"],
)  # fmt: skip
def test_chromium_s_profile_folder_is_removed_however_the_print_ends(
    monkeypatch, tmp_path, body, timeout
):
    fake = _fake_chromium(tmp_path, body)
    monkeypatch.setattr(pdf.shutil, "which", lambda name: str(fake))
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>", encoding="utf-8")
    with contextlib.suppress(ReportError):
        print_pdf(page, tmp_path / "report.pdf", timeout=timeout)
    profile = Path((tmp_path / "profile.txt").read_text().strip())
    assert profile.name.startswith("audit-chromium-") and not profile.exists()


@pytest.mark.slow
def test_no_printed_page_but_the_last_is_half_empty(printed, tmp_path):
    # issue 42: page 2 was two-thirds empty (JupyterLab kept each output on one page, so a
    # tall card or the header moved whole to the next); now outputs flow
    from PIL import Image

    run = printed["run"]
    assert isinstance(run, Path)
    if shutil.which("pdftoppm") is None:
        pytest.skip("pdftoppm (poppler-utils) is not installed")
    subprocess.run(
        ["pdftoppm", "-r", "30", "-gray", "-png", str(run / "report.pdf"), str(tmp_path / "p")],
        check=True,
        timeout=120,
    )
    pages = sorted(tmp_path.glob("p-*.png"))
    assert len(pages) > 3
    for n, path in enumerate(pages[:-1], start=1):
        im = Image.open(path).convert("L")
        w, h = im.size
        body = range(int(h * 0.92))  # above the foot, where run id and page number are
        inked = [y for y in body if min(im.getpixel((x, y)) for x in range(0, w, 2)) < 200]
        assert inked and inked[-1] > h / 2, f"page {n} of {len(pages)} is half empty or more"
