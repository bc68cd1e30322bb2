"""Survival analysis: Kaplan–Meier curves and quantiles with confidence limits (by group:
:mod:`audit.analysis.survival_by`).

Generic over time-to-event data given as ``(duration, observed)``: an observation that has not
had the event yet is right-censored (``observed`` False). :mod:`audit.analysis.takedown` turns
incidents
into such durations.

The estimator follows lifelines' design (time-to-event data as ``(duration, observed)``,
fitted results as plain frames, a warning for "computed, but be careful") without depending on
it, because lifelines pins pandas < 3.

Conventions
-----------
- :func:`kaplan_meier` returns one row per *distinct observed time* (event or censoring time);
  no synthetic time-0 row is added. ``S(t) = 1`` for every ``t`` before the first row.
- Ties: at a given time, events happen before censorings, so subjects censored at ``t`` are
  still at risk at ``t`` (the usual convention of R's ``survival``, Stata and lifelines).
- Confidence intervals are pointwise, from Greenwood's variance, on the ``log(-log S)`` scale
  by default (Kalbfleisch & Prentice; R ``survfit(conf.type="log-log")``, Stata ``sts list``,
  lifelines). ``conf_type="log"`` gives R's default ``log S`` interval instead.
- Where the interval is undefined: while ``S = 1`` (no event yet) Greenwood's variance is 0
  and both bounds are 1; where ``S = 0`` (the last subjects at risk all had the event) the
  lower bound is 0 and the upper bound is carried from the previous time (1 if there is
  none), so the band stays monotone and claims no precision the data cannot give.
- Quantiles (:func:`km_quantile`): the time at which ``S`` first drops to ``<= 1 - q``; the
  confidence limits are the times at which the lower and upper bands first drop to
  ``<= 1 - q`` (Brookmeyer & Crowley 1982, as R's ``quantile.survfit`` and lifelines).
  If ``S`` equals ``1 - q`` exactly over an interval, the *start* of the interval is taken
  (lifelines and older R); current R takes the midpoint to the next event time instead.
  Comparisons use a tolerance of ``1e-10`` so that rounding in the product does not decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
import pandas as pd

from audit.errors import ParameterError, SchemaError

__all__ = [
    "KM_COLUMNS",
    "MISSING_GROUP",
    "SMALL_SAMPLE_N",
    "KMQuantile",
    "SmallSampleWarning",
    "check_alpha",
    "empty_km",
    "kaplan_meier",
    "km_quantile",
]

KM_COLUMNS: tuple[str, ...] = (
    "time",
    "at_risk",
    "events",
    "censored",
    "survival",
    "ci_lower",
    "ci_upper",
)
"""Columns of :func:`kaplan_meier`'s frame, in order."""

SMALL_SAMPLE_N = 10
"""Groups with fewer observations than this get a :class:`SmallSampleWarning`."""

MISSING_GROUP = "(missing)"
"""Group label given to rows whose grouping value is missing."""
_TOL = 1e-10
_ConfType = Literal["log-log", "log"]


class SmallSampleWarning(UserWarning):
    """An estimate was computed from fewer than :data:`SMALL_SAMPLE_N` observations."""


# --------------------------------------------------------------------------------------------
# Kaplan–Meier
# --------------------------------------------------------------------------------------------


def empty_km() -> pd.DataFrame:
    """A Kaplan–Meier frame with no rows (:data:`KM_COLUMNS`, their dtypes)."""
    return pd.DataFrame(
        {
            "time": pd.Series([], dtype="float64"),
            "at_risk": pd.Series([], dtype="int64"),
            "events": pd.Series([], dtype="int64"),
            "censored": pd.Series([], dtype="int64"),
            "survival": pd.Series([], dtype="float64"),
            "ci_lower": pd.Series([], dtype="float64"),
            "ci_upper": pd.Series([], dtype="float64"),
        }
    )


def _as_durations(durations: object) -> np.ndarray:
    try:
        arr = np.asarray(durations)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"durations cannot be read as numbers: {exc}") from None
    if arr.ndim != 1:
        raise ParameterError(f"durations must be one-dimensional, got {arr.ndim} dimensions")
    if arr.dtype.kind == "b" or (arr.dtype.kind not in "iuf" and arr.size):
        raise ParameterError(f"durations must be numbers, got dtype {arr.dtype}")
    out = arr.astype("float64")
    if not np.isfinite(out).all():
        raise ParameterError(
            f"durations must be finite: {int((~np.isfinite(out)).sum())} are NaN or infinite"
        )
    if (out < 0).any():
        raise ParameterError(f"durations must be >= 0: {int((out < 0).sum())} are negative")
    return out


def _as_observed(observed: object) -> np.ndarray:
    try:
        arr = np.asarray(observed)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"observed cannot be read as booleans: {exc}") from None
    if arr.ndim != 1:
        raise ParameterError(f"observed must be one-dimensional, got {arr.ndim} dimensions")
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    if not arr.size:
        return arr.astype(bool)
    raise ParameterError(
        f"observed must be booleans (or integers 0/1), got dtype {arr.dtype}"
        + (" with other values" if arr.dtype.kind in "iu" else "")
    )


def check_alpha(alpha: object) -> float:
    """``alpha`` as a float strictly between 0 and 1, else a one-line :class:`ParameterError`."""
    return _fraction("alpha", alpha)


def _fraction(name: str, value: object) -> float:
    """``value`` (any object: a caller may have no type checker) as a float strictly between 0
    and 1, else a :class:`ParameterError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ParameterError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def kaplan_meier(
    durations: Sequence[float] | np.ndarray | pd.Series,
    observed: Sequence[bool] | np.ndarray | pd.Series,
    *,
    alpha: float = 0.05,
    conf_type: _ConfType = "log-log",
) -> pd.DataFrame:
    """Kaplan–Meier product-limit estimate of the survival function with pointwise CIs.

    Parameters
    ----------
    durations : array-like of float
        Time from start to event or censoring, finite and ``>= 0`` (any unit).
    observed : array-like of bool
        True where the event happened at ``durations[i]``, False where it was censored.
        Integers 0/1 are accepted.
    alpha : float, default 0.05
        ``1 - alpha`` is the confidence level of the pointwise intervals.
    conf_type : {"log-log", "log"}, default "log-log"
        Scale of the Greenwood interval: ``log(-log S)`` (Kalbfleisch & Prentice, bounds always in
        [0, 1]) or ``log S`` (R's default; upper bound clipped to 1).

    Returns
    -------
    pandas.DataFrame
        One row per distinct time, ascending, with columns ``time`` (float), ``at_risk``,
        ``events``, ``censored`` (int), ``survival``, ``ci_lower``, ``ci_upper`` (float).
        ``survival`` is ``S(t)`` just after ``time``; ``at_risk`` counts subjects at risk just
        before it. No time-0 row is added. An empty input gives an empty frame with these
        columns. ``df.attrs`` holds ``alpha`` and ``conf_type``.

    Raises
    ------
    ParameterError
        Lengths differ, a duration is negative, NaN or infinite, ``observed`` is not boolean,
        or ``alpha``/``conf_type`` is invalid.

    Examples
    --------
    >>> km = kaplan_meier([1.0, 2.0, 2.0, 3.0], [True, True, False, True])
    >>> print(km[["time", "at_risk", "events", "censored", "survival"]].to_string(index=False))
     time  at_risk  events  censored  survival
      1.0        4       1         0      0.75
      2.0        3       1         1      0.50
      3.0        1       1         0      0.00
    """
    alpha = check_alpha(alpha)
    if conf_type not in ("log-log", "log"):
        raise ParameterError(f"conf_type must be 'log-log' or 'log', got {conf_type!r}")
    t = _as_durations(durations)
    e = _as_observed(observed)
    if t.shape != e.shape:
        raise ParameterError(
            f"durations and observed differ in length ({t.shape[0]} and {e.shape[0]})"
        )
    n = t.shape[0]
    if n == 0:
        out = empty_km()
        out.attrs.update(alpha=alpha, conf_type=conf_type)
        return out

    times, inverse = np.unique(t, return_inverse=True)
    total = np.bincount(inverse, minlength=times.size)
    events = np.bincount(inverse[e], minlength=times.size)
    censored = total - events
    at_risk = n - np.concatenate(([0], np.cumsum(total)[:-1]))

    survival = np.cumprod(1.0 - events / at_risk)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Greenwood: Var(log S) = sum d / (n (n - d)); infinite once S reaches 0.
        term = np.where(events > 0, events / (at_risk * (at_risk - events)), 0.0)
    var_log_s = np.cumsum(term)

    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    inside = (survival > 0.0) & (survival < 1.0)
    lower = np.ones_like(survival)
    upper = np.ones_like(survival)
    s_in = survival[inside]
    se_log_s = np.sqrt(var_log_s[inside])
    if conf_type == "log-log":
        # log(-log S) +- z * se_log_s / |log S|, mapped back: S ** exp(+-z * sigma).
        sigma = se_log_s / -np.log(s_in)
        lower[inside] = np.power(s_in, np.exp(z * sigma))
        upper[inside] = np.power(s_in, np.exp(-z * sigma))
    else:
        lower[inside] = s_in * np.exp(-z * se_log_s)
        upper[inside] = np.minimum(1.0, s_in * np.exp(z * se_log_s))
    zero = survival <= 0.0
    if zero.any():
        lower[zero] = 0.0
        upper[zero] = np.nan
        upper = pd.Series(upper).ffill().fillna(1.0).to_numpy()

    out = pd.DataFrame(
        {
            "time": times,
            "at_risk": at_risk.astype("int64"),
            "events": events.astype("int64"),
            "censored": censored.astype("int64"),
            "survival": survival,
            "ci_lower": lower,
            "ci_upper": upper,
        }
    )
    out.attrs.update(alpha=alpha, conf_type=conf_type)
    return out


@dataclass(frozen=True)
class KMQuantile:
    """A quantile of the time-to-event distribution read off a Kaplan–Meier curve.

    Attributes
    ----------
    q : float
        Probability level: 0.5 is the median, 0.9 the time by which 90% had the event.
    time : float or None
        First time at which survival is ``<= 1 - q``; None when not reached.
    ci_lower, ci_upper : float or None
        Confidence limits (Brookmeyer–Crowley); None when the band never reaches ``1 - q``.
    reached : bool
        False when censoring leaves the curve above ``1 - q``.
    level : float or None
        Confidence level of the limits (e.g. 0.95), when the curve recorded it.
    """

    q: float
    time: float | None
    ci_lower: float | None
    ci_upper: float | None
    reached: bool
    level: float | None = None

    def describe(self, *, scale: float = 1.0, unit: str = "") -> str:
        """One line such as ``"median 23 (95% CI 13 to not reached)"``.

        Parameters
        ----------
        scale : float, default 1.0
            Multiplier applied to times before printing (``1 / 3600`` turns seconds to hours).
        unit : str, default ""
            Suffix printed after each time, e.g. ``" h"``.

        Examples
        --------
        >>> KMQuantile(0.5, 23.0, ci_lower=13.0, ci_upper=None, reached=True, level=0.95).describe(
        ...     unit=" weeks"
        ... )
        'median 23 weeks (95% CI 13 weeks to not reached)'
        """

        def fmt(v: float | None) -> str:
            return "not reached" if v is None else f"{v * scale:.4g}{unit}"

        name = "median" if math.isclose(self.q, 0.5) else f"p{self.q * 100:g}"
        ci = "CI" if self.level is None else f"{self.level * 100:g}% CI"
        return f"{name} {fmt(self.time)} ({ci} {fmt(self.ci_lower)} to {fmt(self.ci_upper)})"

    def __str__(self) -> str:
        return self.describe()


def _first_time_at_or_below(times: np.ndarray, curve: np.ndarray, target: float) -> float | None:
    hit = np.flatnonzero(curve <= target + _TOL)
    return None if hit.size == 0 else float(times[hit[0]])


def km_quantile(km: pd.DataFrame, q: float) -> KMQuantile:
    """Time by which a fraction ``q`` had the event, with its Brookmeyer–Crowley CI.

    Parameters
    ----------
    km : pandas.DataFrame
        A frame from :func:`kaplan_meier` (columns ``time``, ``survival``, ``ci_lower``,
        ``ci_upper``, ascending by time).
    q : float
        Strictly between 0 and 1: 0.5 for the median, 0.9 for p90.

    Returns
    -------
    KMQuantile
        ``time`` is the first time with ``survival <= 1 - q``; ``ci_lower`` / ``ci_upper`` are
        the first times at which the lower / upper band is ``<= 1 - q``. Each is None when the
        curve never gets there ("not reached"). If survival equals ``1 - q`` over an interval,
        the start of the interval is returned (see the module docstring).

    Examples
    --------
    >>> km = kaplan_meier([1, 2, 3, 4], [True, True, True, True])
    >>> km_quantile(km, 0.5).time
    2.0
    >>> km_quantile(kaplan_meier([5, 6], [False, False]), 0.5).reached
    False
    """
    q = _fraction("q", q)
    missing = [c for c in ("time", "survival", "ci_lower", "ci_upper") if c not in km.columns]
    if missing:
        raise SchemaError(f"km frame lacks column(s) {', '.join(missing)}; use kaplan_meier()")
    alpha = km.attrs.get("alpha")
    level = None if alpha is None else 1.0 - float(alpha)
    target = 1.0 - float(q)
    times = km["time"].to_numpy(dtype="float64")
    est = _first_time_at_or_below(times, km["survival"].to_numpy(dtype="float64"), target)
    low = _first_time_at_or_below(times, km["ci_lower"].to_numpy(dtype="float64"), target)
    up = _first_time_at_or_below(times, km["ci_upper"].to_numpy(dtype="float64"), target)
    return KMQuantile(
        q=float(q), time=est, ci_lower=low, ci_upper=up, reached=est is not None, level=level
    )
