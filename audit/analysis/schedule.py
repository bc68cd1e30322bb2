"""The published retry schedule (spec section 6) as the attempt-numbering rule.

An attempt's number is inferred from the delay since the previous observed attempt of the same
event: the smallest later number whose scheduled delay matches within a :class:`Tolerance`
(see :func:`audit.analysis.deliveries.infer_attempts`), written as expressions an engine runs
(:func:`next_attempt`); no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from audit.errors import ParameterError
from audit.spec import MAX_ATTEMPTS, RETRY_DELAYS_S

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = ["NextAttempt", "Tolerance", "expected_delay", "next_attempt"]


class Tolerance:
    """How far an observed retry delay may be from the schedule: ``max(floor_s, share * expected)``.

    >>> Tolerance()(600)
    60.0
    >>> Tolerance()(30)
    10.0
    """

    def __init__(self, floor_s: float = 10.0, share: float = 0.10) -> None:
        if floor_s < 0 or share < 0:
            raise ParameterError("tolerance floor and share must be non-negative")
        self.floor_s, self.share = float(floor_s), float(share)

    def __call__(self, expected_s: float) -> float:
        return max(self.floor_s, self.share * expected_s)


def expected_delay(from_attempt: int, to_attempt: int) -> float:
    """Scheduled time between attempt ``from_attempt`` and a later ``to_attempt`` (seconds).

    >>> expected_delay(1, 2), expected_delay(1, 3), expected_delay(1, 5)
    (30.0, 150.0, 4350.0)
    """
    return float(sum(RETRY_DELAYS_S[from_attempt:to_attempt]))


def next_attempt(prev: ir.IntegerValue, delay: ir.FloatingValue, tol: Tolerance) -> NextAttempt:
    """The rule for one observed attempt after attempt ``prev`` of its event, ``delay`` seconds
    later, as expressions: the smallest later number whose scheduled delay from ``prev``
    matches within ``tol``; when none does, the next number (``found`` false, ``expected`` the
    delay to it, missing past the last attempt).

    Written once for every engine (:mod:`audit.analysis.engine`): one ``CASE`` on ``prev``
    per output, a branch per attempt number of the schedule.
    """
    import ibis  # start-up: only an analysis needs it

    no, found, expected = [], [], []
    for a in range(1, MAX_ATTEMPTS + 1):
        matches = []
        for k in range(a + 1, MAX_ATTEMPTS + 1):
            e = expected_delay(a, k)
            matches.append(((delay - e).abs() <= tol(e), k, e))
        after = expected_delay(a, a + 1) if a < MAX_ATTEMPTS else None
        if not matches:  # past the last attempt: no number matches
            no.append((a, ibis.literal(a + 1, "int64")))
            found.append((a, ibis.literal(False)))
            expected.append((a, ibis.literal(None, "float64")))
            continue
        no.append((a, ibis.cases(*[(c, k) for c, k, _ in matches], else_=a + 1)))
        found.append((a, ibis.or_(*[c for c, _, _ in matches])))
        expected.append(
            (a, ibis.cases(*[(c, e) for c, _, e in matches], else_=ibis.literal(after, "float64")))
        )
    return NextAttempt(
        prev.cases(*no, else_=prev + 1).cast("int64"),
        prev.cases(*found, else_=False),
        prev.cases(*expected, else_=ibis.literal(None, "float64")).cast("float64"),
    )


class NextAttempt(NamedTuple):
    """What :func:`next_attempt` infers of one attempt, as expressions."""

    #: The attempt number.
    attempt_no: ir.IntegerValue
    #: Whether a scheduled delay matched within the tolerance.
    found: ir.BooleanValue
    #: The scheduled delay matched, else that to the next attempt (NULL past the last one).
    expected_delay_s: ir.FloatingValue
