"""The model per series (profsweep.fit): synthetic points with a known floor and throughput, a
misfit found, and, end to end, a custom step that spins for a known time plus a matmul."""

from __future__ import annotations

import math

import numpy as np
import pytest

from profsweep.fit import fit_series
from profsweep.decide import ABOVE, BELOW

A, B = 20.0, 1e-4  # a 20 µs floor; 1e-4 µs a FLOP: 10 GFLOP/s
SIZES = [16, 64, 256, 1024, 4096]
WORK = [2 * n**3 for n in SIZES]


def _points(t, rel=0.03):
    return t, [v * (1 - rel) for v in t], [v * (1 + rel) for v in t], [3] * len(t)


def test_a_known_floor_and_throughput_are_found_with_their_crossover():
    t = [A + B * w for w in WORK]
    f = fit_series(SIZES, WORK, *_points(t))
    assert f.overhead_us == pytest.approx(A, rel=1e-6) and f.overhead_us_low < A < f.overhead_us_high
    assert f.throughput == pytest.approx(1e10, rel=1e-6)
    crossing = (A / B / 2) ** (1 / 3)  # 2 n^3 B = A
    assert f.crossover_size == pytest.approx(crossing, rel=1e-6)
    assert f.crossover_size_low < crossing < f.crossover_size_high < 3 * f.crossover_size_low
    assert f.fits and [r.outcome for r in f.ratios] == [BELOW, ABOVE, ABOVE, ABOVE, ABOVE]


def test_noise_from_the_intervals_widens_the_fits_intervals():
    t = [A + B * w for w in WORK]
    tight, loose = fit_series(SIZES, WORK, *_points(t, 0.01)), fit_series(SIZES, WORK, *_points(t, 0.2))
    assert (loose.overhead_us_high - loose.overhead_us_low) > 5 * (tight.overhead_us_high - tight.overhead_us_low)


def test_a_step_off_the_line_says_the_model_does_not_fit():
    t = [A + B * w for w in WORK]
    t[3] *= 2  # a change of kernel at 1024
    f = fit_series(SIZES, WORK, *_points(t))
    assert not f.fits and "at 1024" in f.check and "does not fit" in f.check


def test_two_sizes_fit_exactly_and_say_there_is_nothing_to_check():
    f = fit_series(SIZES[:2], WORK[:2], *_points([A + B * w for w in WORK[:2]]))
    assert f.fits and f.check.startswith("2 sizes")


def test_no_floor_when_time_is_proportional_to_work():
    f = fit_series(SIZES, WORK, *_points([B * w for w in WORK]))
    assert f.overhead_us == pytest.approx(0, abs=1e-9) and f.crossover_size is None
    assert all(r.outcome == ABOVE for r in f.ratios)


def test_one_size_or_no_work_is_no_fit():
    assert fit_series([64], [1.0], [5.0], [4.0], [6.0], [3]) is None
    assert fit_series([64, 128], [0, 0], [5.0, 6.0], [4.0, 5.0], [6.0, 7.0], [3, 3]) is None


def test_an_unlocated_crossover_says_how_many_processes_would_locate_it():
    """A crossover whose interval spans more than 3x says how many processes a grid point would
    narrow it to 3x at the spread observed; with that many (each point's interval narrowed as one
    over the square root of its processes), it is located."""
    from profsweep.fit import CROSSOVER_SPAN, processes_to_locate

    work = [float(n) for n in SIZES]  # work in proportion to the size: its interval is the crossover's
    t = [A + A / 256 * w for w in work]  # crossing at 256
    assert fit_series(SIZES, work, *_points(t, 0.03)).crossover_processes_needed is None  # located
    rel = 0.5
    loose = fit_series(SIZES, work, *_points(t, rel))
    assert loose.crossover_size_high / loose.crossover_size_low > CROSSOVER_SPAN
    needed = loose.crossover_processes_needed
    assert needed is not None and needed > 3
    steps, lows, highs, _ = _points(t, rel * (3 / needed) ** 0.5)
    located = fit_series(SIZES, work, steps, lows, highs, [needed] * len(t))
    assert located.crossover_size_high / located.crossover_size_low <= CROSSOVER_SPAN * 1.1
    assert processes_to_locate(10.0, 90.0, 3) == 12  # log 9 / log 3 = 2: four times the 3 processes
    assert processes_to_locate(10.0, 20.0, 3) is None and processes_to_locate(10.0, float("inf"), 3) is None


@pytest.mark.parametrize("at_ridge, work", [(False, "bytes"), (True, "flops")])
def test_a_series_is_fitted_over_bytes_only_where_the_roofline_decidedly_calls_it_memory_bound(at_ridge, work):
    from analysis.tables import crossovers

    # t = 20 µs + size^3 / 1e4 µs at sizes 64..512 over 3 processes each; labelled memory-bound
    rows = []
    for size in (64, 128, 256, 512):
        t = 20.0 + size ** 3 / 1e4
        rows.append({"job": f"j{size}", "status": "ok", "workload": "matmul_add", "variant": None, "dtype": "bf16",
                     "compile": False, "warmup": True, "train": False, "device": "cpu", "size": size,
                     "host_us_per_step": t, "overhead_us_per_step": 20.0, "compute_us_per_step": t - 20.0,
                     "timed_us_per_step": t, "timed_us_per_step_low": t * 0.98, "timed_us_per_step_high": t * 1.02,
                     "repeats": 3, "flops_per_call": 2 * size ** 3, "bytes_per_call": 6 * size ** 2,
                     "regime": "memory-bound", "regime_at_ridge": at_ridge})
    [series] = crossovers(rows)
    assert series["fit_work"] == work


@pytest.mark.parametrize("ops_grow", [False, True])
def test_a_series_whose_aten_ops_grow_with_size_has_no_fixed_floor(ops_grow):
    """helper-33: a model with a Python loop over `size` was called compute-bound at 145x by a fit
    whose 'work' held the loop's overhead (5 µs of floor): its aten ops per step grow with size."""
    from analysis.tables import FITTED, crossovers

    rows = []
    for size in (8, 16, 32, 64):
        t = 20.0 + 2.0 * size ** 2
        rows.append({"job": f"j{size}", "status": "ok", "workload": "custom", "variant": "make_loop", "dtype": "fp32",
                     "compile": False, "warmup": False, "train": False, "device": "cpu", "size": size,
                     "host_us_per_step": t, "overhead_us_per_step": 20.0, "compute_us_per_step": t - 20.0,
                     "timed_us_per_step": t, "timed_us_per_step_low": t * 0.99, "timed_us_per_step_high": t * 1.01,
                     "repeats": 3, "flops_per_call": 1000 * size ** 2,
                     "step_aten_ops_median": 11 * size if ops_grow else 11})
    [series] = crossovers(rows)
    if ops_grow:
        assert series["fit_check"] == ("does not fit: the step's aten ops grow with size (88 at 8 -> 704 at 64): its "
                                       "overhead is no fixed floor (a loop over size?)")
        assert not any(r.get("regime_source") == FITTED for r in rows)  # the profiled split's regime stays
    else:
        assert series["fit_check"].startswith("fits") and all(r.get("regime_source") == FITTED for r in rows)


@pytest.mark.parametrize("above", [0.5, 2.0], ids=["faster", "slower"])
def test_a_line_that_breaks_only_above_the_crossover_is_the_smaller_sizes_line(above):
    """CPU matmul: 1.2 TFLOP/s at 1024 and 2.4 at 4096 (a faster kernel for the larger product):
    the line through every size misses the largest, but the floor and the crossover are where the
    smaller sizes put them: known by construction here, with 1024 and 4096 off the line, one way."""
    t = [A + B * w for w in WORK]
    t[3] *= above
    t[4] *= above
    f = fit_series(SIZES, WORK, *_points(t, 0.01))
    assert f.fits and f.sizes == (16.0, 64.0, 256.0)
    assert f.overhead_us == pytest.approx(A, rel=1e-6) and f.throughput == pytest.approx(1e10, rel=1e-6)
    crossing = (A / B / 2) ** (1 / 3)
    assert f.crossover_size == pytest.approx(crossing, rel=1e-6)
    assert 16 <= f.crossover_size_low < crossing < f.crossover_size_high <= 256
    side = "faster" if above < 1 else "slower"
    assert f.check.startswith("fits sizes 16-256, every size within") and f"the work runs {side} there" in f.check
    assert f"at 1024 the step is {above:.2f}x that line" in f.check
    # each larger size's regime: its own step over the floor, less one
    assert [r.outcome for r in f.ratios] == [BELOW, ABOVE, ABOVE, ABOVE, ABOVE]
    assert f.ratios[4].ratio == pytest.approx(t[4] / A - 1, rel=1e-6)
    assert f.ratios[4].low < f.ratios[4].ratio < f.ratios[4].high
    assert f.columns()["fit_sizes"] == "16;64;256"


def test_a_bump_is_no_break_and_a_break_below_the_crossover_rests_on_nothing():
    t = [A + B * w for w in WORK]
    t[3] *= 2  # 1024 off the line, 4096 on it: a bump
    assert not fit_series(SIZES, WORK, *_points(t, 0.01)).fits
    t = [A + B * w for w in WORK]
    t[1:] = [v * 0.3 for v in t[1:]]  # off from 64 on: one size below, no line to hold the crossover
    f = fit_series(SIZES, WORK, *_points(t, 0.01))
    assert not f.fits and f.check.startswith("does not fit") and len(f.sizes) == 5


def test_three_sizes_whose_line_breaks_say_which_size_would_tell_where():
    """Through two sizes a line checks nothing, so three cannot tell a faster kernel at the largest
    from a slow middle size: no line below a break, and the check names the size that would tell."""
    sizes = [64, 1024, 4096]
    work = [2 * n**3 for n in sizes]
    t = [3000.0 + B * w for w in work]  # a floor that puts the crossover between 64 and 1024 (near 247)
    t[2] *= 0.5
    f = fit_series(sizes, work, *_points(t, 0.01))
    assert not f.fits and f.sizes == (64.0, 1024.0, 4096.0)
    assert f.check.startswith("does not fit") and f.check.endswith(
        "3 sizes cannot tell a break at the largest from one in the middle: a size between 64 and 1024 would show "
        "whether the smaller sizes lie on one line (size=64,256,1024,4096)")
    assert fit_series([1_000_000, 2_000_000], [1e6, 2e6], *_points([A + 1e6 * B, A + 2e6 * B])).columns()[
        "fit_sizes"] == "1000000;2000000"


def test_work_that_hardly_grows_with_the_size_gives_no_crossover_not_an_overflow():
    """An embedding whose whole table is counted as read at every size (102,408,320 and
    102,533,120 bytes at 16 and 256): the size of a work past them lay beyond any float, and the
    analysis died with OverflowError (helper-37)."""
    from profsweep.fit import _size_at

    work, sizes = np.array([102_408_320.0, 102_533_120.0]), np.array([16.0, 256.0])
    assert _size_at(2e8, work, sizes) == math.inf and _size_at(1.02e8, work, sizes) < 16
    fit = fit_series([16, 256], [102_408_320, 102_533_120], [100.0, 100.01], [95.0, 95.01], [105.0, 105.01], [3, 3],
                     kind="bytes")
    assert fit is not None and fit.overhead_us > 0 and fit.crossover_size is None
    assert fit.crossover_size_low is None and fit.crossover_size_high is None
