"""The compliance controls, one module per concern.

- ``catalogue``: reading and validating ``audit/controls.json``; parameter defaults and ranges.
- ``base``: what every control sees (:class:`~audit.controls.base.Scope`, the analysis frames
  cut to the period) and returns (:class:`~audit.controls.base.Outcome`), and shared helpers.
- ``sig``, ``dlv``, ``sub``, ``tkd``: the controls of each family.
- ``mutes``: reading a mutes file and applying it to findings.

The public entry point is :mod:`audit.checks`, which registers the controls by id, runs them and
turns their outcomes into finding rows.
"""
