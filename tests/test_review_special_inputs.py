"""Hostile review: special files, out-of-range dates, repeated keys, deep nesting, secrets typed
into options, misleading path messages and records silently left out by ``--as-of``."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pandas as pd
import pytest

from audit.analysis.subscriptions import SnapshotWarning, load_snapshots
from audit.cli import main
from audit.errors import InputError, LoadError, ParameterError
from audit.findings.mutes import apply_mutes, read_mutes
from audit.ingest.load import load_captures
from audit.paths import MAX_SMALL_FILE_BYTES, PathWarning
from audit.report.params import read_params
from tests.builders import capture, write_jsonl, write_secrets

MUTE = {"check_id": "SIG-01", "resource": "*", "reason": "accepted", "expires": "2026-12-31"}


def _secret() -> str:
    # a fresh value per test: the registry of known values is process-wide
    return f"whsec_{uuid.uuid4().hex}"


@pytest.fixture
def inputs(tmp_path):
    logs = write_jsonl(tmp_path / "c.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": _secret()}]})
    return logs, secrets


def _limit_memory() -> None:  # before the fix, /dev/zero grew memory without bound
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


def _cli(*args: object) -> subprocess.CompletedProcess:
    """``audit ARGS`` in a child with a time and memory limit: before the fix a FIFO blocked."""
    script = "import sys\nfrom audit.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    try:
        return subprocess.run(
            [sys.executable, "-c", script, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"audit {' '.join(map(str, args))} did not end within 60 s")


def _special(tmp_path: Path, kind: str) -> Path:
    if kind == "fifo":
        path = tmp_path / "special.json"
        os.mkfifo(path)
        return path
    if kind == "link-to-dev-zero":
        path = tmp_path / "zero.json"
        path.symlink_to("/dev/zero")
        return path
    return Path("/dev/zero")


def _args(option: str, path: Path, logs: Path, secrets: Path, tmp_path: Path) -> list:
    if option == "--secrets":
        return ["verify", logs, "--secrets", path, "--out", tmp_path / "v.csv"]
    return [
        "report",
        logs,
        "--secrets",
        secrets,
        "--period",
        "2026-10",
        option,
        path,
        "--out",
        tmp_path / "reports",
        "--quiet",
    ]


# -- 1. --secrets, --params, --mutes: regular files of at most 16 MiB ------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-dev-zero"])
@pytest.mark.parametrize("option", ["--secrets", "--params", "--mutes"])
def test_a_special_file_given_as_a_small_input_is_refused(option, kind, inputs, tmp_path):
    logs, secrets = inputs
    path = _special(tmp_path, kind)
    done = _cli(*_args(option, path, logs, secrets, tmp_path))
    assert done.returncode == 3
    assert done.stderr.strip() == f"audit: error: {path}: not a regular file"
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize(
    ("option", "what"),
    [("--secrets", "secrets"), ("--params", "parameters"), ("--mutes", "mutes")],
)
def test_a_small_input_over_the_limit_is_one_line(option, what, inputs, tmp_path, capsys):
    logs, secrets = inputs
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: no disk used
        f.truncate(MAX_SMALL_FILE_BYTES + 1)
    assert main([str(a) for a in _args(option, big, logs, secrets, tmp_path)]) == 3
    err = capsys.readouterr().err
    assert err == f"audit: error: {big}: {what} file larger than 16 MiB; is this the right file?\n"


def test_the_readers_take_a_small_file_at_the_limit(tmp_path):
    text = json.dumps([MUTE])
    path = tmp_path / "m.json"
    path.write_text(text + " " * (MAX_SMALL_FILE_BYTES - len(text)))
    assert read_mutes(path)["check_id"].tolist() == ["SIG-01"]


# -- 2. dates outside the years a table holds -------------------------------------------------


@pytest.mark.parametrize("as_of", ["9999-01-01T00:00:00Z", "1000-01-01T00:00:00Z"])
def test_an_as_of_outside_the_years_names_them(as_of, inputs, tmp_path, capsys):
    logs, secrets = inputs
    out = tmp_path / "tables"
    args = ["analyze", str(logs), "--secrets", str(secrets), "--as-of", as_of, "--out", str(out)]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert err == f"audit: error: as_of '{as_of}': years 1678 to 2261 only\n"


def test_the_as_of_of_a_params_file_says_the_same(tmp_path):
    from audit.report.params import check_params, parse_period

    with pytest.raises(ParameterError, match=r"^as_of '9999-01-01T00:00:00Z': years 1678 to 2261"):
        check_params({"as_of": "9999-01-01T00:00:00Z"}, parse_period("2026-10"))


def _mutes(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mutes.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_mute_expiring_after_2262_never_expires(tmp_path):
    never = {**MUTE, "expires": "9999-12-31"}
    mutes = read_mutes(_mutes(tmp_path, json.dumps([never])))
    assert pd.isna(mutes.loc[0, "expires"])
    findings = pd.DataFrame(
        {"check_id": ["SIG-01"], "resource": ["wh_1"], "status": ["fail"], "evidence": ["{}"]}
    )
    for as_of in ("2026-11-01", "2262-04-01"):
        out = apply_mutes(findings, mutes, as_of=pd.Timestamp(as_of, tz="UTC"))
        assert out.loc[0, "status"] == "muted"
        assert json.loads(out.loc[0, "evidence"])["muted"]["expires"] == "never"


def test_a_never_expiring_mute_wins_over_a_dated_one(tmp_path):
    dated = {**MUTE, "reason": "dated", "expires": "2026-12-31"}
    never = {**MUTE, "reason": "never", "expires": "9999-12-31"}
    mutes = read_mutes(_mutes(tmp_path, json.dumps([dated, never])))
    findings = pd.DataFrame(
        {"check_id": ["SIG-01"], "resource": ["wh_1"], "status": ["fail"], "evidence": ["{}"]}
    )
    out = apply_mutes(findings, mutes, as_of=pd.Timestamp("2026-11-01", tz="UTC"))
    assert json.loads(out.loc[0, "evidence"])["muted"]["reason"] == "never"


def test_a_mute_expiring_before_1678_is_an_error(tmp_path):
    path = _mutes(tmp_path, json.dumps([{**MUTE, "expires": "0001-01-01"}]))
    with pytest.raises(InputError, match=r"mute 1: 'expires' is before 1678"):
        read_mutes(path)


def _snapshot(tmp_path: Path, **changes: object) -> Path:
    item = {"id": "wh_1", "createdAt": changes.pop("createdAt", "2026-10-01T00:00:00Z")}
    doc = {"fetched_at": "2026-10-02T00:00:00Z", "base_url": "https://api.example", **changes}
    doc["response"] = {"data": [item]}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_a_snapshot_created_at_after_2262_is_left_empty_with_a_warning(tmp_path):
    path = _snapshot(tmp_path, createdAt="9999-01-01T00:00:00Z")
    with pytest.warns(SnapshotWarning, match=r"'createdAt' is out of range \(years 1678 to 2261"):
        df = load_snapshots(path)
    assert df["subscription_id"].tolist() == ["wh_1"] and df["created_at"].isna().all()


def test_a_snapshot_fetched_after_2262_is_an_error_naming_the_file(tmp_path):
    path = _snapshot(tmp_path, fetched_at="9999-01-01T00:00:00Z")
    with pytest.raises(
        LoadError, match=r"snap\.json: not a snapshot: 'fetched_at' is out of range"
    ):
        load_snapshots(path)


def test_odd_snapshot_times_through_analyze_are_one_line(inputs, tmp_path, capsys):
    logs, secrets = inputs
    path = _snapshot(tmp_path, fetched_at="9999-01-01T00:00:00Z")
    args = ["analyze", str(logs), "--secrets", str(secrets), "--subscriptions", str(path)]
    assert main([*args, "--out", str(tmp_path / "tables")]) == 3
    assert capsys.readouterr().err.startswith(f"audit: error: {path}: not a snapshot: ")


# -- 3. a key named twice ---------------------------------------------------------------------


def test_a_mute_naming_a_field_twice_is_an_error(tmp_path):
    text = json.dumps([MUTE])[:-2] + ', "check_id": "SIG-02"}]'
    path = _mutes(tmp_path, text)
    with pytest.raises(InputError, match=r"mutes\.json: mute 1 names 'check_id' twice$"):
        read_mutes(path)


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("p.yaml", "as_of: 2026-10-05T00:00:00Z\nas_of: 2026-10-06T00:00:00Z\n", "as_of"),
        ("p.json", '{"thresholds": {"ttt_median_h": 1, "ttt_median_h": 2}}', "ttt_median_h"),
    ],
)
def test_a_params_file_naming_a_key_twice_is_an_error(name, text, key, tmp_path):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ParameterError, match=rf"{name}: parameter file names '{key}' twice"):
        read_params(path)


def test_a_yaml_merge_key_is_not_a_repeated_key(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("base: &b {x: 1}\nthresholds:\n  <<: *b\n  x: 2\n", encoding="utf-8")
    assert read_params(path)["thresholds"] == {"x": 2}


# -- 4. nested too deeply ---------------------------------------------------------------------


def test_a_deeply_nested_mutes_file_is_one_line(tmp_path):
    path = _mutes(tmp_path, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"mutes\.json: JSON nested too deeply"):
        read_mutes(path)


def test_a_deeply_nested_params_file_is_one_line(inputs, tmp_path, capsys):
    logs, secrets = inputs
    params = tmp_path / "p.yaml"
    params.write_text("a: " + "[" * 10_000 + "]" * 10_000 + "\n", encoding="utf-8")
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10"]
    args += ["--params", str(params), "--out", str(tmp_path / "reports"), "--quiet"]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert err == f"audit: error: {params}: parameters nested too deeply\n"


# -- 5. a secret typed into an option ---------------------------------------------------------


def _with_secret(tmp_path: Path, value: str) -> tuple[Path, Path]:
    logs = write_jsonl(tmp_path / "c.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    return logs, write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": value}]})


@pytest.mark.parametrize(
    "options",
    [
        lambda s: ["report", "--period", s],
        lambda s: ["report", "--period", "2026-10", "--timeout", s],
        lambda s: ["report", "--period", "2026-10", "--fail-on", s],
        lambda s: ["analyze", "--as-of", s],
        lambda s: ["analyze", "--as-of", s + "x" * 40],
    ],
)
@pytest.mark.parametrize("length", [38, 49])  # 49: longer than the 40 characters shown
def test_a_secret_typed_into_an_option_is_never_echoed(options, length, tmp_path, capsys):
    value = _secret()[:length]
    logs, secrets = _with_secret(tmp_path, value)
    command, *rest = options(value)
    args = [command, str(logs), "--secrets", str(secrets), *rest, "--out", str(tmp_path / "o")]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "[redacted]" in err
    assert value[:12] not in err  # not even the start of a secret cut short


def test_a_secret_given_with_an_equals_sign_is_cut_too(tmp_path, capsys):
    value = _secret()
    logs, secrets = _with_secret(tmp_path, value)
    args = ["report", str(logs), f"--secrets={secrets}", "--period", value]
    assert main([*args, "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err
    assert "period '[redacted]'" in err and value not in err


# -- 6. messages that name the right problem --------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-dev-zero"])
def test_a_special_file_given_as_a_log_is_not_a_regular_file(kind, tmp_path):
    path = _special(tmp_path, kind)
    with pytest.raises(InputError, match=rf"^{path}: not a regular file$"):
        load_captures([path])


def test_a_glob_lists_what_it_did_not_read(tmp_path):
    folder = tmp_path / "g"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [capture("{}")])
    os.mkfifo(folder / "f.jsonl")
    (folder / "d.jsonl").symlink_to(tmp_path / "nowhere")
    (folder / "z.jsonl").symlink_to("/dev/zero")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        caps = load_captures([str(folder / "*.jsonl")])
    assert caps.inputs["source"].tolist() == [str(folder / "a.jsonl")]
    (warning,) = [w for w in caught if issubclass(w.category, PathWarning)]
    text = str(warning.message)
    assert text.startswith("3 path(s) in the given folders or globs were not read: ")
    assert f"{folder / 'd.jsonl'} (dangling symlink)" in text
    assert f"{folder / 'f.jsonl'} (not a regular file)" in text
    assert f"{folder / 'z.jsonl'} (not a regular file)" in text


def test_an_output_file_under_a_file_says_it_is_not_a_folder(inputs, tmp_path, capsys):
    logs, secrets = inputs
    afile = tmp_path / "afile"
    afile.write_text("")
    args = ["verify", str(logs), "--secrets", str(secrets), "--out", str(afile / "o.csv")]
    assert main(args) == 3
    assert capsys.readouterr().err == f"audit: error: {afile}: not a folder (--out)\n"


@pytest.mark.parametrize("command", ["analyze", "report", "simulate"])
@pytest.mark.parametrize("out", ["/dev/null", "afile/below"])  # a file: click says so
def test_an_output_folder_that_cannot_be_one_is_refused_first(command, out, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    target = Path(out) if out.startswith("/") else tmp_path / out
    missing = str(tmp_path / "missing.jsonl")  # read first, it would be the error
    args = {
        "analyze": ["analyze", missing, "--secrets", str(tmp_path / "no.json")],
        "report": ["report", missing, "--secrets", "no.json", "--period", "2026-10"],
        "simulate": ["simulate"],
    }[command]
    assert main([*args, "--out", str(target)]) == 3
    err = capsys.readouterr().err
    shown = target if out != "afile/below" else target.parent
    assert f"audit: error: {shown}: not a folder (--out)" in err


# -- 7. records left out by --as-of -----------------------------------------------------------


def test_analyze_says_how_many_records_as_of_left_out(tmp_path, capsys):
    from audit.demo import simulate

    sim = simulate(tmp_path / "d", seed=3, days=7, incidents=20)
    base = ["analyze", str(sim.captures[0].parent), "--secrets", str(sim.secrets)]
    assert main([*base, "--out", str(tmp_path / "all")]) == 0
    everything = capsys.readouterr().out
    total = int(everything.split("records ", 1)[1].split(":", 1)[0])
    assert "left out" not in everything
    assert main([*base, "--as-of", "2026-10-03T00:00:00Z", "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    kept = int(printed.split("records ", 1)[1].split(":", 1)[0])
    assert 0 < kept < total
    line = f"left out: {total - kept} of {total} records, received after as_of"
    assert line in printed.splitlines()
