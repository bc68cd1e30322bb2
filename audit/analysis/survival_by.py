"""Kaplan–Meier by group: durations split by a column, one curve per group, and one warning
naming every group too small to trust (the estimator is :mod:`audit.analysis.survival`)."""

from __future__ import annotations

import warnings

import pandas as pd

from audit.analysis.survival import (
    KM_COLUMNS,
    MISSING_GROUP,
    SMALL_SAMPLE_N,
    SmallSampleWarning,
    check_alpha,
    empty_km,
    kaplan_meier,
)
from audit.errors import ParameterError, SchemaError
from audit.redaction import scrub

__all__ = ["duration_groups", "kaplan_meier_by", "warn_small_groups"]


def duration_groups(durations: pd.DataFrame, by: str | None) -> list[tuple[str, pd.DataFrame]]:
    """``durations`` (with ``duration_s`` and ``observed``) split by ``by``, labels sorted.

    None gives one group ``"all"``; a missing value is labelled :data:`MISSING_GROUP`.
    """
    if not isinstance(durations, pd.DataFrame):
        raise SchemaError(f"durations must be a DataFrame, got {type(durations).__name__}")
    missing = [c for c in ("duration_s", "observed") if c not in durations.columns]
    if missing:
        raise SchemaError(f"durations lacks column(s): {', '.join(missing)}")
    if by is None:
        return [("all", durations)]
    if by not in durations.columns:
        raise ParameterError(f"cannot group by {by!r}: no such column")
    keys = durations[by].astype(object)
    keys = keys.where(keys.notna(), MISSING_GROUP).map(str)
    return [(str(k), g) for k, g in durations.groupby(keys, sort=True)]


def warn_small_groups(groups: list[tuple[str, pd.DataFrame]]) -> None:
    """One :class:`SmallSampleWarning` naming the groups with fewer than ``SMALL_SAMPLE_N`` rows:
    the first ten (each cut to 40 characters: names are incident data), then how many more.

    The warning points at the caller of the public function that called this one.
    """
    # known secrets cut before a name is shortened (a cut prefix would escape the scrubbing)
    small = [(scrub(name), len(g)) for name, g in groups if len(g) < SMALL_SAMPLE_N]
    if small:
        listed = ", ".join(
            f"{name if len(name) <= 40 else name[:39] + '…'!r} (n={n})" for name, n in small[:10]
        ) + (f" and {len(small) - 10} more" if len(small) > 10 else "")
        warnings.warn(
            f"fewer than {SMALL_SAMPLE_N} observations in group(s) {listed}: "
            "estimates are computed but imprecise",
            SmallSampleWarning,
            stacklevel=3,
        )


def _km_of(group: pd.DataFrame, alpha: float) -> pd.DataFrame:
    return kaplan_meier(group["duration_s"], group["observed"], alpha=alpha)


def kaplan_meier_by(
    durations: pd.DataFrame, by: str | None = None, *, alpha: float = 0.05
) -> pd.DataFrame:
    """Kaplan–Meier table per group (``group`` column first, then :data:`KM_COLUMNS`).

    Parameters
    ----------
    durations : pandas.DataFrame
        Has ``duration_s`` and ``observed`` (e.g. from :func:`takedown_durations`).
    by : str or None, default None
        Column to group by, e.g. ``"incident_class"`` or ``"source"``. None: one group "all".
        Group labels are strings; a missing value is labelled ``"(missing)"``.
    alpha : float, default 0.05
        ``1 - alpha`` is the confidence level.

    Returns
    -------
    pandas.DataFrame
        The :func:`kaplan_meier` rows of every group, groups in sorted order, times in
        seconds. Empty input gives an empty frame with these columns.

    Warns
    -----
    SmallSampleWarning
        When a group has fewer than :data:`SMALL_SAMPLE_N` observations.

    Examples
    --------
    >>> d = pd.DataFrame({"duration_s": [60.0, 120.0], "observed": [True, False],
    ...                   "source": ["api", "api"]})
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", SmallSampleWarning)
    ...     km = kaplan_meier_by(d, "source")
    >>> print(km[["group", "time", "survival"]].to_string(index=False))
    group  time  survival
      api  60.0       0.5
      api 120.0       0.5
    """
    alpha = check_alpha(alpha)
    groups = duration_groups(durations, by)
    warn_small_groups(groups)
    frames = [_km_of(g, alpha).assign(group=name) for name, g in groups]
    frames = [f for f in frames if len(f)]
    if not frames:
        out = empty_km().assign(group=pd.Series([], dtype="str"))
    else:
        out = pd.concat(frames, ignore_index=True)
    out = out[["group", *KM_COLUMNS]]
    out.attrs.update(alpha=alpha, conf_type="log-log")
    return out
