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


# --- ratio_test against intervals whose bootstrap variance is known exactly ---------------------------
#
# A repeat of a single step has no within-repeat spread, so the bootstrap over its side is the
# resampling of the repeats alone, whose distribution can be enumerated: three BASE repeats of
# 100 µs give every replicate log(100) (variance 0); two NEW repeats a and b give the median of
# two draws, a, b or (a + b) / 2 with probability 1/4, 1/4, 1/2.


def _two_draws_variance(a: float, b: float) -> float:
    """The exact variance of log(median of two draws with replacement from {a, b})."""
    values, weights = [math.log(a), math.log(b), math.log((a + b) / 2)], [0.25, 0.25, 0.5]
    mean = sum(w * v for w, v in zip(weights, values))
    return sum(w * (v - mean) ** 2 for w, v in zip(weights, values))


def test_ratio_interval_is_welch_t_times_the_corrected_bootstrap_error():
    """BASE: three repeats of 100 µs (no variance); NEW: two repeats of 190 and 210 µs. By hand:
    Welch-Satterthwaite with one variance 0 leaves the other side's R - 1 = 1 degree of freedom
    (not n1 + n2 - 2 = 3), and NEW's variance is the exact two-draw bootstrap variance times
    R / (R - 1) = 2. The 95% interval's half-width on log scale is t(0.975, 1) = 12.706 (the
    printed table) times that standard error; the bootstrap's percentile interval (within
    log(190/100) .. log(210/100)) is far narrower, so the t part is the interval. The bootstrap
    draws 2,000 resamples, so its variance is within a few percent of the exact one."""
    test = stats.ratio_test([[100.0]] * 3, [[190.0], [210.0]])
    assert test.ratio == pytest.approx(2.0)
    assert test.df == pytest.approx(1.0)  # n1 + n2 - 2 would be 3
    half = 12.706 * math.sqrt(_two_draws_variance(190, 210) * 2 / (2 - 1))
    assert math.log(test.high / test.ratio) == pytest.approx(half, rel=0.04)
    assert math.log(test.ratio / test.low) == pytest.approx(half, rel=0.04)
    # without R / (R - 1) it would be 1/sqrt(2) of this; with 3 degrees of freedom (t = 3.182), a quarter
    assert math.log(test.high / test.ratio) > 1.25 * half / math.sqrt(2)
    # the sides swapped: BASE's two repeats carry the variance and the degree of freedom, 0.5x
    back = stats.ratio_test([[190.0], [210.0]], [[100.0]] * 3)
    assert back.ratio == pytest.approx(0.5) and back.df == pytest.approx(1.0)
    assert math.log(back.high / back.ratio) == pytest.approx(half, rel=0.04)
    assert math.log(back.ratio / back.low) == pytest.approx(half, rel=0.04)


def test_ratio_p_value_tests_a_change_beyond_the_margin():
    """The p-value is of a change beyond the 5% margin: t = (|log ratio| - log 1.05) / se. A ratio of
    exactly 1.05 (NEW's repeats 100 and 110 µs: median 105 against 100) has t = 0 and p = 1
    whatever the noise; testing any change would give t = log 1.05 / se, p well below 1. For 2x
    (190 and 210 µs), by hand with t's one-degree CDF (Cauchy: 1/2 + atan(t) / pi) and the exact
    bootstrap variance: p = 1 - 2 atan(t) / pi, t = (log 2 - log 1.05) / se."""
    at_margin = stats.ratio_test([[100.0]] * 3, [[100.0], [110.0]])
    assert at_margin.ratio == pytest.approx(1.05)
    assert at_margin.p_value == pytest.approx(1.0, abs=1e-6)
    twice = stats.ratio_test([[100.0]] * 3, [[190.0], [210.0]])
    se = math.sqrt(_two_draws_variance(190, 210) * 2)
    t = (math.log(2) - math.log(1.05)) / se
    assert twice.p_value == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=0.03)  # any change: 7% lower


def test_the_90_percent_interval_reaches_the_bootstraps_percentile_where_it_is_wider():
    """BASE: three repeats of 1 µs; NEW: 21 single-step repeats, 11 of 1 µs and 10 of 2 µs, so the
    ratio is 1 (the median repeat is 1 µs). A resample of the 21 repeats has median 2 whenever it
    draws 11 or more of the 2 µs ones, P(Bin(21, 10/21) >= 11) ~ 0.41 > 5%, so the bootstrap's 95th
    percentile of the ratio is exactly 2: the 90% interval reaches 2.0. The t part alone (t(0.95, 20)
    = 1.725 times about 0.35 on log scale: ~1.83x) falls short of it. Mirrored (11 of 2 µs, 10 of
    1 µs: ratio 2), the bootstrap's 5th percentile is exactly 1."""
    up = stats.ratio_test([[1.0]] * 3, [[1.0]] * 11 + [[2.0]] * 10)
    assert up.ratio == 1.0 and up.df == pytest.approx(20)
    assert up.high90 == pytest.approx(2.0, rel=1e-12)
    assert up.high >= up.high90
    down = stats.ratio_test([[1.0]] * 3, [[2.0]] * 11 + [[1.0]] * 10)
    assert down.ratio == 2.0
    assert down.low90 == pytest.approx(1.0, rel=1e-12)
    assert down.low <= down.low90


def test_one_repeats_interval_comes_from_resampling_its_steps():
    """One repeat of steps 90, 100 and 110 µs: a resample of its three steps has median 90 when two
    or three draws are 90 (7/27), likewise 110 (7/27), else 100 (13/27). Both ends carry more than
    2.5%, so the 95% percentile interval is exactly [90, 110]. Three such repeats against three
    of 180, 200 and 220 µs: every repeat's median alike (the ratio 2), yet the steps within each
    repeat make the interval of the ratio strictly wider than [2, 2]."""
    one = stats.estimate([[90.0, 100.0, 110.0]])
    assert (one.value, one.repeats) == (100.0, 1)
    assert one.low == pytest.approx(90.0, rel=1e-12) and one.high == pytest.approx(110.0, rel=1e-12)
    test = stats.ratio_test([[90.0, 100.0, 110.0]] * 3, [[180.0, 200.0, 220.0]] * 3)
    assert test.ratio == pytest.approx(2.0)
    assert test.low < 1.9 and test.high > 2.1 and test.p_value is not None and test.p_value > 0


def test_swapping_the_sides_mirrors_the_interval_and_never_changes_the_verdict():
    """compare A B slower means compare B A faster: each side's bootstrap was seeded by its place
    (BASE `seed`, NEW `seed + 1`), and 1 of 400 simulated pairs read `slower` one way and
    `inconclusive` the other (a reviewer's)."""
    from profsweep.decide import ABOVE, BELOW, decide_test

    rng = np.random.default_rng(1)
    for _ in range(200):
        effect = 1 + 0.12 * rng.random()
        a = [list(rng.lognormal(0, 0.02, 20) * rng.lognormal(0, 0.05)) for _ in range(3)]
        b = [list(rng.lognormal(0, 0.02, 20) * rng.lognormal(0, 0.05) * effect) for _ in range(3)]
        there, back = stats.ratio_test(a, b), stats.ratio_test(b, a)
        assert there.low * back.high == pytest.approx(1, abs=1e-9)
        assert there.high * back.low == pytest.approx(1, abs=1e-9)
        assert there.low90 * back.high90 == pytest.approx(1, abs=1e-9)
        assert there.p_value == pytest.approx(back.p_value, abs=1e-12)
        mirrored = {ABOVE: BELOW, BELOW: ABOVE}
        one, other = decide_test(there, 3).outcome, decide_test(back, 3).outcome
        assert other == mirrored.get(one, one)
