"""Where a grid point's time per step changed over a history of sweeps, by how much, and whether
the change is real: a piecewise-constant fit to the series of its sweeps, with the noise taken
from each sweep's repeats (one process each) and from how far the sweeps scatter beyond them.

The series: per sweep i (in order), the values x_ij > 0 of its r_i repeats (each repeat's median
step). On log scale:

- the sweep's level y_i = mean_j log x_ij (its repeats' geometric mean);
- its noise from the repeats, sigma_i^2 = max(v_i, s_w^2) / r_i, v_i the variance of its repeats'
  logs and s_w^2 the series' pooled within-sweep variance (Sum (r_i - 1) v_i / Sum (r_i - 1)):
  a sweep whose two or three repeats agree by chance is never taken as quieter than the series;
  a sweep of one repeat gets s_w^2;
- a partition of a stretch of n sweeps into an inside (n_1 sweeps, a run of them) and the rest
  (n_2) has two levels, the means of their y (each sweep counts once: the sweep is the unit, as
  the repeat is within a sweep); d = inside - rest. Its variance is the larger of what the
  repeats say, Sum_in sigma_i^2 / n_1^2 + Sum_rest sigma_i^2 / n_2^2 (Sum (r_i - 1) degrees of
  freedom), and what the sweeps' scatter around their level says, RSS / (n - 2) * (1 / n_1 + 1 / n_2)
  (n - 2 degrees of freedom): sweeps differ by more than their repeats when days differ (the
  machine, its load, its clocks), and the scatter then speaks for them. A few sweeps say next to
  nothing of their own scatter (two degrees of freedom from four sweeps), so where a grid of series
  is judged together the scatter beyond the repeats is pooled over the other series of the grid
  (pooled_scatter: their successive differences between sweeps, each series' largest left out
  where a change it holds would be), combined with the series' own (its RSS beyond its repeats)
  and added to the repeats' noise, with Welch-Satterthwaite's degrees of freedom;
- it is tested for an effect beyond the band (profsweep.decide's: 5%, asv's default threshold, or --band): t = (|d| - log 1.05) / se against Student's t
  with those degrees of freedom, two-sided as profsweep.stats.ratio_test.

The search (circular binary segmentation, Olshen et al. 2004: binary segmentation that also finds
a level that came and went, which a single split misses): every run [i, j) of a stretch against
the rest, a step (the run reaches the stretch's end) or a bump; the one with the largest t is
kept when its p-value, multiplied by the n (n - 1) / 2 partitions it could have been
(Bonferroni), is below ALPHA; its ends are changes, and each piece is searched again. Each change
is then tested again as one step between its neighbours (from the previous change to the next,
Bonferroni over the places between them) and the weakest is dropped while one is not below
ALPHA; a change's p-value is the larger of that test's and its search's. Across a grid the
caller controls false discoveries over every change's p-value (and every series' first search
where none was found) with Benjamini-Hochberg. A change is confirmed when the two sweeps from it
on both lie past the 5% threshold from the level before it, in its direction (PyTorch HUD's two
consecutive points); a change with one sweep after it (the last sweep alone) is unconfirmed.

Simulated (3 repeats, 10 sweeps, 20 grid points, 300 A/A histories for each noise; repeats
10-30% apart, sweeps 0-20% apart from day to day): a change found anywhere in the grid in at
most 5% of A/A histories (benchmarks/history_scale.py --calibrate prints these rates).

numpy only; nothing here reads a file.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from profsweep import stats
from profsweep.decide import current_band

ALPHA = 0.05  # a split is kept while its (Bonferroni-corrected) p-value is below this
LEVEL = 0.95  # of the ratio's interval
CONFIRM = 2  # sweeps from the change on that must agree (the HUD's two consecutive points)
STEP_WEIGHT = 0.8  # of ALPHA spent on steps; the rest on bumps (a level that came and went)
FINE = 128  # longer stretches search bumps on a coarse grid of ends first


@dataclass(frozen=True)
class Series:
    """One grid point over the sweeps that measured it: each sweep's level and noise on log scale."""

    y: np.ndarray  # per sweep: the mean of its repeats' logs
    s2: np.ndarray  # per sweep: the variance of y from its repeats (0 where nothing says)
    dof_within: int  # Sum (r_i - 1): what the repeats say of the noise
    pooled: tuple[float, float] | None = None  # the other series' scatter beyond the repeats and its dof (pooled_scatter)

    @property
    def n(self) -> int:
        return len(self.y)


def series(repeats: Sequence[Sequence[float]]) -> Series:
    """From each sweep's repeat values (positive; a sweep without any must be left out before)."""
    logs = [np.log(np.asarray(stats.clean(r), dtype=float)) for r in repeats]
    if any(len(g) == 0 or not np.isfinite(g).all() for g in logs):
        raise ValueError("every sweep needs at least one positive repeat value")
    return from_moments([(len(g), float(np.mean(g)), float(np.var(g, ddof=1)) if len(g) > 1 else 0.0) for g in logs])


def from_moments(moments: Sequence[tuple[int, float, float]]) -> Series:
    """From each sweep's (repeats, mean of their logs, variance of their logs with ddof 1)."""
    r = np.array([n for n, _, _ in moments], dtype=float)
    var = np.array([v for _, _, v in moments], dtype=float)
    dof = int((r - 1).sum())
    pooled = float(((r - 1) * var).sum() / dof) if dof else 0.0
    return Series(np.array([m for _, m, _ in moments], dtype=float), np.maximum(var, pooled) / r, dof)


@dataclass(frozen=True)
class Shift:
    """A change at sweep `at` (the first sweep of the new level), judged on the sweeps [start, end)."""

    at: int
    start: int
    end: int
    before: float  # the level before and after, in the series' unit (geometric means)
    after: float
    ratio: float  # after / before
    low: float | None  # its interval (None where it cannot be judged)
    high: float | None
    p_value: float | None  # of a change beyond the band (see the module's docstring)
    confirmed: bool

    @property
    def status(self) -> str:
        """regressions.csv's word for it: a confirmed regression or improvement, else unconfirmed."""
        if not self.confirmed:
            return "unconfirmed"
        return "regression" if self.ratio > 1 else "improvement"


def noises(repeats: np.ndarray, scatter: np.ndarray | None, dof_within: int, dof_between: int
           ) -> list[tuple[np.ndarray, float]]:
    """What a difference of two levels must stand out of: (se, degrees of freedom) from the repeats
    and from the sweeps' scatter, those that can be known."""
    out = []
    if dof_within > 0:
        out.append((np.sqrt(repeats), float(dof_within)))
    if scatter is not None:
        out.append((np.sqrt(scatter), float(dof_between)))
    return out


def _partitions(s: Series, a: int, b: int, i: np.ndarray, j: np.ndarray
                ) -> tuple[np.ndarray, list[tuple[np.ndarray, float]]]:
    """d (inside - rest) of the runs [i, j) of [a, b) against the rest, and its noises."""
    n = b - a
    y, s2 = s.y[a:b], s.s2[a:b]
    sums = np.concatenate([[0.0], np.cumsum(y)])
    noise = np.concatenate([[0.0], np.cumsum(s2)])
    i, j = i - a, j - a
    n1 = (j - i).astype(float)
    n2 = n - n1
    inside = sums[j] - sums[i]
    rest = sums[n] - inside
    d = inside / n1 - rest / n2
    noise_in = noise[j] - noise[i]
    repeats = noise_in / n1 ** 2 + (noise[n] - noise_in) / n2 ** 2
    scatter, dof = None, float(n - 2)
    if n > 2:
        rss = np.maximum(float((y * y).sum()) - inside ** 2 / n1 - rest ** 2 / n2, 0.0)
        scatter = rss / (n - 2) * (1 / n1 + 1 / n2)
    if s.pooled is not None:  # the other series' scatter beyond the repeats, with this series' own
        tau2, pooled_dof = s.pooled
        own = np.maximum(rss / (n - 2) - float(s2.mean()), 0.0) if n > 2 else 0.0
        dof_excess = max(n - 2, 0) + pooled_dof
        excess = (own * (n - 2) + tau2 * pooled_dof) / dof_excess * (1 / n1 + 1 / n2)
        scatter = repeats + excess
        # Welch-Satterthwaite: the repeats' part with their dof, the excess with the grid's
        with np.errstate(divide="ignore", invalid="ignore"):
            each = np.where(scatter > 0, scatter ** 2 / (repeats ** 2 / max(s.dof_within, 1) + excess ** 2 / dof_excess),
                            float(dof_excess))
        dof = float(np.min(each))
    return d, noises(repeats, scatter, s.dof_within, dof)


DIFF_EFFICIENCY = 2 / 3  # successive differences share their levels: degrees of freedom they are worth, each


# A squared difference this many times what the grid's scatter explains (five standard deviations)
# is a change or a spike, not scatter. Lower (chi-square's 99.9th percentile, 10.83) trims the
# tails of heavy-tailed day-to-day noise too: simulated null histories (40 points, 8 sweeps, t(3)
# scatter, 60 histories) gave 17 confirmed false changes against 12 untrimmed; at 25, 13.
OUTLYING = 25.0
CHI2_MEDIAN = 0.4549  # chi-square(1)'s median


def pooled_scatter(many: Sequence[Series]) -> list[tuple[float, float] | None]:
    """For each series, how much more a sweep's level scatters from the next one's than its repeats
    say (tau^2), from the other series of the grid (leave one out: the series' own scatter is its
    RSS, combined with this in _partitions), with its degrees of freedom; None where no other
    series of three sweeps or more speaks, or fewer than 2 of its differences do.

    From the successive differences y[i+1] - y[i], whose square is on average s2[i] + s2[i+1] +
    2 tau^2: each series leaves out its largest difference (against its repeats: where a change it
    holds would be), and the rest are scaled up by what leaving out the largest of k takes away
    where nothing changed (_kept_share), so that one change per grid point does not pass for
    scatter; tau^2 = (their sum less the repeats' part) / 2 / their count, at DIFF_EFFICIENCY
    degrees of freedom a difference (neighbouring differences share a level). Two to four sweeps a
    grid point say next to nothing of day-to-day scatter alone (two degrees of freedom from four
    sweeps); a grid of them says it.

    A difference past OUTLYING times what the grid's scatter explains (a one-sweep spike at one
    grid point: its rise and its return, two differences of which only one is the largest) is
    left out too, the scatter it is judged against found robustly first (the tau^2 at which the
    median difference is chi-square's median): one load spike must not hide a real change at
    every other grid point."""
    kept_parts: list[tuple[np.ndarray, np.ndarray, float] | None] = []  # per series: kept squares, repeats' part, scale
    for s in many:
        if s.n < 3:
            kept_parts.append(None)
            continue
        sq = np.diff(s.y) ** 2
        known = s.s2[1:] + s.s2[:-1]
        keep = np.arange(len(sq)) != int(np.argmax(sq / np.maximum(known, 1e-300)))  # the most unlike its repeats
        kept_parts.append((sq[keep], known[keep], 1 / _kept_share(len(sq))))
    speaking = [p for p in kept_parts if p is not None]
    if speaking:
        tau2 = _robust_tau2(np.concatenate([p[0] for p in speaking]), np.concatenate([p[1] for p in speaking]))
    parts: list[tuple[float, float, int] | None] = []  # per series: (scaled squares, repeats' part, kept)
    for p in kept_parts:
        if p is None:
            parts.append(None)
            continue
        sq, known, scale = p
        usual = sq <= OUTLYING * (known + 2 * tau2)
        parts.append((float(sq[usual].sum()) * scale, float(known[usual].sum()), int(usual.sum())))
    speaking_parts = [p for p in parts if p is not None]
    total = [sum(p[i] for p in speaking_parts) for i in range(3)]
    out: list[tuple[float, float] | None] = []
    for p in parts:
        squares, known, kept = ([t - x for t, x in zip(total, p)] if p is not None else total)
        if len(speaking_parts) - (p is not None) < 1 or kept < 2:
            out.append(None)
            continue
        out.append((max(0.0, (squares - known) / kept / 2), DIFF_EFFICIENCY * kept))
    return out


def _robust_tau2(sq: np.ndarray, known: np.ndarray) -> float:
    """The tau^2 >= 0 at which the median of sq / (known + 2 tau^2) is chi-square(1)'s median (0
    where it is below that at 0): a scale that a few outlying differences do not move."""
    def median_z(tau2: float) -> float:
        return float(np.median(sq / np.maximum(known + 2 * tau2, 1e-300)))

    if median_z(0.0) <= CHI2_MEDIAN:
        return 0.0
    low, high = 0.0, max(float(np.median(sq)), 1e-300)
    while median_z(high) > CHI2_MEDIAN:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if median_z(mid) > CHI2_MEDIAN else (low, mid)
    return high


@functools.lru_cache(maxsize=None)
def _kept_share(k: int) -> float:
    """E[sum of k chi-square(1) draws less their largest] / (k - 1): the share of the mean square that
    the k - 1 smallest keep, from E[max] = integral of 1 - F(x)^k, F the chi-square(1) CDF."""
    xs = np.linspace(0.0, 60.0, 6001)
    f = np.array([math.erf(math.sqrt(x / 2)) for x in xs])
    y = 1 - f ** k
    e_max = float(((y[1:] + y[:-1]) / 2 * np.diff(xs)).sum())
    return (k - e_max) / (k - 1)


def with_pool(s: Series, pooled: tuple[float, float] | None) -> Series:
    return Series(s.y, s.s2, s.dof_within, pooled)


def smallest(s: Series, alpha: float = ALPHA) -> float | None:
    """The smallest step (a ratio, >= 1) that a change halfway through this series' sweeps would
    need to be found at `alpha`: the band plus Student's t times the noise of that split."""
    if s.n < 2:
        return None
    k = s.n // 2
    if not _judgeable(s, s.n):
        return None
    _, judged = _step(s, 0, k, s.n)
    need = 0.0
    for se, df in judged:
        t = stats.t_quantile(1 - alpha * STEP_WEIGHT / (2 * (s.n - 1)), df)
        need = max(need, t * se)
    return math.exp(math.log(1 + current_band()) + need)


def _t(d: np.ndarray, se: np.ndarray) -> np.ndarray:
    m = math.log(1 + current_band())
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, (np.abs(d) - m) / se, np.where(np.abs(d) > m, np.inf, -np.inf))


def _z(t: np.ndarray, df: float) -> np.ndarray:
    """Student's t as the normal deviate of about the same tail (Wallace 1959), to rank partitions
    whose noises have different degrees of freedom."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sign(t) * np.sqrt(df * np.log1p(t * t / df)) * (8 * df + 1) / (8 * df + 3)


def _p(d: float, judged: list[tuple[float, float]], places: int) -> float:
    """The larger of the two-sided p-values of a change beyond the band against each noise,
    times the places it could have been."""
    worst = 0.0
    for se, df in judged:
        t = float(_t(np.array([d]), np.array([se]))[0])
        worst = max(worst, (0.0 if t > 0 else 1.0) if se == 0 else 2 * (1 - stats.t_cdf(t, df)))
    return min(1.0, worst * places)


def _judgeable(s: Series, n: int) -> bool:
    """Whether anything says how noisy a stretch of n sweeps is (repeats, three sweeps, or the grid)."""
    return s.dof_within > 0 or n > 2 or s.pooled is not None


def _best_of(s: Series, a: int, b: int, i: np.ndarray, j: np.ndarray) -> tuple[int, int, float, list]:
    """The run among [i, j) whose difference stands out most (the largest of its smallest z over
    the noises), with its d and noises."""
    d, judged = _partitions(s, a, b, i, j)
    z = np.min([_z(_t(d, se), df) for se, df in judged], axis=0)
    k = int(np.argmax(z))
    return int(i[k]), int(j[k]), float(d[k]), [(float(se[k]), df) for se, df in judged]


def _bumps(a: int, b: int, every: int = 1, near: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The runs [i, j) with a < i < j < b: all of them, their ends on a grid `every` apart, or
    those whose ends lie within `every` of `near`."""
    if near is None:
        ends = np.arange(a + every, b, every)
        i, j = np.meshgrid(ends, ends, indexing="ij")
    else:
        i, j = np.meshgrid(np.arange(near[0] - every, near[0] + every + 1),
                           np.arange(near[1] - every, near[1] + every + 1), indexing="ij")
    keep = (a < i) & (i < j) & (j < b)
    return i[keep], j[keep]


def best(s: Series, a: int, b: int) -> tuple[int, int, float | None]:
    """The run [i, j) of [a, b) (a < i < j <= b) most unlike the rest, and its p-value: a step
    (j = b) times its n - 1 places / STEP_WEIGHT, a bump (j < b) times its (n - 1) (n - 2) / 2
    places / (1 - STEP_WEIGHT) (weighted Bonferroni: steps are what a history mostly has). Over
    FINE sweeps, bumps are searched with their ends on a coarse grid, then around the best."""
    n = b - a
    if not _judgeable(s, n):
        return a + 1, b, None
    found = []
    i, j, d, judged = _best_of(s, a, b, np.arange(a + 1, b), np.full(n - 1, b))
    found.append((min(1.0, _p(d, judged, n - 1) / STEP_WEIGHT), i, j))
    if n > 2:
        every = max(1, math.ceil(n / FINE))
        i, j, d, judged = _best_of(s, a, b, *_bumps(a, b, every))
        if every > 1:
            i, j, d, judged = _best_of(s, a, b, *_bumps(a, b, every, near=(i, j)))
        found.append((min(1.0, _p(d, judged, (n - 1) * (n - 2) // 2) / (1 - STEP_WEIGHT)), i, j))
    p, i, j = min(found)
    return i, j, p


def _step(s: Series, a: int, k: int, b: int) -> tuple[float, list[tuple[float, float]]]:
    """d (after - before) of one step at k within [a, b), and its noises."""
    d, judged = _partitions(s, a, b, np.array([k]), np.array([b]))
    return float(d[0]), [(float(se[0]), df) for se, df in judged]


def find(s: Series, alpha: float = ALPHA) -> tuple[list[tuple[int, float]], float | None]:
    """The sweeps at which the level changes with their p-values, and the p-value of the first
    search over the whole series (what was tested where nothing was found)."""
    if s.n < 2:
        return [], None
    found: dict[int, float] = {}  # change -> the p-value of the search that found it
    first = None
    stack = [(0, s.n)]
    while stack:
        a, b = stack.pop()
        if b - a < 2:
            continue
        i, j, p = best(s, a, b)
        if (a, b) == (0, s.n):
            first = p
        if p is None or p >= alpha:
            continue
        found.update({k: p for k in (i, j) if a < k < b})
        stack += [(a, i), (i, j), (j, b)]
    at = sorted(found)
    while at:  # each as one step between its neighbours; the weakest goes while one does not hold
        ps = [max(found[k], refit(s, at, n)) for n, k in enumerate(at)]
        worst = max(range(len(at)), key=lambda n: ps[n])
        if ps[worst] < alpha:
            return list(zip(at, ps)), first
        at.pop(worst)
    return [], first


def _bounds(s: Series, at: Sequence[int], n: int) -> tuple[int, int, int]:
    return (at[n - 1] if n else 0), at[n], (at[n + 1] if n + 1 < len(at) else s.n)


def refit(s: Series, at: Sequence[int], n: int) -> float:
    """The p-value of the n-th change as one step between its neighbours."""
    a, k, b = _bounds(s, at, n)
    if not _judgeable(s, b - a):
        return 1.0
    d, judged = _step(s, a, k, b)
    return _p(d, judged, b - a - 1)


def after_unconfirmed(found: Sequence[Shift]) -> list[Shift]:
    """A change that leaves, the next sweep, a level only one sweep held and never confirmed, back to
    the level before it (a one-night spike and its return), is not confirmed either: its `before` is
    that one sweep. A change on to another level (a dip, then a real step) stays as judged."""
    out: list[Shift] = []
    for shift in found:
        last = out[-1] if out else None
        if (last is not None and not last.confirmed and shift.confirmed and shift.at - last.at == 1
                and abs(math.log(shift.after / last.before)) <= math.log(1 + current_band())):
            shift = replace(shift, confirmed=False)
        out.append(shift)
    return out


def shifts(s: Series, at: Sequence[int], p_values: Sequence[float | None]) -> list[Shift]:
    """Each change with its levels between its neighbours, its ratio's interval and whether the
    sweeps after it confirm it."""
    out = []
    m = math.log(1 + current_band())
    for n in range(len(at)):
        a, k, b = _bounds(s, at, n)
        before, after = float(s.y[a:k].mean()), float(s.y[k:b].mean())
        low = high = None
        if _judgeable(s, b - a):
            d, judged = _step(s, a, k, b)
            half = max(stats.t_quantile(1 - (1 - LEVEL) / 2, df) * se if se > 0 else 0.0 for se, df in judged)
            low, high = math.exp(d - half), math.exp(d + half)
        up = after > before
        # the two sweeps from the change on, whatever comes after them (a further change the next
        # night does not make a lasting one unconfirmed), against the level before it
        agree = [(s.y[x] - before > m) if up else (before - s.y[x] > m) for x in range(k, min(k + CONFIRM, s.n))]
        out.append(Shift(k, a, b, math.exp(before), math.exp(after), math.exp(after - before), low, high,
                        p_values[n], len(agree) == CONFIRM and all(agree)))
    return out
