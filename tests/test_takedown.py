"""Tests for audit.analysis.survival (Kaplan–Meier estimates, quantiles) and
audit.analysis.takedown (durations).

Known answers come from outside the code under test:

* The 6-MP arm of the Freireich et al. (1963) leukaemia remission trial (Blood 21:699-716),
  remission time in weeks, ``+`` = censored:
  6, 6, 6, 6+, 7, 9+, 10, 10+, 11+, 13, 16, 17+, 19+, 20+, 22, 23, 25+, 32+, 32+, 34+, 35+.
  It has tied events (three at 6) and events tied with censorings (6 and 10).
* Kaplan–Meier estimates and Greenwood standard errors: J. P. Klein & M. L. Moeschberger,
  *Survival Analysis: Techniques for Censored and Truncated Data*, 2nd ed., Springer 2003,
  Example 4.1, Table 4.1A (product-limit estimator for the 6-MP group).
* Intervals on the log scale (R's default ``conf.type="log"``): R ``survival`` package,
  ``summary(survfit(Surv(t2, relapse) ~ 1, data = KMsurv::drug6mp))`` (the same K&M
  data set), as printed in the public course note "Ch4 KM estimator" (Li-Hsin Chien, 2024).
* Intervals on the log(-log) scale and the Brookmeyer–Crowley quantile limits: lifelines
  0.30.3 (with pandas 2.3.3, numpy 2.4.6), run in a throwaway venv outside the repository::

      python3 -m venv /tmp/llvenv && /tmp/llvenv/bin/pip install lifelines 'pandas<3'
      /tmp/llvenv/bin/python -c '
      from lifelines import KaplanMeierFitter
      from lifelines.utils import median_survival_times, qth_survival_times
      T = [6,6,6,6,7,9,10,10,11,13,16,17,19,20,22,23,25,32,32,34,35]
      E = [1,1,1,0,1,0,1,0,0,1,1,0,0,0,1,1,0,0,0,0,0]
      k = KaplanMeierFitter().fit(T, E)
      print(k.event_table, k.survival_function_, k.confidence_interval_)
      print(k.median_survival_time_, median_survival_times(k.confidence_interval_))
      print(k.percentile(0.75), qth_survival_times(0.75, k.confidence_interval_))
      print(k.percentile(0.10), qth_survival_times(0.10, k.confidence_interval_))'

  lifelines' ``KaplanMeierFitter`` uses Greenwood's variance on the log(-log) scale.
  (lifelines differs from audit.analysis.takedown in two documented conventions, neither of which
  the
  6-MP data exercises: a curve exactly equal to 1 - q, and the band where S reaches 0.)

Small cases marked "by hand" were worked out on paper from the product-limit definition.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.analysis.survival import (
    KM_COLUMNS,
    KMQuantile,
    SmallSampleWarning,
    kaplan_meier,
    km_quantile,
)
from audit.analysis.survival_by import kaplan_meier_by
from audit.analysis.takedown import EXCLUSION_REASONS, takedown_durations, takedown_summary
from audit.errors import ParameterError, SchemaError

Z95 = 1.959963984540054  # standard normal 0.975 quantile

MP6_T = [6, 6, 6, 6, 7, 9, 10, 10, 11, 13, 16, 17, 19, 20, 22, 23, 25, 32, 32, 34, 35]
MP6_E = [1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]

# Klein & Moeschberger (2003), Table 4.1A: event time -> (S(t), Greenwood standard error).
KM_TABLE_4_1A = {
    6: (0.857, 0.076),
    7: (0.807, 0.087),
    10: (0.753, 0.096),
    13: (0.690, 0.107),
    16: (0.627, 0.114),
    22: (0.538, 0.128),
    23: (0.448, 0.135),
}

# R survival, summary(survfit(...)) with the default conf.type="log": time -> (lower, upper).
R_LOG_CI = {
    6: (0.720, 1.000),
    7: (0.653, 0.996),
    10: (0.586, 0.968),
    13: (0.510, 0.935),
    16: (0.439, 0.896),
    22: (0.337, 0.858),
    23: (0.249, 0.807),
}

# lifelines 0.30.3 (command in the module docstring): every distinct time ->
# (at_risk, events, censored, survival, lower 0.95, upper 0.95).
LIFELINES_6MP = {
    6: (21, 3, 1, 0.8571428571, 0.6197179553, 0.9515517476),
    7: (17, 1, 0, 0.8067226891, 0.5631465646, 0.9228090192),
    9: (16, 0, 1, 0.8067226891, 0.5631465646, 0.9228090192),
    10: (15, 1, 1, 0.7529411765, 0.5031995108, 0.8893618352),
    11: (13, 0, 1, 0.7529411765, 0.5031995108, 0.8893618352),
    13: (12, 1, 0, 0.6901960784, 0.4316102225, 0.8490659633),
    16: (11, 1, 0, 0.6274509804, 0.3675108560, 0.8049121895),
    17: (10, 0, 1, 0.6274509804, 0.3675108560, 0.8049121895),
    19: (9, 0, 1, 0.6274509804, 0.3675108560, 0.8049121895),
    20: (8, 0, 1, 0.6274509804, 0.3675108560, 0.8049121895),
    22: (7, 1, 0, 0.5378151261, 0.2677789368, 0.7467907176),
    23: (6, 1, 0, 0.4481792717, 0.1880520060, 0.6801426285),
    25: (5, 0, 1, 0.4481792717, 0.1880520060, 0.6801426285),
    32: (4, 0, 2, 0.4481792717, 0.1880520060, 0.6801426285),
    34: (2, 0, 1, 0.4481792717, 0.1880520060, 0.6801426285),
    35: (1, 0, 1, 0.4481792717, 0.1880520060, 0.6801426285),
}


def utc(s: str) -> pd.Timestamp:
    return pd.Timestamp(s, tz="UTC")


# --------------------------------------------------------------------------------------------
# Kaplan–Meier: published 6-MP example
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def km6() -> pd.DataFrame:
    return kaplan_meier(MP6_T, np.array(MP6_E, dtype=bool))


def test_columns_are_exactly_the_declared_ones(km6: pd.DataFrame) -> None:
    assert list(km6.columns) == list(KM_COLUMNS)
    assert km6["at_risk"].dtype == "int64"
    assert km6["survival"].dtype == "float64"


def test_6mp_survival_matches_klein_moeschberger_table_4_1a(km6: pd.DataFrame) -> None:
    by_time = km6.set_index("time")
    for t, (s_pub, _) in KM_TABLE_4_1A.items():
        assert by_time.loc[t, "survival"] == pytest.approx(s_pub, abs=5e-4)


def test_6mp_greenwood_standard_error_matches_table_4_1a(km6: pd.DataFrame) -> None:
    # With conf_type="log" the lower bound is S * exp(-z * se(log S)), and Greenwood's standard
    # error of S is S * se(log S): recover it from the bound and compare with the book.
    km_log = kaplan_meier(MP6_T, MP6_E, conf_type="log").set_index("time")
    for t, (_, se_pub) in KM_TABLE_4_1A.items():
        s, lower = km_log.loc[t, "survival"], km_log.loc[t, "ci_lower"]
        se = s * (-math.log(lower / s) / Z95)
        assert se == pytest.approx(se_pub, abs=5e-4)


def test_6mp_log_interval_matches_r_survfit_default() -> None:
    km_log = kaplan_meier(MP6_T, MP6_E, conf_type="log").set_index("time")
    for t, (lo, up) in R_LOG_CI.items():
        assert km_log.loc[t, "ci_lower"] == pytest.approx(lo, abs=5e-4)
        assert km_log.loc[t, "ci_upper"] == pytest.approx(up, abs=5e-4)


def test_6mp_full_table_with_log_log_interval_matches_lifelines(km6: pd.DataFrame) -> None:
    assert km6["time"].tolist() == [float(t) for t in LIFELINES_6MP]
    for row in km6.itertuples(index=False):
        at_risk, events, censored, s, lo, up = LIFELINES_6MP[int(row.time)]
        assert (row.at_risk, row.events, row.censored) == (at_risk, events, censored)
        assert row.survival == pytest.approx(s, abs=1e-9)
        assert row.ci_lower == pytest.approx(lo, abs=1e-9)
        assert row.ci_upper == pytest.approx(up, abs=1e-9)


def test_6mp_median_and_its_limits_match_lifelines(km6: pd.DataFrame) -> None:
    med = km_quantile(km6, 0.5)
    assert (med.time, med.ci_lower, med.ci_upper, med.reached) == (23.0, 13.0, None, True)
    assert str(med) == "median 23 (95% CI 13 to not reached)"


def test_6mp_first_quartile_has_both_limits(km6: pd.DataFrame) -> None:
    # lifelines: percentile(0.75) = 13, qth_survival_times(0.75, ci) = (6, 22).
    q25 = km_quantile(km6, 0.25)
    assert (q25.time, q25.ci_lower, q25.ci_upper) == (13.0, 6.0, 22.0)


def test_6mp_p90_is_not_reached(km6: pd.DataFrame) -> None:
    p90 = km_quantile(km6, 0.9)
    assert p90 == KMQuantile(0.9, None, None, None, False, 0.95)
    assert p90.describe() == "p90 not reached (95% CI not reached to not reached)"


def test_6mp_log_scale_median_lower_limit_follows_r_table() -> None:
    # From R's printed log-scale band: lower 0.510 at 13 (> 0.5), 0.439 at 16 (<= 0.5).
    med = km_quantile(kaplan_meier(MP6_T, MP6_E, conf_type="log"), 0.5)
    assert (med.time, med.ci_lower, med.ci_upper) == (23.0, 16.0, None)


# --------------------------------------------------------------------------------------------
# Kaplan–Meier: edge cases worked by hand
# --------------------------------------------------------------------------------------------


def test_no_censoring_is_the_empirical_survival_function() -> None:
    # By hand: 5 subjects, events at 1, 1, 3, 4, 5 -> S = 3/5, 2/5, 1/5, 0.
    km = kaplan_meier([3.0, 1.0, 4.0, 1.0, 5.0], [True] * 5)
    assert km["time"].tolist() == [1.0, 3.0, 4.0, 5.0]
    assert km["at_risk"].tolist() == [5, 3, 2, 1]
    assert km["events"].tolist() == [2, 1, 1, 1]
    assert km["censored"].tolist() == [0, 0, 0, 0]
    assert km["survival"].tolist() == pytest.approx([0.6, 0.4, 0.2, 0.0], abs=1e-15)


def test_log_log_bound_by_hand_for_first_step() -> None:
    # By hand at t=1 above: S = 0.6, Greenwood var(log S) = 2 / (5 * 3) = 2/15,
    # sigma = sqrt(2/15) / -ln 0.6 = 0.714827..., bounds 0.6 ** exp(+-1.959964 * sigma).
    km = kaplan_meier([3.0, 1.0, 4.0, 1.0, 5.0], [True] * 5)
    sigma = math.sqrt(2 / 15) / -math.log(0.6)
    assert km.loc[0, "ci_lower"] == pytest.approx(0.6 ** math.exp(Z95 * sigma), abs=1e-12)
    assert km.loc[0, "ci_upper"] == pytest.approx(0.6 ** math.exp(-Z95 * sigma), abs=1e-12)
    assert km.loc[0, "ci_lower"] == pytest.approx(0.12575, abs=1e-4)
    assert km.loc[0, "ci_upper"] == pytest.approx(0.88176, abs=1e-4)


def test_survival_zero_keeps_lower_zero_and_carries_upper() -> None:
    km = kaplan_meier([3.0, 1.0, 4.0, 1.0, 5.0], [True] * 5)
    last, before = km.iloc[-1], km.iloc[-2]
    assert last["survival"] == 0.0
    assert last["ci_lower"] == 0.0
    assert last["ci_upper"] == before["ci_upper"]


def test_events_come_before_censorings_at_a_tied_time() -> None:
    # By hand: at t=2 four are at risk, one event, two censored -> S = 3/4; the censored ones
    # leave after t=2, so at t=3 one is at risk and its event gives S = 0.
    # (Censoring first would give S(2) = 1/2.)
    km = kaplan_meier([2.0, 2.0, 2.0, 3.0], [True, False, False, True])
    assert km["at_risk"].tolist() == [4, 1]
    assert km["events"].tolist() == [1, 1]
    assert km["censored"].tolist() == [2, 0]
    assert km["survival"].tolist() == [0.75, 0.0]


def test_all_censored_curve_stays_at_one_and_median_is_not_reached() -> None:
    km = kaplan_meier([5.0, 2.0, 9.0], [False, False, False])
    assert km["survival"].tolist() == [1.0, 1.0, 1.0]
    assert km["ci_lower"].tolist() == [1.0, 1.0, 1.0]
    assert km["ci_upper"].tolist() == [1.0, 1.0, 1.0]
    med = km_quantile(km, 0.5)
    assert med.reached is False
    assert med.time is None
    assert "not reached" in med.describe()


def test_single_event() -> None:
    km = kaplan_meier([4.0], [True])
    assert km.to_dict("records") == [
        {
            "time": 4.0,
            "at_risk": 1,
            "events": 1,
            "censored": 0,
            "survival": 0.0,
            "ci_lower": 0.0,
            "ci_upper": 1.0,
        }
    ]
    med = km_quantile(km, 0.5)
    assert (med.time, med.ci_lower, med.ci_upper) == (4.0, 4.0, None)


def test_single_censored_observation() -> None:
    km = kaplan_meier([4.0], [False])
    assert km[["at_risk", "events", "censored", "survival"]].iloc[0].tolist() == [1, 0, 1, 1.0]
    assert km_quantile(km, 0.5).reached is False


def test_empty_input_gives_empty_frame() -> None:
    km = kaplan_meier([], [])
    assert list(km.columns) == list(KM_COLUMNS)
    assert len(km) == 0
    assert km_quantile(km, 0.5) == KMQuantile(0.5, None, None, None, False, 0.95)


def test_survival_exactly_one_minus_q_takes_start_of_flat_part() -> None:
    # By hand: 4 events at 1, 2, 3, 4 -> S(2) = 0.5 exactly until 3; the documented
    # convention returns 2 (R's quantile.survfit would return the midpoint 2.5).
    km = kaplan_meier([1, 2, 3, 4], [True] * 4)
    assert km_quantile(km, 0.5).time == 2.0


def test_integer_zero_one_observed_is_accepted(km6: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(kaplan_meier(MP6_T, MP6_E), km6)
    pd.testing.assert_frame_equal(
        kaplan_meier(pd.Series(MP6_T), pd.Series(MP6_E).astype(bool)), km6
    )


def test_zero_durations_are_allowed() -> None:
    km = kaplan_meier([0.0, 0.0, 1.0], [True, False, True])
    assert km["time"].tolist() == [0.0, 1.0]
    assert km["survival"].tolist() == pytest.approx([2 / 3, 0.0])


def test_wider_level_gives_wider_interval() -> None:
    k95 = kaplan_meier(MP6_T, MP6_E)
    k99 = kaplan_meier(MP6_T, MP6_E, alpha=0.01)
    assert (k99["ci_lower"] <= k95["ci_lower"]).all()
    assert (k99["ci_upper"] >= k95["ci_upper"]).all()
    assert (k99["ci_lower"] < k95["ci_lower"]).any()
    assert km_quantile(k99, 0.5).level == pytest.approx(0.99)


@pytest.mark.parametrize(
    ("durations", "observed", "kwargs", "fragment"),
    [
        ([1.0, 2.0], [True], {}, "differ in length"),
        ([1.0, -2.0], [True, True], {}, "negative"),
        ([1.0, float("nan")], [True, True], {}, "finite"),
        ([1.0, float("inf")], [True, True], {}, "finite"),
        (["1", "2"], [True, True], {}, "numbers"),
        ([True, False], [True, True], {}, "numbers"),
        ([[1.0, 2.0]], [[True, True]], {}, "one-dimensional"),
        ([1.0, 2.0], [0.5, 1.0], {}, "booleans"),
        ([1.0, 2.0], [2, 1], {}, "booleans"),
        ([1.0, 2.0], ["yes", "no"], {}, "booleans"),
        ([1.0, 2.0], [True, None], {}, "booleans"),
        ([1.0, 2.0], [True, True], {"alpha": 0.0}, "alpha"),
        ([1.0, 2.0], [True, True], {"alpha": 1.5}, "alpha"),
        ([1.0, 2.0], [True, True], {"conf_type": "plain"}, "conf_type"),
    ],
)
def test_invalid_input_is_a_one_line_parameter_error(
    durations: object, observed: object, kwargs: dict, fragment: str
) -> None:
    with pytest.raises(ParameterError, match=fragment) as info:
        kaplan_meier(durations, observed, **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("q", [0, 1, 1.5, -0.1, True, "0.5"])
def test_quantile_rejects_bad_q(km6: pd.DataFrame, q: object) -> None:
    with pytest.raises(ParameterError, match="q must be"):
        km_quantile(km6, q)  # type: ignore[arg-type]


def test_quantile_rejects_a_frame_without_km_columns() -> None:
    with pytest.raises(SchemaError, match="survival"):
        km_quantile(pd.DataFrame({"time": [1.0]}), 0.5)


def test_describe_scales_and_labels() -> None:
    res = KMQuantile(0.9, 7200.0, 3600.0, None, True, 0.95)
    assert res.describe(scale=1 / 3600, unit=" h") == "p90 2 h (95% CI 1 h to not reached)"


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

_durations = st.lists(st.integers(0, 30).map(float), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_property_curve_and_band_are_well_formed(data: st.DataObject) -> None:
    t = data.draw(_durations)
    e = data.draw(st.lists(st.booleans(), min_size=len(t), max_size=len(t)))
    km = kaplan_meier(t, e)
    s, lo, up = km["survival"], km["ci_lower"], km["ci_upper"]
    assert (s.diff().dropna() <= 0).all()
    assert ((s >= 0) & (s <= 1)).all()
    assert ((lo >= 0) & (up <= 1)).all()
    assert (lo <= s).all() and (s <= up).all()
    assert (lo.diff().dropna() <= 0).all() and (up.diff().dropna() <= 0).all()
    assert int(km["events"].sum()) == sum(e)
    assert int(km["events"].sum() + km["censored"].sum()) == len(t)
    assert km["at_risk"].iloc[0] == len(t)
    leaving = (km["events"] + km["censored"]).to_numpy()
    assert (km["at_risk"].to_numpy()[1:] == km["at_risk"].to_numpy()[:-1] - leaving[:-1]).all()
    for q in (0.25, 0.5, 0.9):
        res = km_quantile(km, q)
        if res.reached:
            assert res.ci_lower is not None and res.ci_lower <= res.time
            assert res.ci_upper is None or res.time <= res.ci_upper


@settings(max_examples=150, deadline=None)
@given(t=_durations)
def test_property_without_censoring_survival_is_fraction_beyond(t: list[float]) -> None:
    km = kaplan_meier(t, [True] * len(t))
    arr = np.array(t)
    for time, s in zip(km["time"], km["survival"], strict=True):
        assert s == pytest.approx(float((arr > time).mean()), abs=1e-12)


# --------------------------------------------------------------------------------------------
# Durations from the incidents table
# --------------------------------------------------------------------------------------------

AS_OF = utc("2024-03-10 00:00")


def incidents(rows: list[dict]) -> pd.DataFrame:
    defaults = {
        "incident_class": "phishing",
        "source": "api",
        "created_at": utc("2024-03-01 00:00"),
        "burn_started_at": pd.NaT,
        "takedown_at": pd.NaT,
        "closed_at": pd.NaT,
    }
    df = pd.DataFrame([{**defaults, **r} for r in rows])
    for c in ("created_at", "burn_started_at", "takedown_at", "closed_at"):
        df[c] = pd.to_datetime(df[c], utc=True)
    return df


def test_taken_down_incident_is_an_event() -> None:
    inc = incidents([{"incident_id": "a", "takedown_at": utc("2024-03-01 05:30")}])
    d, counts, excluded = takedown_durations(inc, as_of=AS_OF)
    assert d.loc[0, "duration_s"] == 5.5 * 3600
    assert bool(d.loc[0, "observed"]) is True
    assert d.loc[0, "end_at"] == utc("2024-03-01 05:30")
    assert counts == dict.fromkeys(EXCLUSION_REASONS, 0)
    assert len(excluded) == 0


def test_open_incident_is_censored_at_as_of() -> None:
    d, _, _ = takedown_durations(incidents([{"incident_id": "a"}]), as_of=AS_OF)
    assert d.loc[0, "end_at"] == AS_OF
    assert d.loc[0, "duration_s"] == 9 * 86400
    assert bool(d.loc[0, "observed"]) is False


def test_closed_without_takedown_is_censored_at_closed_at() -> None:
    inc = incidents([{"incident_id": "a", "closed_at": utc("2024-03-02 00:00")}])
    d, _, _ = takedown_durations(inc, as_of=AS_OF)
    assert d.loc[0, "end_at"] == utc("2024-03-02 00:00")
    assert d.loc[0, "duration_s"] == 86400
    assert bool(d.loc[0, "observed"]) is False


def test_closed_after_as_of_is_censored_at_as_of() -> None:
    inc = incidents([{"incident_id": "a", "closed_at": utc("2024-03-20 00:00")}])
    d, _, _ = takedown_durations(inc, as_of=AS_OF)
    assert d.loc[0, "end_at"] == AS_OF
    assert bool(d.loc[0, "observed"]) is False


def test_takedown_after_as_of_is_not_known_yet() -> None:
    inc = incidents(
        [
            {"incident_id": "a", "takedown_at": utc("2024-03-12 00:00")},
            {
                "incident_id": "b",
                "takedown_at": utc("2024-03-12 00:00"),
                "closed_at": utc("2024-03-05 00:00"),
            },
        ]
    )
    d, counts, _ = takedown_durations(inc, as_of=AS_OF)
    assert d["observed"].tolist() == [False, False]
    assert d["end_at"].tolist() == [AS_OF, utc("2024-03-05 00:00")]
    assert sum(counts.values()) == 0


def test_takedown_exactly_at_as_of_is_observed() -> None:
    inc = incidents([{"incident_id": "a", "takedown_at": AS_OF}])
    d, _, _ = takedown_durations(inc, as_of=AS_OF)
    assert bool(d.loc[0, "observed"]) is True


def test_burn_start_option_measures_from_burn_started_at() -> None:
    inc = incidents(
        [
            {
                "incident_id": "a",
                "burn_started_at": utc("2024-03-01 02:00"),
                "takedown_at": utc("2024-03-01 03:00"),
            },
            {"incident_id": "b", "takedown_at": utc("2024-03-01 03:00")},
        ]
    )
    created = takedown_durations(inc, as_of=AS_OF)
    assert created.durations["duration_s"].tolist() == [3 * 3600, 3 * 3600]
    burn = takedown_durations(inc, as_of=AS_OF, start="burn")
    assert burn.durations["incident_id"].tolist() == ["a"]
    assert burn.durations["duration_s"].tolist() == [3600]
    assert burn.durations["start_at"].tolist() == [utc("2024-03-01 02:00")]
    assert burn.exclusions["no_start"] == 1
    assert burn.excluded[["incident_id", "reason"]].to_dict("records") == [
        {"incident_id": "b", "reason": "no_start"}
    ]


def test_exclusions_are_counted_and_returned_with_reasons() -> None:
    inc = incidents(
        [
            {"incident_id": "ok", "takedown_at": utc("2024-03-01 01:00")},
            {"incident_id": "neg", "takedown_at": utc("2024-02-28 00:00")},
            {"incident_id": "neg-closed", "closed_at": utc("2024-02-28 00:00")},
            {"incident_id": "nostart", "created_at": pd.NaT},
            {"incident_id": "future", "created_at": utc("2024-03-11 00:00")},
            {"incident_id": "dup"},
            {"incident_id": "dup", "takedown_at": utc("2024-03-01 01:00")},
        ]
    )
    d, counts, excluded = takedown_durations(inc, as_of=AS_OF)
    assert d["incident_id"].tolist() == ["ok"]
    assert counts == {
        "duplicate_incident_id": 2,
        "no_start": 1,
        "start_after_as_of": 1,
        "negative_duration": 2,
    }
    assert len(d) + len(excluded) == len(inc)
    assert (
        excluded["incident_id"].tolist() == ["neg", "neg-closed", "nostart", "future"] + ["dup"] * 2
    )
    assert excluded["reason"].tolist() == [
        "negative_duration",
        "negative_duration",
        "no_start",
        "start_after_as_of",
        "duplicate_incident_id",
        "duplicate_incident_id",
    ]
    assert set(inc.columns) < set(excluded.columns)


def test_output_columns_and_dtypes() -> None:
    d, _, _ = takedown_durations(incidents([{"incident_id": "a"}]), as_of=AS_OF)
    assert list(d.columns) == [
        "incident_id",
        "incident_class",
        "source",
        "start_at",
        "end_at",
        "duration_s",
        "observed",
    ]
    assert d["duration_s"].dtype == "float64"
    assert d["observed"].dtype == bool
    assert str(d["end_at"].dt.tz) == "UTC"


def test_non_utc_as_of_is_the_same_instant() -> None:
    inc = incidents([{"incident_id": "a"}])
    a = takedown_durations(inc, as_of=AS_OF).durations
    b = takedown_durations(inc, as_of=AS_OF.tz_convert("Europe/Paris")).durations
    pd.testing.assert_frame_equal(a, b)


def test_naive_as_of_is_rejected() -> None:
    with pytest.raises(ParameterError, match="timezone-aware"):
        takedown_durations(incidents([{"incident_id": "a"}]), as_of=pd.Timestamp("2024-03-10"))


@pytest.mark.parametrize("as_of", ["not a time", None])
def test_unreadable_as_of_is_rejected(as_of: object) -> None:
    with pytest.raises(ParameterError, match="as_of"):
        takedown_durations(incidents([{"incident_id": "a"}]), as_of=as_of)  # type: ignore[arg-type]


def test_unknown_start_is_rejected() -> None:
    with pytest.raises(ParameterError, match="start"):
        takedown_durations(incidents([{"incident_id": "a"}]), as_of=AS_OF, start="closed")  # type: ignore[arg-type]


def test_missing_column_is_a_schema_error() -> None:
    inc = incidents([{"incident_id": "a"}]).drop(columns=["closed_at"])
    with pytest.raises(SchemaError, match="closed_at"):
        takedown_durations(inc, as_of=AS_OF)


def test_naive_timestamp_column_is_a_schema_error() -> None:
    inc = incidents([{"incident_id": "a"}])
    inc["created_at"] = inc["created_at"].dt.tz_localize(None)
    with pytest.raises(SchemaError, match="created_at"):
        takedown_durations(inc, as_of=AS_OF)


def test_empty_incidents_give_empty_durations() -> None:
    inc = incidents([{"incident_id": "a"}]).iloc[0:0]
    d, counts, excluded = takedown_durations(inc, as_of=AS_OF)
    assert len(d) == 0 and len(excluded) == 0
    assert sum(counts.values()) == 0


# --------------------------------------------------------------------------------------------
# Per group and summary
# --------------------------------------------------------------------------------------------


def mp6_durations(hours_per_week: float = 1.0) -> pd.DataFrame:
    """The 6-MP data as takedown durations, one week read as ``hours_per_week`` hours."""
    return pd.DataFrame(
        {
            "duration_s": [t * hours_per_week * 3600.0 for t in MP6_T],
            "observed": [bool(e) for e in MP6_E],
            "incident_class": ["phishing"] * 11 + ["malware"] * 10,
            "source": ["api"] * 21,
        }
    )


def test_km_by_none_is_the_whole_sample() -> None:
    d = mp6_durations()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        out = kaplan_meier_by(d, None)
    assert list(out.columns) == ["group", *KM_COLUMNS]
    assert set(out["group"]) == {"all"}
    expected = kaplan_meier(d["duration_s"], d["observed"])
    pd.testing.assert_frame_equal(out.drop(columns="group"), expected, check_like=False)


def test_km_by_group_equals_km_of_each_subset() -> None:
    d = mp6_durations()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        out = kaplan_meier_by(d, "incident_class")
    assert out["group"].unique().tolist() == ["malware", "phishing"]
    for name, sub in d.groupby("incident_class"):
        got = out[out["group"] == name].drop(columns="group").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, kaplan_meier(sub["duration_s"], sub["observed"]))


def test_small_group_warns() -> None:
    d = mp6_durations()
    d.loc[:2, "source"] = "email"
    with pytest.warns(SmallSampleWarning, match="'email' \\(n=3\\)"):
        kaplan_meier_by(d, "source")
    with pytest.warns(SmallSampleWarning, match="'email'"):
        takedown_summary(d, "source")


def test_missing_group_value_is_labelled() -> None:
    d = mp6_durations()
    d["incident_class"] = d["incident_class"].astype(object)
    d.loc[0, "incident_class"] = None
    with pytest.warns(SmallSampleWarning):
        s = takedown_summary(d, "incident_class")
    assert s["group"].tolist() == ["(missing)", "malware", "phishing"]
    assert s["n"].tolist() == [1, 10, 10]


def test_bad_group_column_is_rejected() -> None:
    with pytest.raises(ParameterError, match="nope"):
        kaplan_meier_by(mp6_durations(), "nope")


def test_durations_frame_without_columns_is_rejected() -> None:
    with pytest.raises(SchemaError, match="observed"):
        takedown_summary(pd.DataFrame({"duration_s": [1.0]}))


def test_summary_in_hours_with_not_reached() -> None:
    # One 6-MP week read as one hour: median 23 h (CI 13 h to not reached), p90 not reached.
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        s = takedown_summary(mp6_durations())
    row = s.iloc[0]
    assert row["group"] == "all"
    assert (row["n"], row["events"], row["censored"]) == (21, 9, 12)
    assert row["median_h"] == pytest.approx(23.0)
    assert row["median_ci_lower_h"] == pytest.approx(13.0)
    assert math.isnan(row["median_ci_upper_h"])
    assert bool(row["median_reached"]) is True
    assert math.isnan(row["p90_h"]) and bool(row["p90_reached"]) is False
    assert math.isnan(row["p90_ci_lower_h"]) and math.isnan(row["p90_ci_upper_h"])
    assert s["median_reached"].dtype == bool and s["n"].dtype == "int64"


def test_summary_scales_seconds_to_hours() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        s = takedown_summary(mp6_durations(hours_per_week=24.0))
    assert s.loc[0, "median_h"] == pytest.approx(23 * 24.0)


def test_summary_of_nothing() -> None:
    empty = mp6_durations().iloc[0:0]
    with pytest.warns(SmallSampleWarning):
        s = takedown_summary(empty)
    assert s["n"].tolist() == [0]
    assert s["median_reached"].tolist() == [False]
    assert len(takedown_summary(empty, "source")) == 0
    assert len(kaplan_meier_by(empty, "source")) == 0


def test_end_to_end_from_incidents() -> None:
    inc = incidents(
        [
            {"incident_id": f"i{k}", "takedown_at": utc("2024-03-01 00:00") + pd.Timedelta(hours=k)}
            for k in range(1, 13)
        ]
    )
    d, _, _ = takedown_durations(inc, as_of=AS_OF)
    s = takedown_summary(d)
    # By hand: 12 events at 1..12 h -> S(6 h) = 0.5, S(11 h) = 1/12 <= 0.1 < S(10 h) = 1/6.
    assert s.loc[0, "median_h"] == pytest.approx(6.0)
    assert s.loc[0, "p90_h"] == pytest.approx(11.0)


def test_group_column_dtype_does_not_depend_on_emptiness() -> None:
    d = mp6_durations()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallSampleWarning)
        full = (kaplan_meier_by(d, "source"), takedown_summary(d, "source"))
        empty = (kaplan_meier_by(d.iloc[0:0], "source"), takedown_summary(d.iloc[0:0], "source"))
    for a, b in zip(full, empty, strict=True):
        pd.testing.assert_series_equal(a.dtypes, b.dtypes)


@pytest.mark.parametrize(
    "name", ["audit.analysis.survival", "audit.analysis.survival_by", "audit.analysis.takedown"]
)
def test_all_is_complete(name: str) -> None:
    import importlib

    mod = importlib.import_module(name)

    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name)
    public = {
        n
        for n, v in vars(mod).items()
        if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__
    }
    assert public <= set(mod.__all__)


def test_the_small_groups_warning_names_ten_and_counts_the_rest():
    # Class names are incident data: 1,000 small classes made a 5.7 KB warning line.
    import warnings

    from audit.analysis.survival_by import warn_small_groups

    one = pd.DataFrame({"duration_s": [1.0]})
    groups = [(f"class{i:03d}", one) for i in range(25)] + [("x" * 500, one)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_small_groups(groups)
    (message,) = [str(w.message) for w in caught]
    assert "'class000' (n=1)" in message and "'class009' (n=1)" in message
    assert "class010" not in message and "and 16 more" in message
    assert len(message) < 400
