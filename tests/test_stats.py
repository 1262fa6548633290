"""profsweep.stats against independent answers: Student's t tables, a hand computation of
Benjamini–Hochberg, and synthetic two-level samples whose true value is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from profsweep import stats


@pytest.mark.parametrize("df, t975", [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042), (1e6, 1.960)])
def test_t_quantiles_match_the_printed_table(df, t975):
    assert stats.t_quantile(0.975, df) == pytest.approx(t975, abs=1e-3)
    assert stats.t_cdf(t975, df) == pytest.approx(0.975, abs=1e-4)
    assert stats.t_cdf(-t975, df) == pytest.approx(0.025, abs=1e-4)


def test_t_with_one_degree_of_freedom_is_cauchy():
    for t in (-3.0, -0.5, 0.0, 0.7, 10.0):
        assert stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-10)


def test_benjamini_hochberg_equals_a_hand_computation():
    # sorted: .005 <= 1/5*.05, .01 <= 2/5*.05, .03 <= 3/5*.05, .04 <= 4/5*.05, .2 > .05
    assert stats.benjamini_hochberg([0.01, 0.04, 0.03, 0.005, 0.2], 0.05) == [True, True, True, True, False]
    # step-up: .03 > 1/2*.05 alone, but .04 <= 2/2*.05 takes both
    assert stats.benjamini_hochberg([0.04, 0.03], 0.05) == [True, True]
    assert stats.benjamini_hochberg([0.04, 0.06], 0.05) == [False, False]
    # untested cells (None) are not counted among the tests
    assert stats.benjamini_hochberg([None, 0.04, 0.06], 0.05) == [False, False, False]
    assert stats.benjamini_hochberg([None, 0.04], 0.05) == [False, True]


def _two_level(rng, repeats, steps, between=0.3, within=0.03, true=100.0):
    return [np.exp(np.log(true) + rng.normal(0, between) + rng.normal(0, within, steps)) for _ in range(repeats)]


def test_hierarchical_interval_covers_the_true_value_and_is_wider_than_the_step_level_one():
    rng = np.random.default_rng(1)
    covered = pooled_covered = wider = 0
    trials = 100
    for trial in range(trials):
        groups = _two_level(rng, repeats=5, steps=20)
        h = stats.estimate(groups, seed=trial)
        p = stats.estimate([np.concatenate(groups)], seed=trial)  # steps alone, as if one process
        covered += h.low <= 100.0 <= h.high
        pooled_covered += p.low <= 100.0 <= p.high
        wider += (h.high - h.low) > (p.high - p.low)
    assert covered >= 0.85 * trials
    assert pooled_covered <= 0.5 * trials
    assert wider == trials


@pytest.mark.parametrize("repeats", [2, 3])
def test_the_interval_keeps_its_coverage_with_few_repeats(repeats):
    """A percentile bootstrap over 2 or 3 processes covers the true value far less than 95% of
    the time; the widened interval does."""
    rng = np.random.default_rng(repeats)
    trials = 150
    covered = sum(
        (e := stats.estimate(_two_level(rng, repeats, 20, between=0.2), seed=t)).low <= 100.0 <= e.high
        for t in range(trials))
    assert covered >= 0.9 * trials


def test_dispersion_is_the_spread_of_log_medians_and_does_not_grow_with_repeats():
    assert stats.dispersion([[100.0], [200.0]]) == pytest.approx(math.log(2) / math.sqrt(2))
    assert stats.dispersion([[100.0]]) is None and stats.dispersion([[0.0], [1.0]]) is None
    rng = np.random.default_rng(5)
    few = [stats.dispersion(_two_level(rng, 3, 5, between=0.1)) for _ in range(200)]
    many = [stats.dispersion(_two_level(rng, 12, 5, between=0.1)) for _ in range(200)]
    assert abs(np.median(few) - np.median(many)) < 0.02  # both about the true 0.1


def test_estimate_is_the_median_of_the_repeats_medians():
    e = stats.estimate([[1, 2, 30], [4, 5, 6], [7, 8, 9]])
    assert e.value == 5 and e.repeats == 3 and e.spread == pytest.approx(8 / 2)
    assert e.low <= 5 <= e.high
    assert stats.estimate([[3.0]]) == stats.Estimate(3.0, 3.0, 3.0, 1, 1.0)
    assert stats.estimate([[], [None, float("nan")]]).value is None


def test_ratio_test_aa_planted_change_and_identical_samples():
    rng = np.random.default_rng(7)
    false, found, covered = 0, 0, 0
    for trial in range(100):
        base = _two_level(rng, 3, 20)
        same = _two_level(rng, 3, 20)
        quiet = _two_level(rng, 3, 20, between=0.1)
        doubled = _two_level(rng, 3, 20, true=200.0, between=0.1)
        aa = stats.ratio_test(base, same, seed=trial)
        false += aa.low > 1.05 or aa.high < 1 / 1.05
        planted = stats.ratio_test(quiet, doubled, seed=trial)
        covered += planted.low <= 2.0 <= planted.high
        found += planted.low > 1.05
    assert false <= 5 and covered >= 95 and found >= 80
    base = _two_level(rng, 3, 20)
    assert stats.ratio_test(base, [g[::-1] for g in base[::-1]]) == stats.RatioTest(1.0, 1.0, 1.0, 1.0, None,
                                                                                    "identical samples")
    one = stats.ratio_test(base[:1], doubled)
    assert one.ratio is not None and one.low is None and "1 vs 3 repeats" in one.why


def test_quantised_steps_are_those_that_waited_for_a_core():
    quiet = [100.0 + i for i in range(20)]
    assert not stats.quantised(quiet)
    busy = [100.0] * 10 + [4100.0, 8100.0, 4090.0]
    assert stats.slow_steps(busy) == 3 and stats.quantised(busy)
    assert not stats.quantised([100.0] * 10 + [4100.0])  # one slow step: a page fault, a GC pause
    big = [50_000.0, 53_500.0, 51_000.0, 54_000.0]  # 3.5 ms of jitter on 50 ms steps is not a wait
    assert not stats.quantised(big)
