"""The controls, one module per family, found by name.

- ``base``: what every control sees (:class:`~audit.findings.controls.base.Scope`, the analysis
  frames cut to the period) and returns (:class:`~audit.findings.controls.base.Outcome`), and
  shared helpers.
- ``sig``, ``dlv``, ``sub``, ``tkd`` (any other module here is a family too): the controls.

A function ``<family>_<nn>`` defined in the module ``<family>`` implements the catalogue id
``<FAMILY>-<NN>`` (``sig_03`` is ``SIG-03``); nothing else registers it. :data:`CONTROLS` maps
every id found to its function; the runner (:mod:`audit.findings.runner`) looks ids up there,
and a test checks that it matches the catalogue both ways.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable

from audit.findings.controls.base import Outcome, Scope

__all__ = ["CONTROLS", "FAMILIES", "ControlFunction", "control_id"]

ControlFunction = Callable[[Scope], Outcome | list[Outcome]]

#: The family modules: every module of this package but ``base``.
FAMILIES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"))

_NAME = re.compile(r"([a-z]+)_(\d+)")


def control_id(function_name: str) -> str | None:
    """The catalogue id a function name implements, or None.

    >>> control_id("sig_03"), control_id("quantiles")
    ('SIG-03', None)
    """
    m = _NAME.fullmatch(function_name)
    return f"{m[1].upper()}-{m[2]}" if m else None


def _discover() -> dict[str, ControlFunction]:
    found: dict[str, ControlFunction] = {}
    for family in FAMILIES:
        module = importlib.import_module(f"{__name__}.{family}")
        for name, obj in vars(module).items():
            cid = control_id(name)
            if (
                cid is not None
                and name.startswith(f"{family}_")
                and inspect.isfunction(obj)
                and obj.__module__ == module.__name__
            ):
                found[cid] = obj
    return dict(sorted(found.items()))


#: The implementation of each id, found in the family modules.
CONTROLS: dict[str, ControlFunction] = _discover()
