"""The catalogue of controls (``controls.json`` beside this module) and parameter validation.

The catalogue is the one place a control's id, title, severity, rationale, remediation,
parameters (default and inclusive range) and links (``spec_ref``: the rule's section of the
service's webhook spec, ``docs_ref``: its entry in ``docs/controls.md``) are stated; the
runner, the mutes and the report read them from here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

import numpy as np

from audit.errors import InputError, ParameterError

__all__ = [
    "SEVERITIES",
    "Control",
    "load_catalogue",
    "parameter_ranges",
    "resolve_params",
]

#: Known severities, the most severe first. The one list: the runner orders findings by it and
#: the report's ``fail_on`` floor should read it from here.
SEVERITIES = ("critical", "high", "medium", "low", "info")

_CATALOGUE_KEYS = frozenset({"id", "title", "severity", "rationale", "remediation", "parameters"})
#: Links an entry may give (the probe's catalogue has none): non-empty strings when given.
_LINK_KEYS = frozenset({"spec_ref", "docs_ref"})


@dataclass(frozen=True)
class Control:
    """One entry of the catalogue."""

    id: str
    title: str
    severity: str
    rationale: str
    remediation: str
    parameters: Mapping[str, float]
    #: Inclusive ``(min, max)`` of each parameter; a bound the file leaves out is infinite.
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=lambda: MappingProxyType({}))
    #: The rule's section of the service's webhook spec, e.g. ``"spec 5.2 rules 4-5"``.
    spec_ref: str = ""
    #: The entry in the docs, e.g. ``"docs/controls.md#sig-01"`` (a file and an anchor).
    docs_ref: str = ""


_PARAMETER_KEYS = frozenset({"default", "min", "max"})


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def _parameter(name: str, spec: object, at: str) -> tuple[float, tuple[float, float]]:
    """``(default, (min, max))`` of ``{"default": n, "min": n, "max": n}`` (bounds optional)."""
    if not isinstance(spec, dict) or "default" not in spec or set(spec) - _PARAMETER_KEYS:
        raise InputError(
            f"{at}: parameter {name!r} must be an object with 'default' and optional 'min', 'max'"
        )
    if not _number(spec["default"]):
        raise InputError(f"{at}: parameter {name!r} must have a number as default")
    low, high = spec.get("min", -math.inf), spec.get("max", math.inf)
    if not (_number(low) and _number(high) and low <= spec["default"] <= high):
        raise InputError(f"{at}: parameter {name!r} needs numbers min <= default <= max")
    return spec["default"], (float(low), float(high))


def _catalogue_entry(item: object, at: str) -> Control:
    if not isinstance(item, dict):
        raise InputError(f"{at}: must be an object")
    if not _CATALOGUE_KEYS <= set(item) <= _CATALOGUE_KEYS | _LINK_KEYS:
        missing = sorted(_CATALOGUE_KEYS - set(item))
        extra = sorted(set(item) - _CATALOGUE_KEYS - _LINK_KEYS)
        raise InputError(f"{at}: missing field(s) {missing}, unknown field(s) {extra}")
    for key in sorted((_CATALOGUE_KEYS - {"parameters"}) | (_LINK_KEYS & set(item))):
        if not isinstance(item[key], str) or not item[key].strip():
            raise InputError(f"{at}: {key!r} must be a non-empty string")
    if item["severity"] not in SEVERITIES:
        raise InputError(
            f"{at}: severity {item['severity']!r} is not one of {', '.join(SEVERITIES)}"
        )
    params = item["parameters"]
    if not isinstance(params, dict):
        raise InputError(f"{at}: 'parameters' must be an object of name: {{default, min, max}}")
    parsed = {name: _parameter(name, spec, at) for name, spec in params.items()}
    return Control(
        id=item["id"],
        title=item["title"],
        severity=item["severity"],
        rationale=item["rationale"],
        remediation=item["remediation"],
        parameters=MappingProxyType({name: d for name, (d, _) in parsed.items()}),
        ranges=MappingProxyType({name: r for name, (_, r) in parsed.items()}),
        spec_ref=item.get("spec_ref", ""),
        docs_ref=item.get("docs_ref", ""),
    )


def load_catalogue(path: str | Path | None = None) -> dict[str, Control]:
    """Read and validate the catalogue of controls, in file order.

    Parameters
    ----------
    path
        A catalogue file; defaults to the ``controls.json`` shipped in the package.

    Returns
    -------
    dict of str to Control
        By id.

    Raises
    ------
    InputError
        One line naming the file and the entry: not a JSON list of objects, a missing or
        unknown field, an empty ``spec_ref`` or ``docs_ref`` (both optional), a duplicate id,
        an unknown severity (critical, high, medium, low, info), a parameter without a number
        as default, with a default outside its ``min``/``max``, or used by two controls.

    Examples
    --------
    >>> cat = load_catalogue()
    >>> cat["SIG-03"].severity, dict(cat["SIG-03"].parameters)
    ('medium', {'max_skew_p99_s': 60})
    >>> cat["SIG-01"].spec_ref, cat["SIG-01"].docs_ref
    ('spec 5.2 rules 4-5', 'docs/controls.md#sig-01')
    """
    where = "audit/findings/controls.json" if path is None else str(path)
    try:
        if path is None:
            text = resources.files("audit.findings").joinpath("controls.json").read_text("utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{where}: cannot read the catalogue ({type(e).__name__})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON (line {e.lineno}, column {e.colno})") from None
    if not isinstance(raw, list):
        raise InputError(f"{where}: the catalogue must be a JSON list of controls")
    out: dict[str, Control] = {}
    owner: dict[str, str] = {}
    for i, item in enumerate(raw, 1):
        control = _catalogue_entry(item, f"{where}: entry {i}")
        if control.id in out:
            raise InputError(f"{where}: entry {i}: duplicate id {control.id!r}")
        for name in control.parameters:
            if name in owner:
                raise InputError(
                    f"{where}: entry {i}: parameter {name!r} is also used by {owner[name]}"
                )
            owner[name] = control.id
        out[control.id] = control
    return out


def parameter_ranges(catalogue: Mapping[str, Control]) -> dict[str, tuple[float, float]]:
    """Inclusive ``(min, max)`` of every parameter of ``catalogue``, by name.

    >>> parameter_ranges(load_catalogue())["max_skew_p99_s"]
    (0.0, 300.0)
    """
    return {name: r for control in catalogue.values() for name, r in control.ranges.items()}


def resolve_params(
    catalogue: Mapping[str, Control], params: Mapping[str, float] | None
) -> dict[str, float]:
    """Catalogue defaults overridden by ``params``.

    Raises
    ------
    ParameterError
        One line: an unknown name (naming the known ones), or a value that is not a finite
        number within the parameter's ``min``/``max`` in the catalogue.

    Examples
    --------
    >>> resolve_params(load_catalogue(), {"ttt_median_h": 12})["ttt_median_h"]
    12.0
    """
    merged: dict[str, float] = {}
    for control in catalogue.values():
        merged.update(control.parameters)
    ranges = parameter_ranges(catalogue)
    for name, value in (params or {}).items():
        if name not in merged:
            raise ParameterError(f"unknown parameter {name!r}; known: {', '.join(sorted(merged))}")
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
            raise ParameterError(f"parameter {name!r} must be a number, not {value!r}")
        low, high = ranges[name]
        if not math.isfinite(float(value)) or not low <= float(value) <= high:
            raise ParameterError(f"parameter {name!r} must be in [{low:g}, {high:g}], not {value}")
        merged[name] = float(value)
    return merged
