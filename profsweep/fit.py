"""A model per series: the un-profiled step as a fixed overhead plus a cost per unit of work,

    t(size) = a + b * work(size)

(Horace He's "scale the input: if time barely grows you are overhead-bound", as a fit). `a` is the
overhead floor (µs a step: dispatch, Python, launches), 1 / b the throughput (FLOP/s, or bytes/s
where the work is the bytes a step must move), and the crossover the size at which b * work = a,
where the work starts to cost more than the floor. At each size the regime follows from the same
two numbers: compute-bound where b * work(size) / a is decidedly above 1 (profsweep.decide),
overhead-bound where it is decidedly below.

How: a weighted least-squares fit of the grid points' un-profiled steps (the median over their
processes) against their work, each weighted by its own process-level interval (its half-width on
log scale, at least MIN_RELATIVE of the value; ONE_PROCESS for a point measured in one process),
with a >= 0 and b > 0. The intervals of a, 1 / b, the crossover and each size's ratio come from
redrawing every grid point's value from its own interval (log-normal, 2,000 draws, seeded) and
fitting again, every draw kept (one whose time does not grow with the work has an infinite
throughput and no crossover): they are as wide as the processes say. The check: with three sizes or more, the model does not fit when a size's step lies more
than MISFIT off the line and outside three of its own standard errors (caches, a change of
kernel, a second regime): the series is then judged size by size instead.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from profsweep import decide as deciding
from profsweep.stats import LEVEL, RESAMPLES

CROSSOVER_SPAN = 3.0  # a crossover is located when its 95% interval's high end is at most 3x its low end
MIN_RELATIVE = 0.02  # a grid point's standard error is taken as at least 2% of its value
MISFIT = 0.25  # a size more than 25% off the fitted line (and outside its interval) breaks the fit
MIN_BELOW = 3  # the sizes a line below a break must fit: through two, it would check nothing
Z = 1.959963984540054  # the normal quantile of a 95% interval


@dataclass(frozen=True)
class Fit:
    """The model of one series, with 95% intervals; `fits` False: `check` says where it breaks."""

    work: str  # "flops" or "bytes": what the throughput is of
    overhead_us: float
    overhead_us_low: float
    overhead_us_high: float
    throughput: float  # work units per second
    throughput_low: float
    throughput_high: float
    crossover_size: float | None  # None: a = 0, no floor to cross (its interval's low end 0: a draw without one)
    crossover_size_low: float | None
    crossover_size_high: float | None
    fits: bool
    check: str
    ratios: list[deciding.Decision] = field(default_factory=list)  # b * work / a at each size
    crossover_processes_needed: int | None = None  # a grid point, to locate the crossover (None: located, or unknown)
    sizes: tuple[float, ...] = ()  # the sizes the line was fitted to (the smaller ones only: _below_a_break)

    def columns(self) -> dict[str, object]:
        """crossovers.csv's fit_* columns."""
        return {
            "fit_work": self.work,
            "fit_overhead_us": self.overhead_us, "fit_overhead_us_low": self.overhead_us_low,
            "fit_overhead_us_high": self.overhead_us_high,
            "fit_throughput": self.throughput, "fit_throughput_low": self.throughput_low,
            "fit_throughput_high": self.throughput_high,
            "fit_crossover_size": self.crossover_size, "fit_crossover_size_low": self.crossover_size_low,
            "fit_crossover_size_high": self.crossover_size_high,
            "fit_check": self.check, "fit_crossover_processes_needed": self.crossover_processes_needed,
            "fit_sizes": ";".join(f"{v:.15g}" for v in self.sizes),
        }


FIT_COLUMNS = list(Fit("flops", 0, 0, 0, 1, 1, 1, None, None, None, True, "").columns())


def fit_series(sizes: Sequence[float], work: Sequence[float], steps_us: Sequence[float],
               lows: Sequence[float | None], highs: Sequence[float | None], repeats: Sequence[int],
               kind: str = "flops", draws: int = RESAMPLES, seed: int = 0, band: float | None = None) -> Fit | None:
    """The model through one series' grid points (by size; None with fewer than two sizes with a
    positive step and work, or when the step does not grow with the work). Where the line breaks
    only above the crossover, the smaller sizes' line (_below_a_break)."""
    rows = sorted((s, w, t, lo, hi, r) for s, w, t, lo, hi, r in zip(sizes, work, steps_us, lows, highs, repeats)
                  if s and w and t and s > 0 and w > 0 and t > 0)
    if len({r[0] for r in rows}) < 2:
        return None
    band = deciding.current_band() if band is None else band
    found = _fit_rows(rows, kind, draws, seed, band)
    if found is None or found[0].fits:
        return None if found is None else found[0]
    return _below_a_break(rows, kind, draws, seed, band) or _more_sizes(found[0], rows)


def _more_sizes(fit: Fit, rows: list[tuple]) -> Fit:
    """A line that does not fit, with what would tell more where fewer than three sizes lie below
    its largest: a line through two sizes checks nothing, so three sizes cannot tell a break at the
    largest (a faster kernel there) from one in the middle."""
    if len(rows) > 3:
        return fit
    first, second = rows[0][0], rows[1][0]
    between = round(math.sqrt(first * second))
    sizes = ",".join(f"{v:.15g}" for v in sorted({first, between, *(r[0] for r in rows[1:])}))
    return dataclasses.replace(fit, check=(
        f"{fit.check}; {len(rows)} sizes cannot tell a break at the largest from one in the middle: a size "
        f"between {first:.15g} and {second:.15g} would show whether the smaller sizes lie on one line (size={sizes})"))


def _below_a_break(rows: list[tuple], kind: str, draws: int, seed: int, band: float) -> Fit | None:
    """Where the line through every size breaks only at the largest sizes, above the crossover (CPU
    matmul: 1.2 TFLOP/s at 1024, 2.4 at 4096, a faster kernel for the larger product), the floor
    and the crossover are the smaller sizes' to say: the line through the most of the smallest
    sizes (MIN_BELOW at least: a line through two checks nothing) that fits them, puts the crossover, its whole interval, within them, and
    leaves every larger size more than MISFIT off it, all on one side;
    each larger size's regime is its own step's excess over that floor (step / floor - 1, drawn
    as the fit's draws are). None where no such line exists (the series is then judged size by
    size)."""
    for k in range(len(rows) - 1, MIN_BELOW - 1, -1):
        part = _fit_rows(rows[:k], kind, draws, seed, band)
        if part is None:
            continue
        fit, fa = part
        if not fit.fits or fit.crossover_size_low is None or fit.crossover_size_high is None:
            continue
        if not rows[0][0] <= fit.crossover_size_low <= fit.crossover_size_high <= rows[k - 1][0]:
            continue
        a, b = fit.overhead_us, 1e6 / fit.throughput
        above = [(r[0], r[2] / (a + b * r[1])) for r in rows[k:]]
        if not (all(o * (1 + MISFIT) < 1 for _, o in above) or all(o > 1 + MISFIT for _, o in above)):
            continue  # not every larger size is off the smaller ones' line, all one way: a bump, not a break
        if any(abs(math.log(o)) <= 3 * _sigma_log(r[2], r[3], r[4], r[5]) for (_, o), r in zip(above, rows[k:])):
            continue  # a larger size off the line only within its own interval: no break shown
        size, off = max(above, key=lambda item: abs(math.log(item[1])))
        how = ("the work runs faster there: a faster kernel for the larger work, or caches" if off < 1 else
               "the work runs slower there: the data outgrows a cache, or another regime")
        ratios = list(fit.ratios)
        rng = np.random.default_rng(seed + 1)
        for _, _, t, lo, hi, r in rows[k:]:
            drawn = t * np.exp(rng.standard_normal(len(fa)) * _sigma_log(t, lo, hi, r))
            with np.errstate(divide="ignore", invalid="ignore"):
                each = np.where(fa > 0, drawn / np.where(fa > 0, fa, 1.0) - 1, np.inf)
            ratios.append(deciding.decide(t / a - 1, *_quantiles(each), int(r or 1), band))
        check = (f"fits sizes {rows[0][0]:g}-{rows[k - 1][0]:g}, {fit.check.partition(': ')[2] or fit.check}; at "
                 f"{size:g} the step is {off:.2f}x that line ({how}): the floor and the crossover are the smaller sizes'")
        return dataclasses.replace(fit, check=check, ratios=ratios)
    return None


def _quantiles(values: np.ndarray) -> tuple[float, float]:
    """The 95% interval's ends as order statistics (infinities survive: a draw with no floor, or no growth)."""
    tail = (1 - LEVEL) / 2
    lo_, hi_ = np.quantile(values, [tail, 1 - tail], method="inverted_cdf")
    return float(lo_), float(hi_)


def _fit_rows(rows: list[tuple], kind: str, draws: int, seed: int, band: float
              ) -> tuple[Fit, np.ndarray] | None:
    """The model through these rows (size, work, step, low, high, repeats), with its draws of a."""
    size = np.array([r[0] for r in rows], dtype=float)
    x = np.array([r[1] for r in rows], dtype=float)
    y = np.array([r[2] for r in rows], dtype=float)
    sigma = np.array([_sigma_log(t, lo, hi, r) for _, _, t, lo, hi, r in rows])
    a, b = _wls(x, y, sigma)
    if b <= 0:
        return None
    rng = np.random.default_rng(seed)
    drawn = y[None, :] * np.exp(rng.standard_normal((draws, len(y))) * sigma[None, :])
    fitted = np.array([_wls(x, d, sigma) for d in drawn])
    fa, fb = fitted[:, 0], fitted[:, 1]  # every draw: one whose time does not grow has b <= 0
    q = _quantiles
    a_low, a_high = q(fa)
    with np.errstate(divide="ignore"):
        tp_low, tp_high = q(np.where(fb > 0, 1e6 / np.where(fb > 0, fb, 1.0), np.inf))  # work units per second
    crossover = _size_at(a / b, x, size) if a > 0 else None
    crossover = crossover if crossover is not None and math.isfinite(crossover) else None
    at = np.array([math.inf if bi <= 0 else _size_at(ai / bi, x, size) if ai > 0 else 0.0 for ai, bi in zip(fa, fb)])
    c_low, c_high = q(at) if crossover is not None else (None, None)
    fits, check = _check(size, x, y, sigma, a, b)
    reps = [int(r[5] or 1) for r in rows]
    ratios = []
    for i in range(len(x)):
        with np.errstate(divide="ignore", invalid="ignore"):
            each = np.where(fb <= 0, 0.0, np.where(fa > 0, fb * x[i] / np.where(fa > 0, fa, 1.0), np.inf))
        lo_, hi_ = q(each)
        if a > 0:
            ratios.append(deciding.decide(b * x[i] / a, lo_, hi_, reps[i], band))
        else:  # no floor at the fit itself: the work is all there is, unless the draws say otherwise
            up = lo_ > 1 + band
            ratios.append(deciding.Decision(deciding.ABOVE if up else deciding.INCONCLUSIVE, math.inf, lo_, hi_, band,
                                            why="no overhead floor" if up else "no overhead floor at the fit"))
    c_low = None if c_low is None else min(crossover, c_low)  # type: ignore[type-var]
    c_high = None if c_high is None else max(crossover, c_high)  # type: ignore[type-var]
    fit = Fit(kind, a, min(a, a_low), max(a, a_high), 1e6 / b, min(1e6 / b, tp_low), max(1e6 / b, tp_high),
              crossover, c_low, c_high, fits, check, ratios, processes_to_locate(c_low, c_high, min(reps)),
              tuple(float(v) for v in size))
    return fit, fa


def processes_to_locate(low: float | None, high: float | None, repeats: int) -> int | None:
    """The processes a grid point that would narrow a crossover's interval to CROSSOVER_SPAN at the
    spread observed: an interval from the processes' spread narrows as one over the square root
    of their number (at least 3: one process says nothing of that spread). None where it is
    located already, or where nothing can be said (no crossover, an interval without a low end or
    with no high end: a draw with no floor or no growth, which more processes may or may not
    remove)."""
    if low is None or high is None or not (0 < low <= high) or not math.isfinite(high):
        return None
    span = math.log(high / low)
    if span <= math.log(CROSSOVER_SPAN):
        return None
    return max(3, math.ceil(max(1, repeats) * (span / math.log(CROSSOVER_SPAN)) ** 2))


MAX_LOG_SIZE = 700.0  # e**700, near float's largest: a size beyond it is no size
ONE_PROCESS = 0.25  # the standard error on log scale of a point measured in one process (its steps say little)


def _sigma_log(value: float, low: float | None, high: float | None, repeats: int | None = None) -> float:
    """A grid point's standard error on log scale, from its 95% interval (at least MIN_RELATIVE);
    ONE_PROCESS for a point of one process, whose interval covers its steps only."""
    if (repeats is not None and repeats < 2) or low is None or high is None or not (low > 0) \
            or not (high >= low) or not math.isfinite(high):
        return ONE_PROCESS
    return max(MIN_RELATIVE, (math.log(high) - math.log(low)) / (2 * Z))


def _wls(x: np.ndarray, y: np.ndarray, sigma_log: np.ndarray) -> tuple[float, float]:
    """a, b of y = a + b x by weighted least squares (weights 1 / (y sigma)^2), a >= 0."""
    w = 1.0 / (y * sigma_log) ** 2
    sw, sx, sy = w.sum(), (w * x).sum(), (w * y).sum()
    sxx, sxy = (w * x * x).sum(), (w * x * y).sum()
    det = sw * sxx - sx * sx
    if det > 0:
        b = (sw * sxy - sx * sy) / det
        a = (sy - b * sx) / sw
        if a >= 0:
            return float(a), float(b)
    return 0.0, float(sxy / sxx)  # through the origin: no floor measurable


def _size_at(target_work: float, work: np.ndarray, size: np.ndarray) -> float:
    """The size whose work is `target_work`: log-log linear between the swept sizes, and beyond
    them along the nearest pair's slope."""
    lw, ls = np.log(work), np.log(size)
    t = math.log(target_work)
    i = int(np.searchsorted(lw, t))
    i = min(max(i, 1), len(lw) - 1)
    w0, w1, s0, s1 = lw[i - 1], lw[i], ls[i - 1], ls[i]
    if w1 == w0:
        return float(size[i])
    at = s0 + (t - w0) * (s1 - s0) / (w1 - w0)
    # work that hardly grows with the size (an embedding's table read whole at every size) puts the
    # size of a work far off beyond any number: no size reaches it
    return math.inf if at > MAX_LOG_SIZE else float(math.exp(at))


def _check(size: np.ndarray, x: np.ndarray, y: np.ndarray, sigma: np.ndarray, a: float, b: float) -> tuple[bool, str]:
    if len(x) < 3:
        return True, "2 sizes: the line passes through both, nothing to check it against"
    off = np.log(y / (a + b * x))
    bad = (np.abs(off) > math.log(1 + MISFIT)) & (np.abs(off) > 3 * sigma)
    if not bad.any():
        worst = int(np.argmax(np.abs(off)))
        far = math.exp(abs(off[worst])) - 1
        if far <= MISFIT:
            return True, f"fits: every size within {far:.0%} of the line"
        return True, (f"fits within the points' intervals (at {size[worst]:g} the step is {math.exp(off[worst]):.2f}x "
                      "the line, inside its own interval)")
    worst = int(np.argmax(np.where(bad, np.abs(off), 0)))
    return False, (f"does not fit: at {size[worst]:g} the step is {math.exp(off[worst]):.2f}x the line "
                   "(caches, a change of kernel, another regime)")
