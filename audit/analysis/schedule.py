"""The published retry schedule (spec section 6) as the attempt-numbering rule.

An attempt's number is inferred from the delay since the previous observed attempt of the same
event: the smallest later number whose scheduled delay matches within a :class:`Tolerance`
(see :func:`audit.analysis.deliveries.infer_attempts`). Pure numpy; no I/O, no clock.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from audit.errors import ParameterError
from audit.spec import MAX_ATTEMPTS, RETRY_DELAYS_S

__all__ = ["AttemptNumbers", "Tolerance", "expected_delay", "number_attempts"]


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


#: The schedule's delays between attempt ``a`` and a later ``b`` (``_SCHEDULE[a, b]``).
_SCHEDULE = np.full((MAX_ATTEMPTS + 1, MAX_ATTEMPTS + 1), np.nan)
for _a in range(1, MAX_ATTEMPTS + 1):
    for _b in range(_a + 1, MAX_ATTEMPTS + 1):
        _SCHEDULE[_a, _b] = expected_delay(_a, _b)
#: Below this many rows at one position, the rest of the rows are numbered one by one.
_FEW = 64


class AttemptNumbers(NamedTuple):
    """What :func:`number_attempts` infers, one value per row (a group's first row: attempt 1,
    no delay, expected delay 0, on schedule)."""

    #: The attempt number.
    attempt_no: npt.NDArray[np.int64]
    #: Seconds since the group's row before (NaN for a first row).
    delay_s: npt.NDArray[np.float64]
    #: The scheduled delay matched, else that to the next attempt (NaN past the last one).
    expected_delay_s: npt.NDArray[np.float64]
    #: Whether a scheduled delay matched within the tolerance.
    on_schedule: npt.NDArray[np.bool_]


def number_attempts(
    t: npt.NDArray[np.float64], first: npt.NDArray[np.bool_], tol: Tolerance
) -> AttemptNumbers:
    """Attempt numbers of rows sorted by group then time (``first`` marks a group's first row;
    ``t`` in seconds), by the rule of :func:`audit.analysis.deliveries.infer_attempts`.

    Each row depends only on the row before it in its group, so all the second rows are
    numbered at once, then all the third rows, and so on; when few rows remain at a position
    (one event delivered very many times), the rest are numbered one by one.
    """
    n = len(t)
    out = AttemptNumbers(
        np.ones(n, dtype=np.int64), np.full(n, np.nan), np.zeros(n), np.ones(n, dtype=bool)
    )
    no, delay, expected, ok = out
    starts = np.flatnonzero(first)
    position = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))
    by_position = np.argsort(position, kind="stable")
    bounds = np.searchsorted(position[by_position], np.arange(1, position.max(initial=0) + 2))
    allowed = np.vectorize(tol, otypes=[float])(np.nan_to_num(_SCHEDULE))  # tol(e) per cell
    for p in range(1, len(bounds)):
        rows = by_position[bounds[p - 1] : bounds[p]]
        if len(rows) < _FEW:
            _number_one_by_one(np.sort(by_position[bounds[p - 1] :]), t, out, tol)
            break
        d = t[rows] - t[rows - 1]
        prev = no[rows - 1]
        a = np.minimum(prev, MAX_ATTEMPTS)  # past the last attempt: no number matches
        got = np.zeros(len(rows), dtype=np.int64)
        for k in range(2, MAX_ATTEMPTS + 1):  # the smallest number whose delay matches
            e = _SCHEDULE[a, k]
            hit = (got == 0) & (prev < k) & (np.abs(d - e) <= allowed[a, k])
            got[hit] = k
        found = got > 0
        fallback = np.where(
            prev < MAX_ATTEMPTS, _SCHEDULE[a, np.minimum(prev + 1, MAX_ATTEMPTS)], np.nan
        )
        no[rows] = np.where(found, got, prev + 1)
        e_found = _SCHEDULE[a, np.maximum(got, 1)]
        expected[rows] = np.where(found, e_found, fallback)
        ok[rows] = found
        delay[rows] = d
    return out


def _number_one_by_one(
    rows: npt.NDArray[np.intp], t: npt.NDArray[np.float64], out: AttemptNumbers, tol: Tolerance
) -> None:
    """:func:`number_attempts` for the rows left (ascending), each after the one before it,
    written into ``out``."""
    no, delay, expected, ok = out
    for j in rows.tolist():
        prev_no = int(no[j - 1])
        d = t[j] - t[j - 1]
        got, exp, hit = prev_no + 1, math.nan, False
        for k in range(prev_no + 1, MAX_ATTEMPTS + 1):
            e = expected_delay(prev_no, k)
            if abs(d - e) <= tol(e):
                got, exp, hit = k, e, True
                break
        if not hit and prev_no < MAX_ATTEMPTS:
            exp = expected_delay(prev_no, prev_no + 1)
        no[j], delay[j], expected[j], ok[j] = got, d, exp, hit
