"""findings.ocsf.json: every finding as an OCSF Compliance Finding, checked against copies of
the OCSF schema's own files (tests/data/ocsf, version 1.8.0: see its README)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

from audit.analysis.analyze import analyze
from audit.demo.simulate import simulate
from audit.findings import run_controls
from audit.findings.ocsf import CLASS_UID, OCSF_VERSION, ocsf_findings

SCHEMA = Path(__file__).parent / "data" / "ocsf"


def _read(name: str) -> dict:
    return json.loads((SCHEMA / name).read_text(encoding="utf-8"))


DICTIONARY = _read("dictionary.json")["attributes"]
EVENTS = {
    "base_event": _read("events/base_event.json"),
    "finding": _read("events/findings/finding.json"),
    "compliance_finding": _read("events/findings/compliance_finding.json"),
}


def _chain(name: str) -> list[dict]:
    """The class and its parents, the class first (``extends``)."""
    out = []
    while name:
        spec = EVENTS[name]
        out.append(spec)
        name = spec.get("extends", "")
    return out


def _object(name: str) -> list[dict]:
    """An object and its parents (``extends``), the object first."""
    out = []
    while name:
        spec = _read(f"objects/{name}.json")
        out.append(spec)
        name = spec.get("extends", "") if spec.get("extends") != name else ""
    return out


def _merged(chain: list[dict]) -> dict[str, dict]:
    """Attributes along a chain: a child's settings override its parent's, enums are merged
    with each other and with the dictionary's."""
    merged: dict[str, dict] = {}
    for spec in reversed(chain):  # the root first
        for key, attr in spec["attributes"].items():
            if key.startswith("$") or not isinstance(attr, dict):
                continue
            entry = merged.setdefault(key, {"enum": set(DICTIONARY.get(key, {}).get("enum", {}))})
            entry["enum"] |= set(attr.get("enum", {}))
            if "requirement" in attr:
                entry["requirement"] = attr["requirement"]
    return merged


CLASS = _merged(_chain("compliance_finding"))
#: Enums the schema's compiler derives from categories.json and the classes' uids.
DERIVED = {"category_uid", "class_uid", "type_uid"}
REQUIRED = sorted(k for k, a in CLASS.items() if a.get("requirement") == "required")


def test_the_schema_copy_is_the_compliance_finding_class():
    assert _read("version.json")["version"] == OCSF_VERSION
    category = EVENTS["finding"]["category"]
    uid = _read("categories.json")["attributes"][category]["uid"]
    assert (category, uid) == ("findings", 2)
    assert uid * 1000 + EVENTS["compliance_finding"]["uid"] == CLASS_UID == 2003
    # What the schema requires of the class (read above): at least these.
    expected = {"activity_id", "category_uid", "class_uid", "metadata", "severity_id", "time"}
    assert expected | {"type_uid", "finding_info", "compliance"} <= set(REQUIRED)


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    root = tmp_path_factory.mktemp("ocsf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = simulate(root / "demo", days=7, incidents=20)
        a = analyze(sim.captures, sim.secrets, snapshots=sim.snapshots)
    start, end = pd.Timestamp("2026-10-01", tz="UTC"), pd.Timestamp("2026-10-08", tz="UTC")
    findings = run_controls(a, period_start=start, period_end=end)
    # Statuses the demo lacks: a muted finding and a control that raised.
    extra = findings.iloc[:2].copy()
    extra["status"] = ["muted", "error"]
    extra.loc[extra.index[0], "evidence"] = json.dumps({"muted": {"original_status": "fail"}})
    findings = pd.concat([findings, extra], ignore_index=True)
    out = ocsf_findings(
        findings,
        run_id="20261108T000000Z-abc123",
        period="2026-10-01..2026-10-08",
        as_of=end,
        product_version="9.9",
    )
    return findings, out


def _check_object(kind: str, value: dict) -> list[str]:
    """What is wrong with an object value: a missing required attribute, a value outside an
    enum, a constraint ``at_least_one`` not met."""
    chain = _object(kind)
    attrs = _merged(chain)
    problems = [
        f"{kind}.{k} missing"
        for k, a in attrs.items()
        if a.get("requirement") == "required" and value.get(k) is None
    ]
    for k, v in value.items():
        enum = attrs.get(k, {}).get("enum")
        if enum and str(v) not in enum:
            problems.append(f"{kind}.{k}={v!r} not in {sorted(enum)}")
        if k not in attrs:
            problems.append(f"{kind}.{k} is not an attribute of {kind}")
    for spec in chain:
        one_of = spec.get("constraints", {}).get("at_least_one")
        if one_of and not any(value.get(k) is not None for k in one_of):
            problems.append(f"{kind}: none of {one_of}")
    return problems


def test_every_finding_carries_every_required_attribute_with_valid_enums(events):
    findings, out = events
    assert len(out) == len(findings) > 20
    for event in out:
        missing = [k for k in REQUIRED if event.get(k) is None]
        assert missing == [], event["finding_info"]["uid"]
        for key, value in event.items():
            assert key in CLASS, f"{key} is not an attribute of the class"
            enum = CLASS[key]["enum"]
            if enum and key not in DERIVED:
                assert str(value) in enum, (key, value)
        # The uids the schema derives (its files give only the base event's 0):
        assert (event["category_uid"], event["class_uid"]) == (2, CLASS_UID)
        assert event["type_uid"] == event["class_uid"] * 100 + event["activity_id"]
        assert isinstance(event["time"], int)
        problems = _check_object("metadata", event["metadata"])
        problems += _check_object("product", event["metadata"]["product"])
        problems += _check_object("finding_info", event["finding_info"])
        problems += _check_object("compliance", event["compliance"])
        problems += _check_object("remediation", event["remediation"])
        for resource in event["resources"]:
            problems += _check_object("resource_details", resource)
        assert problems == []
    json.dumps(out, allow_nan=False)  # plain JSON


def test_events_say_what_the_findings_say(events):
    findings, out = events
    for row, event in zip(findings.to_dict(orient="records"), out, strict=True):
        assert event["finding_info"]["uid"] == row["finding_uid"]
        assert event["compliance"]["control"] == row["check_id"]
        assert event["compliance"]["requirements"] == [row["spec_ref"]]
        assert event["remediation"]["references"] == [row["docs_ref"]]
        assert event["resources"] == [{"name": row["resource"]}]
    by_status = {r["status"]: e for r, e in zip(findings.to_dict("records"), out, strict=True)}
    assert by_status["fail"]["compliance"]["status_id"] == 3
    assert by_status["pass"]["compliance"]["status_id"] == 1
    muted = by_status["muted"]
    assert (muted["status_id"], muted["status"]) == (3, "Suppressed")
    assert muted["compliance"]["status"] == "Fail"  # the original verdict
    rows = findings.to_dict("records")
    severities = {r["severity"]: e["severity_id"] for r, e in zip(rows, out, strict=True)}
    assert severities["critical"] == 5 and severities["medium"] == 3
    # as_of 2026-10-08T00:00Z in ms (date -d 2026-10-08T00:00Z +%s: 1791417600)
    assert {e["time"] for e in out} == {1791417600000}
