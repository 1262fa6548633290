"""The one decision rule (profsweep.decide), against hand-worked intervals, and the processes it
says would decide an inconclusive ratio, checked by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from profsweep import stats
from profsweep.decide import ABOVE, BELOW, INCONCLUSIVE, MAX_PROCESSES, SAME, decide, processes_needed


@pytest.mark.parametrize("ratio,low,high,outcome", [
    (1.20, 1.10, 1.30, ABOVE),       # the whole interval past +5%
    (0.50, 0.30, 0.80, BELOW),
    (1.02, 0.97, 1.04, SAME),        # the whole interval inside ±5%
    (1.04, 0.90, 1.20, INCONCLUSIVE),
    (1.06, 1.04, 1.08, INCONCLUSIVE),  # past +5% by its value, not by its interval
    (1.051, 1.0501, 1.06, ABOVE),
    (0.94, 0.92, 0.96, INCONCLUSIVE),  # below -5% by its value, not by its interval (1/1.05 = 0.952)
    (0.90, 0.85, 0.95, BELOW),
])
def test_a_ratio_is_decided_by_its_interval_against_the_band(ratio, low, high, outcome):
    assert decide(ratio, low, high, 3).outcome == outcome


def test_the_band_is_a_setting():
    assert decide(1.08, 1.06, 1.10, 3).outcome == ABOVE
    assert decide(1.08, 1.06, 1.10, 3, band=0.10).outcome == SAME
    with pytest.raises(ValueError, match="band=1.5"):
        decide(1.0, 0.9, 1.1, 3, band=1.5)


def test_no_interval_decides_nothing():
    d = decide(2.0, None, None, 1)
    assert d.outcome == INCONCLUSIVE and "run.repeats=3" in d.need()


def test_a_ratio_on_the_band_edge_needs_more_than_any_sweep_runs():
    assert processes_needed(1.05, 1.0, 1.1, 3) > MAX_PROCESSES


def test_the_processes_needed_would_decide_at_the_spread_observed():
    """Simulate processes with a known spread (8% apart) and a true 1.15x: over 3 processes a side
    the ratio is mostly inconclusive; the processes each such draw says would decide it are, in
    the median, within 2x of the number at which simulated sweeps decide it half the time (13 to
    15 here)."""
    rng = np.random.default_rng(1)
    sd, true = 0.08, math.log(1.15)

    def side(center: float, n: int) -> list[list[float]]:
        return [[math.exp(center + rng.normal(0, sd))] for _ in range(n)]

    def decided_share(n: int, trials: int = 40) -> float:
        hits = 0
        for trial in range(trials):
            t = stats.ratio_test(side(0.0, n), side(true, n), seed=trial)
            hits += decide(t.ratio, t.low, t.high, n, df=t.df).decided
        return hits / trials

    needs = []
    for trial in range(30):
        t = stats.ratio_test(side(0.0, 3), side(true, 3), seed=trial)
        d = decide(t.ratio, t.low, t.high, 3, df=t.df)
        if not d.decided:
            needs.append(d.processes_needed)
    assert len(needs) >= 20  # three processes a side rarely decide a 15% change at 8% spread
    typical = sorted(needs)[len(needs) // 2]
    assert 6 <= typical <= 28, sorted(needs)
    # the estimate is of the median case, from a noisy spread: within 2x of what decides half the time
    assert decided_share(3) < 0.15 and decided_share(2 * typical) > 0.5


def test_same_is_two_one_sided_tests_at_5_percent():
    """`same` rests on the 90% interval where one is given (two one-sided tests at 5%), on the 95%
    one where not: [0.951, 1.051] leaves ±5% (1/1.05 = 0.952), its 90% interval [0.96, 1.04] does not."""
    inside = decide(1.0, 0.951, 1.051, 10, df=9, same=(0.96, 1.04))
    assert inside.outcome == SAME and "two one-sided tests" in inside.why and inside.equivalence == (0.96, 1.04)
    assert decide(1.0, 0.951, 1.051, 10, df=9, same=(0.95, 1.04)).outcome == INCONCLUSIVE
    assert decide(1.0, 0.951, 1.051, 10, df=9).outcome == INCONCLUSIVE  # no 90% interval: the 95% one decides
    assert decide(1.0, 0.96, 1.04, 10, df=9).equivalence is None  # the 95% interval within: no need of the 90%


def test_the_90_percent_interval_is_built_as_the_95_percent_one():
    """ratio_test's 90% interval lies inside its 95% one, around the ratio, and is narrower; with no
    spread at all (every process alike), both are the bootstrap's own."""
    rng = np.random.default_rng(3)
    narrower = 0
    for trial in range(20):
        base = [[math.exp(rng.normal(0, 0.05))] for _ in range(4)]
        new = [[math.exp(rng.normal(0.02, 0.05))] for _ in range(5)]
        t = stats.ratio_test(base, new, seed=trial)
        assert t.low <= t.low90 <= t.ratio <= t.high90 <= t.high
        narrower += t.high90 / t.low90 < t.high / t.low
    assert narrower == 20
    flat = stats.ratio_test([[1.0]] * 3, [[1.02]] * 3)
    assert flat.low90 == pytest.approx(1.02) and flat.high90 == pytest.approx(1.02)


def test_same_says_a_change_on_the_bands_edge_is_none_at_most_one_time_in_twenty():
    """Simulated processes 3% apart, 10 a side, a true change of exactly +5% (the band's edge):
    the test at 5% calls it `same` in at most 5% of sweeps (here with room for 200 draws); at a
    true 1.0 it calls most sweeps `same`."""
    rng = np.random.default_rng(7)

    def share(true: float, trials: int = 200) -> float:
        hits = 0
        for trial in range(trials):
            base = [[math.exp(rng.normal(0, 0.03))] for _ in range(10)]
            new = [[math.exp(math.log(true) + rng.normal(0, 0.03))] for _ in range(10)]
            t = stats.ratio_test(base, new, seed=trial, resamples=400)
            hits += decide(t.ratio, t.low, t.high, 10, df=t.df, same=(t.low90, t.high90)).outcome == SAME
        return hits / trials

    assert share(1.05) <= 0.08
    assert share(1.0) >= 0.5


def test_one_band_for_every_verdict_inside_using_band():
    """`--band` sets the band of every verdict of one command (compare, the conclusions, the
    claims, the expectations, the regime, history): decide and processes_needed without a band of
    their own take it, and it is undone after."""
    from profsweep.decide import current_band, using_band

    assert decide(1.03, 1.02, 1.04, 3).outcome == SAME
    with using_band(0.01):
        assert current_band() == 0.01
        assert decide(1.03, 1.02, 1.04, 3).outcome == ABOVE
        assert decide(1.03, 1.02, 1.04, 3, band=0.05).outcome == SAME  # a band given wins
        near = processes_needed(1.04, 1.01, 1.07, 3)  # 3% past the band's edge
    assert current_band() == 0.05 and decide(1.03, 1.02, 1.04, 3).outcome == SAME
    assert near < processes_needed(1.04, 1.01, 1.07, 3)  # 1% inside it: more processes to fit inside
    for bad in (1.5, -0.1, 0, 0.51, float("nan"), True):
        with pytest.raises(ValueError, match="is not allowed: give a fraction above 0 and at most 0.5"):
            with using_band(bad):
                pass
