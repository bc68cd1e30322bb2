"""The notebooks: thin, parameterised, committed without outputs; the analyst notebooks each
answer their question on simulated data under papermill, checked against the capture files and
the simulation's ground truth (``truth.json``), never against the code under test."""

from __future__ import annotations

import ast
import json
import math
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from audit.demo.simulate import simulate
from audit.ingest.store import ingest
from audit.report.explore import demo_inputs

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = sorted((ROOT / "audit" / "report" / "notebooks").glob("*.ipynb"))
ANALYST = sorted((ROOT / "notebooks").glob("*.ipynb"))
NOTEBOOKS = ANALYST + PACKAGED
#: The analyst notebooks' parameters, the names ``audit.open`` takes.
PARAMETERS = {"store", "logs", "secrets", "snapshots", "period"}


def _assigned(source: str) -> set[str]:
    return {
        t.id
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))


def test_the_four_notebooks_exist():
    assert {p.name for p in PACKAGED} == {"compliance_report.ipynb"}
    assert {p.name for p in ANALYST} == {
        "takedown.ipynb",
        "delivery_health.ipynb",
        "signature_audit.ipynb",
    }


def test_the_report_notebook_takes_run_dir_only():
    """The run_dir contract (docs/report.md): the report notebook never sees an input path."""
    import papermill as pm

    assert set(pm.inspect_notebook(str(PACKAGED[0]))) == {"run_dir"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs_with_parameters_and_kernelspec(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        assert cell.get("outputs") == [], f"{path.name}: a cell has outputs"
        assert cell.get("execution_count") is None, f"{path.name}: a cell has an execution count"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and code.index(tagged[0]) == 0, "first code cell is the parameters"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    # Secrets travel by file: the only secret-related parameter is the file's path
    # (`secrets`, as `audit.open` names it; `secrets_path` in older notebooks).
    names = _assigned(tagged[0].source)
    assert {n for n in names if "secret" in n or "key" in n} <= {"secrets", "secrets_path"}


@pytest.mark.parametrize("path", ANALYST, ids=lambda p: p.name)
def test_an_analyst_notebook_opens_with_its_question_and_takes_what_audit_open_takes(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert "**The question:" in first.source and "?**" in first.source
    assert _assigned(_parameters_cell(nb).source) == PARAMETERS
    assert "audit.open(store=store, logs=logs, secrets=secrets" in nb.cells[2].source


def _python(source: str) -> str:
    """A cell's source without its IPython magics (``%matplotlib inline``)."""
    return "\n".join(line for line in source.splitlines() if not line.startswith("%"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_thin(path):
    """The analysis lives in `audit`: a notebook defines nothing and imports only from it."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert "def " not in cell.source and "class " not in cell.source
            assert len(cell.source.splitlines()) <= 15
            if path not in ANALYST:
                continue
            for node in ast.walk(ast.parse(_python(cell.source))):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    modules = [node.module or ""]
                else:
                    continue
                assert all(m == "audit" or m.startswith("audit.") for m in modules), modules


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_sees_every_parameter(path):
    import papermill as pm

    nb = nbformat.read(path, as_version=4)
    assert set(pm.inspect_notebook(str(path))) == _assigned(_parameters_cell(nb).source)


# ----- the analyst notebooks run, on a simulated week --------------------------------------


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """A simulated week (20 incidents) with its ground truth, and the same data in a store."""
    root = tmp_path_factory.mktemp("week")
    simulate(root / "sim", days=7, incidents=20)
    sim = root / "sim"
    ingest([sim / "captures"], sim / "secrets.json", root / "store")
    return {
        "sim": sim,
        "store": root / "store",
        "truth": json.loads((sim / "truth.json").read_text()),
    }


def _requests(sim: Path) -> list[dict]:
    """Every capture line, read with the json module alone (``{"unreadable": line}`` when the
    line is not JSON)."""
    rows = []
    for path in sorted((sim / "captures").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                rows.append({"unreadable": line})
    return rows


def _bodies(sim: Path) -> list[dict]:
    """The JSON object bodies of those lines (the event envelopes), read with json alone."""
    out = []
    for r in _requests(sim):
        try:
            body = json.loads(r.get("body") or "null")
        except ValueError:
            continue
        if isinstance(body, dict) and isinstance(body.get("data"), dict):
            out.append(body)
    return out


def _run(name: str, tmp_path: Path, monkeypatch, **parameters) -> tuple[list[dict], str]:
    """Execute a notebook under papermill; its code cells' outputs, and all their text."""
    import papermill as pm

    monkeypatch.setenv("AUDIT_PROGRESS", "off")  # the kernel inherits it: no progress bar
    out = tmp_path / f"{name}.ipynb"
    pm.execute_notebook(
        str(ROOT / "notebooks" / f"{name}.ipynb"),
        str(out),
        parameters=parameters,
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=300,
        cwd=str(tmp_path),
    )
    cells = [c for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"]
    outputs = [o for c in cells for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = []
    for o in outputs:
        text.append("".join(o.get("text", "")))
        for mime in ("text/plain", "text/html"):
            text.append("".join(o.get("data", {}).get(mime, "")))
    return cells, "\n".join(text)


def _figures(cells: list[dict]) -> int:
    return sum("image/png" in o.get("data", {}) for c in cells for o in c["outputs"])


def _no_secret(sim: Path, text: str) -> None:
    for held in json.loads((sim / "secrets.json").read_text()).values():
        for s in held:
            assert s["secret"] not in text


def _from_logs(week) -> dict[str, object]:
    sim = week["sim"]
    return {
        "logs": [str(sim / "captures")],
        "secrets": str(sim / "secrets.json"),
        "snapshots": [str(sim / "snapshots")],
    }


@pytest.mark.slow
def test_delivery_health_names_every_exhausted_event_and_its_incident(week, tmp_path, monkeypatch):
    cells, text = _run("delivery_health", tmp_path, monkeypatch, **_from_logs(week))
    assert _figures(cells) >= 3  # failure rate, latency, retry delays
    exhausted = week["truth"]["receiver_outage"]["exhausted"]  # planted: five 503s each
    assert exhausted
    for e in exhausted:
        assert e["event_id"] in text
    # The incidents to recover: those the exhausted events were about, read from their bodies.
    bodies = _bodies(week["sim"])
    lost_events = {e["event_id"] for e in exhausted}
    incidents = {b["data"]["incidentId"] for b in bodies if b.get("id") in lost_events}
    assert incidents and all(i in text for i in incidents)
    _no_secret(week["sim"], text)


@pytest.mark.slow
def test_signature_audit_shows_every_attack_and_counts_every_request(week, tmp_path, monkeypatch):
    sim = week["sim"]
    from_store = {
        "store": str(week["store"]),
        "secrets": str(sim / "secrets.json"),
        "snapshots": [str(sim / "snapshots")],
    }
    cells, text = _run("signature_audit", tmp_path, monkeypatch, **from_store)
    assert _figures(cells) >= 1
    every = len(_requests(sim))  # one stored request per capture line, unreadable ones too
    assert f" of {every} requests rejected" in text
    for attack in week["truth"]["attacks"]:  # forged, tampered, replayed: planted, known ids
        assert attack["delivery_id"] in text
    assert "wh_main#2" in text  # the rotation: the second secret of wh_main came into use
    _no_secret(sim, text)


def _median_to_takedown_h(sim: Path, truth: dict) -> float:
    """The Kaplan-Meier median time to takedown, in hours, by hand from the capture files.

    Per incident: created at ``data.timestamp``, taken down at ``data.takedownTimestamp``,
    else censored when an event says ``closed`` or at the latest receipt (docs/tables.md).
    The planted attacks' bodies are left out (their verdicts are not ``valid``).
    """

    def t(s: str | float) -> float:  # ISO 8601, or epoch seconds (a capture may hold either)
        return float(s) if isinstance(s, int | float) else datetime.fromisoformat(s).timestamp()

    attacks = {a["delivery_id"] for a in truth["attacks"]}
    requests = [r for r in _requests(sim) if "headers" in r]
    as_of = max(t(r["received_at"]) for r in requests)
    created: dict[str, float] = {}
    down: dict[str, float] = {}
    closed: dict[str, float] = {}
    for r in requests:
        pairs = r["headers"].items() if isinstance(r["headers"], dict) else r["headers"]
        headers = {str(k).lower(): v for k, v in pairs}  # an object, or a list of pairs
        if headers.get("x-phishfort-delivery-id") in attacks:
            continue
        try:
            body = json.loads(r.get("body") or "null")
        except ValueError:
            continue
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or not data.get("timestamp"):
            continue
        i = data["incidentId"]
        created[i] = t(data["timestamp"])
        if data.get("takedownTimestamp"):
            down[i] = min(down.get(i, math.inf), t(data["takedownTimestamp"]))
        if data.get("status") == "closed":
            closed[i] = min(closed.get(i, math.inf), t(body["timestamp"]))
    times = sorted(
        (down[i] - c, True) if i in down else (min(closed.get(i, as_of), as_of) - c, False)
        for i, c in created.items()
    )
    survival, at_risk = 1.0, len(times)
    for duration, observed in times:  # no ties in simulated times
        if observed:
            survival *= 1 - 1 / at_risk
            if survival <= 0.5:
                return duration / 3600
        at_risk -= 1
    raise AssertionError("the median is not reached")


@pytest.mark.slow
def test_takedown_shows_the_median_against_the_baseline_and_every_class(
    week, tmp_path, monkeypatch
):
    cells, text = _run("takedown", tmp_path, monkeypatch, **_from_logs(week))
    assert _figures(cells) >= 1
    median = _median_to_takedown_h(week["sim"], week["truth"])
    assert f"all classes: {median:.1f} h" in text
    assert f"{median / 5.46:.1f} times the published 5.46 h" in text  # the baseline, quoted
    classes = {b["data"].get("incidentClass") for b in _bodies(week["sim"])}
    for cls in classes - {None}:
        assert cls in text
    _no_secret(week["sim"], text)


@pytest.mark.slow
def test_without_parameters_a_notebook_opens_the_built_in_demo_month(tmp_path, monkeypatch):
    """`make lab` then "run all": no input given, the demo month (`audit.open()`)."""
    demo = demo_inputs()  # the month the workbench opens; truth.json beside its captures
    truth = json.loads((Path(demo["secrets_path"]).parent / "truth.json").read_text())
    cells, text = _run("delivery_health", tmp_path, monkeypatch)
    assert _figures(cells) >= 3
    assert "period: 2026-10-01..2026-10-31" in text  # the demo's month, read from its data
    for e in truth["receiver_outage"]["exhausted"]:
        assert e["event_id"] in text


# ----- in a kernel: an audit error is one line, no TqdmWarning (issue 42, point 8) ----------


def _notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, path)
    return path


def _kernel_outputs(tmp_path: Path, *cells: str) -> list[list[dict]]:
    """Run ``cells`` in a real kernel (nbclient, every cell run even after an error): each
    cell's outputs."""
    from nbclient import NotebookClient

    nb = nbformat.read(_notebook(tmp_path / "cells.ipynb", *cells), as_version=4)
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=300).execute()
    return [[dict(o) for o in c.outputs] for c in nb.cells]


def _errors(outputs: list[dict]) -> list[dict]:
    return [o for o in outputs if o["output_type"] == "error"]


@pytest.mark.slow
def test_an_audit_error_in_a_cell_is_one_line_and_papermill_still_fails(tmp_path, monkeypatch):
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    import audit
    from audit.errors import InputError

    monkeypatch.setenv("AUDIT_PROGRESS", "off")
    monkeypatch.delenv("AUDIT_TRACEBACK", raising=False)
    nowhere = tmp_path / "nowhere"
    with pytest.raises(InputError) as raised:  # the message, as this process sees it
        audit.open(store=str(nowhere), progress=False)
    path = _notebook(
        tmp_path / "in.ipynb", "import audit", f"a = audit.open(store={str(nowhere)!r})"
    )
    with pytest.raises(PapermillExecutionError) as failed:
        pm.execute_notebook(
            str(path), str(tmp_path / "out.ipynb"), kernel_name="python3", progress_bar=False
        )
    assert failed.value.ename == "InputError" and failed.value.evalue == str(raised.value)
    cell = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1]
    (error,) = _errors(cell.outputs)
    assert error["traceback"] == [f"InputError: {raised.value}  [%tb: the traceback]"]
    assert [o for o in cell.outputs if o["output_type"] != "error"] == []


@pytest.mark.slow
def test_tb_shows_the_traceback_other_errors_keep_theirs_and_it_can_be_turned_off(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("AUDIT_PROGRESS", "off")
    monkeypatch.delenv("AUDIT_TRACEBACK", raising=False)
    call = f"audit.open(store={str(tmp_path / 'nowhere')!r})"
    cells = _kernel_outputs(
        tmp_path,
        "import audit",
        call,
        "%tb",
        "1 / 0",
        "import audit.notebook\naudit.notebook.one_line_errors(False)",
        call,
        "audit.notebook.one_line_errors()\naudit.notebook.one_line_errors()",
        call,
    )
    one_line, tb, zero, off, full, on, again = (_errors(c) for c in cells[1:])
    assert len(one_line) == 1 and len(one_line[0]["traceback"]) == 1
    # %tb: IPython's traceback of that error, through the library's frames
    text = "\n".join(tb[0]["traceback"])
    assert tb[0]["ename"] == "InputError" and "workbench.py" in text and "scan.py" in text
    assert len(zero[0]["traceback"]) > 1  # not audit's: IPython's traceback
    assert off == [] and on == []  # switching is quiet and idempotent
    assert full[0]["ename"] == "InputError" and len(full[0]["traceback"]) > 5
    assert again[0]["traceback"] == one_line[0]["traceback"]


@pytest.mark.slow
def test_audit_traceback_full_in_the_environment_keeps_ipython_s_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_PROGRESS", "off")
    monkeypatch.setenv("AUDIT_TRACEBACK", "full")  # the kernel inherits it
    cells = _kernel_outputs(
        tmp_path, "import audit", f"audit.open(store={str(tmp_path / 'nowhere')!r})"
    )
    (error,) = _errors(cells[1])
    assert error["ename"] == "InputError" and len(error["traceback"]) > 5


@pytest.mark.slow
def test_a_progress_bar_without_ipywidgets_is_text_and_never_a_tqdm_warning(
    week, tmp_path, monkeypatch
):
    monkeypatch.delenv("AUDIT_PROGRESS", raising=False)
    sim = week["sim"]
    cells = _kernel_outputs(
        tmp_path,
        # as `make test`'s environment: no ipywidgets (blocked, should it be installed)
        "import sys\nsys.modules['ipywidgets'] = None",
        "import audit, audit.workbench\naudit.workbench.PROGRESS_DELAY_S = 0.0  # drawn at once",
        f"a = audit.open(logs={str(sim / 'captures')!r}, secrets={str(sim / 'secrets.json')!r},"
        " progress=True)",
    )
    outputs = [o for c in cells for o in c]
    assert _errors(outputs) == []
    stderr = "".join("".join(o.get("text", "")) for o in outputs if o.get("name") == "stderr")
    assert "TqdmWarning" not in stderr and "IProgress" not in stderr
    assert "audit.open: " in stderr  # the text bar was drawn


def test_make_lab_installs_ipywidgets_for_the_progress_widget():
    """`make lab` installs the `lab` extra: with ipywidgets, a load's bar is a widget."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lab = extras["optional-dependencies"]["lab"]
    assert any(r.split(">")[0].split("=")[0].strip() == "ipywidgets" for r in lab)
