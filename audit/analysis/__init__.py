"""Analysis: pure functions from verified deliveries to derived frames (no I/O, no clock).

- ``deliveries``: attempts inferred against the retry schedule; events and their outcomes.
- ``incidents``: incident state folded from valid events; status intervals.
- ``survival``: the generic Kaplan–Meier estimator (durations, censoring, quantiles).
- ``takedown``: incidents turned into takedown durations for ``survival``.
- ``subscriptions``: ``GET /webhooks`` listing snapshots.
- ``metrics``: the frames the figures draw (steps, daily rates, retry delays).
- ``analyze``: every table above in one call (:class:`~audit.analysis.analyze.Analysis`).
"""
