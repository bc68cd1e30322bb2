"""Run an ``audit`` command with one piece of speed machinery turned off, to measure its gain.

Usage::

    OFF=side python benchmarks/without.py report --store STORE --period 2026-10 ...
    OFF=trim python benchmarks/without.py report --store STORE --period 2026-10 ...

``OFF=side``: the incident fold is not run in a forked process beside the deliveries' read
(``audit.analysis.analyze.read_store``); ``OFF=trim``: no ``malloc_trim`` in the report
(``audit.memory.release_free_memory``); unset: as shipped. For no workers at all, set
``AUDIT_JOBS=1`` instead. Time each kind alternated, e.g. ``/usr/bin/time -f "%e s %M KB"``,
and keep a piece only if its gain is at least 15% of the figure it serves (``docs/scale.md``).
"""

from __future__ import annotations

import os
import sys

import audit.analysis.analyze
import audit.report.compute
import audit.report.pipeline
from audit.console import script

OFF = os.environ.get("OFF", "")


def _nothing(*_args: object, **_kwargs: object) -> None:
    return None


if OFF == "side":
    audit.analysis.analyze.aside = _nothing  # type: ignore[assignment]  # the switch measured
elif OFF == "trim":
    audit.report.compute.release_free_memory = _nothing  # type: ignore[assignment]  # measured
    audit.report.pipeline.release_free_memory = _nothing  # type: ignore[assignment]  # measured
elif OFF:
    raise SystemExit(f"OFF={OFF!r}: give side or trim")

if __name__ == "__main__":
    sys.argv[0] = "audit"
    sys.exit(script())
