"""The catalogue of controls (``audit/controls.json``) and the validation of parameters."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType

import numpy as np

from audit.errors import InputError, ParameterError

__all__ = ["PARAMETER_RANGES", "SEVERITIES", "Control", "load_catalogue", "resolve_params"]

#: Known severities, the most severe first.
SEVERITIES = ("critical", "high", "medium", "low", "info")

#: Inclusive range of every parameter of the catalogue.
PARAMETER_RANGES: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "max_skew_p99_s": (0.0, 300.0),
        "max_secret_age_days": (0.0, 3650.0),
        "max_slow_ack_rate": (0.0, 1.0),
        "min_first_attempt_success": (0.0, 1.0),
        "max_emission_latency_s": (0.0, math.inf),
        "ttt_median_h": (0.0, math.inf),
        "ttt_p90_h": (0.0, math.inf),
        "max_client_wait_h": (0.0, math.inf),
        "max_silence_days": (0.0, math.inf),
    }
)

_CATALOGUE_KEYS = frozenset({"id", "title", "severity", "rationale", "remediation", "parameters"})


@dataclass(frozen=True)
class Control:
    """One entry of the catalogue."""

    id: str
    title: str
    severity: str
    rationale: str
    remediation: str
    parameters: Mapping[str, float]


def _catalogue_entry(item: object, at: str) -> Control:
    if not isinstance(item, dict):
        raise InputError(f"{at}: must be an object")
    if set(item) != _CATALOGUE_KEYS:
        missing = sorted(_CATALOGUE_KEYS - set(item))
        extra = sorted(set(item) - _CATALOGUE_KEYS)
        raise InputError(f"{at}: missing field(s) {missing}, unknown field(s) {extra}")
    for key in sorted(_CATALOGUE_KEYS - {"parameters"}):
        if not isinstance(item[key], str) or not item[key].strip():
            raise InputError(f"{at}: {key!r} must be a non-empty string")
    if item["severity"] not in SEVERITIES:
        raise InputError(
            f"{at}: severity {item['severity']!r} is not one of {', '.join(SEVERITIES)}"
        )
    params = item["parameters"]
    if not isinstance(params, dict):
        raise InputError(f"{at}: 'parameters' must be an object of name: default")
    for name, default in params.items():
        if isinstance(default, bool) or not isinstance(default, int | float):
            raise InputError(f"{at}: parameter {name!r} must have a number as default")
    return Control(
        id=item["id"],
        title=item["title"],
        severity=item["severity"],
        rationale=item["rationale"],
        remediation=item["remediation"],
        parameters=MappingProxyType(dict(params)),
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
        unknown field, a duplicate id, an unknown severity (critical, high, medium, low,
        info), a parameter without a number as default or used by two controls.

    Examples
    --------
    >>> cat = load_catalogue()
    >>> cat["SIG-03"].severity, dict(cat["SIG-03"].parameters)
    ('medium', {'max_skew_p99_s': 60})
    """
    where = "audit/controls.json" if path is None else str(path)
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


def resolve_params(
    catalogue: Mapping[str, Control], params: Mapping[str, float] | None
) -> dict[str, float]:
    """Catalogue defaults overridden by ``params``.

    Raises
    ------
    ParameterError
        One line: an unknown name (naming the known ones), or a value that is not a finite
        number within :data:`PARAMETER_RANGES`.

    Examples
    --------
    >>> resolve_params(load_catalogue(), {"ttt_median_h": 12})["ttt_median_h"]
    12.0
    """
    merged: dict[str, float] = {}
    for control in catalogue.values():
        merged.update(control.parameters)
    for name, value in (params or {}).items():
        if name not in merged:
            raise ParameterError(f"unknown parameter {name!r}; known: {', '.join(sorted(merged))}")
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
            raise ParameterError(f"parameter {name!r} must be a number, not {value!r}")
        low, high = PARAMETER_RANGES.get(name, (-math.inf, math.inf))
        if not math.isfinite(float(value)) or not low <= float(value) <= high:
            raise ParameterError(f"parameter {name!r} must be in [{low:g}, {high:g}], not {value}")
        merged[name] = float(value)
    return merged
