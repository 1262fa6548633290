"""Statistics of repeated measurements, shared by the sweep (adaptive repeats) and the analysis.

The unit of replication is the process: a grid point is measured in several job processes
(repeats), each of which times several steps. Steps of one process are correlated; what varies
most is between processes. So:

- a grid point's value is the median over its repeats of each repeat's median step;
- its interval comes from a hierarchical bootstrap: resample the repeats, then the steps within
  each resampled repeat, and take the median of medians again (2,000 times, seeded);
- a change between two sides (compare) is judged on the ratio of their values with an interval
  that is honest for few repeats: the bootstrap's standard error of the log ratio, corrected for
  the number of repeats and widened by Student's t with Welch's degrees of freedom (a bootstrap
  over 3 processes alone is far too narrow), together with the bootstrap's own percentile
  interval, whichever is wider;
- two grid points of one sweep measured round by round (compile against eager) are judged on
  their processes in pairs, one of each from the same round, run close in time: Student's t over
  the pairs' log ratios (paired_ratio_test), so that a burst of another tenant's load that slows
  both processes of a round does not widen the interval;
- false discoveries across the many cells of a grid are controlled with Benjamini–Hochberg.

numpy only (no scipy): Student's t distribution is computed here from the regularised incomplete
beta function.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95
SLICE_US = 4000.0  # an OS time slice on this kind of machine (CONFIG_HZ=250)
# A step that waited for a core: at least three quarters of a slice longer than the fastest step
# and at least half as long again as it.
SLICE_SHARE = 0.75
SLOW_FACTOR = 1.5
SLOW_SHARE = 0.05  # quantised: at least two steps, and this share of them, waited
_CHUNK_ELEMENTS = 4_000_000  # bootstrap draws held at once (32 MB of indices)
# A repeat with more steps than this is bootstrapped over this many evenly spaced order
# statistics of its steps: it only widens the (small) within-process part of an interval.
MAX_STEPS = 100


def clean(values: Iterable[object] | None) -> list[float]:
    """The finite numbers among `values` (None, NaN, text and infinities dropped)."""
    out = []
    for v in (() if values is None else values):
        if isinstance(v, bool):
            continue
        try:
            x = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(x):
            out.append(x)
    return out


def number(value: object) -> float | None:
    """`value` as a finite float, or None (missing, text, a flag, NaN or infinite)."""
    found = clean([value])
    return found[0] if found else None


def quantiles(values: Sequence[float], n: int) -> list[float]:
    """`n` evenly spaced order statistics of `values` (linear between them; with n odd, the
    median is among them): a summary that keeps the distribution's shape."""
    return [float(v) for v in np.quantile(np.asarray(values, dtype=float), np.linspace(0, 1, n))]


def median(values: Sequence[float]) -> float | None:
    values = clean(values)
    return float(np.median(values)) if values else None


@dataclass(frozen=True)
class Estimate:
    """A grid point's value over its repeats: the median of the repeats' medians, a 95% interval
    from the hierarchical bootstrap, how many repeats, and how far apart the repeats' medians lie
    (max / min; 1.0 for one repeat)."""

    value: float | None
    low: float | None
    high: float | None
    repeats: int
    spread: float | None

    @property
    def width(self) -> float | None:
        """The interval's larger half-width relative to the value (0.05: within ±5%)."""
        if self.value is None or self.low is None or self.high is None or self.value == 0:
            return None
        return max(self.high - self.value, self.value - self.low) / abs(self.value)


def _groups(groups: Iterable[Iterable[object] | None]) -> list[np.ndarray]:
    return [np.asarray(g, dtype=float) for g in (clean(g) for g in groups) if g]


def _thinned(g: np.ndarray) -> np.ndarray:
    return g if len(g) <= MAX_STEPS else np.asarray(quantiles(g, MAX_STEPS))


def replicates(groups: Sequence[np.ndarray], resamples: int = RESAMPLES, seed: int = 0,
               log: bool = False) -> np.ndarray:
    """Hierarchical bootstrap replicates of the median of the repeats' medians: each replicate
    draws as many repeats as there are, with replacement, and within each drawn repeat as many
    steps as it has, with replacement. One repeat: the steps alone. `log`: of the logarithms."""
    rng = np.random.default_rng(seed)
    n_groups = len(groups)
    # medians[j, b]: repeat j's median over a resample of its steps; the k-th repeat drawn in
    # replicate b takes resample (b + shift[k]) % resamples of it, a different one per draw.
    medians = np.empty((n_groups, resamples))
    for j, g in enumerate(groups):
        g = _thinned(g)
        if len(g) == 1:
            medians[j] = g[0]
            continue
        chunk = max(1, _CHUNK_ELEMENTS // len(g))
        for start in range(0, resamples, chunk):
            stop = min(resamples, start + chunk)
            medians[j, start:stop] = np.median(g[rng.integers(0, len(g), size=(stop - start, len(g)))], axis=1)
    if n_groups == 1:
        values = medians[0]
    else:
        chosen = rng.integers(0, n_groups, size=(resamples, n_groups))
        shift = rng.permutation(resamples)[:n_groups]
        which = (np.arange(resamples)[:, None] + shift[None, :]) % resamples
        values = np.median(medians[chosen, which], axis=1)
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.log(values)
    return values


def estimate(groups: Iterable[Iterable[object] | None], resamples: int = RESAMPLES, seed: int = 0,
             level: float = LEVEL) -> Estimate:
    """The value of a grid point and its interval: `groups` holds each repeat's samples (its
    steps, or a single value per repeat for a one-off such as the first call).

    The interval is the hierarchical bootstrap's percentile interval, widened where that is too
    narrow for few repeats (a percentile bootstrap over 3 processes covers the true value about
    three times in four): with R >= 2 repeats, also the value plus or minus Student's t with
    R - 1 degrees of freedom times the bootstrap's standard error corrected by R / (R - 1), on
    log scale for positive values, whichever reaches further. One repeat: its steps alone say
    nothing of the variation between processes; the interval is the steps' only."""
    arrays = _groups(groups)
    if not arrays:
        return Estimate(None, None, None, 0, None)
    medians = [float(np.median(g)) for g in arrays]
    value = float(np.median(medians))
    spread = (max(medians) / min(medians)) if min(medians) > 0 else None
    if all(len(g) == 1 for g in arrays) and len(arrays) == 1:
        return Estimate(value, value, value, 1, 1.0)
    positive = all(float(np.min(g)) > 0 for g in arrays)
    reps = replicates(arrays, resamples, seed, log=positive)
    tail = (1 - level) / 2
    low, high = (float(x) for x in np.quantile(reps, [tail, 1 - tail]))
    center = math.log(value) if positive else value
    r = len(arrays)
    if r >= 2:
        half = t_quantile(1 - tail, r - 1) * math.sqrt(float(np.var(reps, ddof=1)) * r / (r - 1))
        low, high = min(low, center - half), max(high, center + half)
    if positive:
        low, high = _exp(low), _exp(high)
    return Estimate(value, min(low, value), max(high, value), r, spread)


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def dispersion(groups: Iterable[Iterable[object] | None]) -> float | None:
    """How far apart the repeats' medians lie: the standard deviation of their logarithms
    (0.1: processes about 10% apart), which, unlike max / min, does not grow with the number of
    repeats; None with fewer than two positive medians."""
    medians = [float(np.median(g)) for g in _groups(groups)]
    if len(medians) < 2 or min(medians) <= 0:
        return None
    return float(np.std(np.log(medians), ddof=1))


@dataclass(frozen=True)
class RatioTest:
    """NEW / BASE of two grid points' values, with a 95% interval and the p-value of a change
    beyond the margin (None where it cannot be judged: `why` says so)."""

    ratio: float | None
    low: float | None
    high: float | None
    p_value: float | None
    df: float | None
    why: str = ""
    low90: float | None = None  # the 90% interval, built the same way: two one-sided tests at 5% (decide's `same`)
    high90: float | None = None


def ratio_test(base: Iterable[Iterable[object] | None], new: Iterable[Iterable[object] | None],
               margin: float = 0.05, resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> RatioTest:
    """The ratio of the two sides' values (median of repeat medians) and its interval: the wider
    of (a) the hierarchical bootstrap's percentile interval of the ratio and (b) the log ratio
    plus or minus Student's t quantile times its standard error, the standard error being the
    bootstrap's, corrected per side by R / (R - 1) for R repeats (the bootstrap's variance over R
    clusters is (R - 1) / R of the true one), with Welch–Satterthwaite degrees of freedom.
    The p-value tests a change beyond `margin` in the direction observed (doubled: two-sided).
    `low90` / `high90`: the 90% interval built the same way (t's 95th percentile, the bootstrap's
    5th and 95th), for two one-sided tests at 5% (profsweep.decide's `same`).
    A side with one repeat says nothing about the variation between processes: no interval."""
    b, n = _groups(base), _groups(new)
    if not b or not n:
        return RatioTest(None, None, None, None, None, "no samples on one side")
    mb, mn = float(np.median([np.median(g) for g in b])), float(np.median([np.median(g) for g in n]))
    if mb <= 0 or mn <= 0:
        return RatioTest(None, None, None, None, None, "a value that is not positive")
    ratio = mn / mb
    if len(b) == len(n) and all(np.array_equal(np.sort(x), np.sort(y)) for x, y in zip(_sorted(b), _sorted(n))):
        return RatioTest(1.0, 1.0, 1.0, 1.0, None, "identical samples")
    if len(b) < 2 or len(n) < 2:
        return RatioTest(ratio, None, None, None, None,
                         f"{len(b)} vs {len(n)} repeats: one process says nothing of the variation between processes")
    # each side's draws seeded by its own samples, not by its place: BASE against NEW is then NEW
    # against BASE mirrored, the same interval inverted, never another verdict
    rb = replicates(b, resamples, seed + _content_seed(b), log=True)
    rn = replicates(n, resamples, seed + _content_seed(n), log=True)
    if not (np.isfinite(rb).all() and np.isfinite(rn).all()):
        return RatioTest(ratio, None, None, None, None, "a value that is not positive")
    vb = float(np.var(rb, ddof=1)) * len(b) / (len(b) - 1)
    vn = float(np.var(rn, ddof=1)) * len(n) / (len(n) - 1)
    d = math.log(ratio)
    tail = (1 - level) / 2
    plow, phigh, p5, p95 = (float(x) for x in np.quantile(rn - rb, [tail, 1 - tail, tail * 2, 1 - tail * 2]))
    se = math.sqrt(vb + vn)
    m = math.log(1 + margin)
    if se == 0:
        low, high = min(d, plow), max(d, phigh)
        return RatioTest(ratio, _exp(low), _exp(high), 0.0 if abs(d) > m else 1.0, None,
                         low90=_exp(min(d, p5)), high90=_exp(max(d, p95)))
    df = welch_df(vb, len(b), vn, len(n))
    half, half90 = t_quantile(1 - tail, df) * se, t_quantile(1 - 2 * tail, df) * se
    low, high = min(d - half, plow), max(d + half, phigh)
    p = min(1.0, 2 * (1 - t_cdf((abs(d) - m) / se, df)))
    return RatioTest(ratio, _exp(low), _exp(high), p, df, low90=_exp(min(d - half90, p5)),
                     high90=_exp(max(d + half90, p95)))


def _content_seed(groups: Sequence[np.ndarray]) -> int:
    """A seed of a side's own samples (CRC-32 of them, in their order)."""
    crc = 0
    for g in groups:
        crc = zlib.crc32(np.ascontiguousarray(g, dtype=float).tobytes(), crc)
        crc = zlib.crc32(b"|", crc)
    return crc


def pairs_by_round(base: dict[int, list[float]], new: dict[int, list[float]]
                   ) -> list[tuple[list[float], list[float]]] | None:
    """Two grid points' samples by round ({round: samples}) as pairs, round by round, where both
    were measured in the same two rounds or more; None otherwise, so that no process of either
    is left out (a round one side lost, a point measured more often: judge them unpaired)."""
    if set(base) != set(new) or len(base) < 2:
        return None
    return [(base[k], new[k]) for k in sorted(base)]


def paired_ratio_test(pairs: Sequence[tuple[Iterable[object] | None, Iterable[object] | None]], margin: float = 0.05,
                      level: float = LEVEL) -> RatioTest:
    """NEW / BASE over processes measured in pairs, each pair one process of each side run close in
    time (one round of a sweep: a burst of another tenant's load slows both alike): the geometric
    mean of the pairs' ratios of their medians, with the interval of Student's t over the pairs'
    log ratios (n - 1 degrees of freedom, matched pairs), its 90% one, and the p-value of a change
    beyond `margin` as ratio_test's. Fewer than two pairs with samples: no interval."""
    logs = []
    for base, new in pairs:
        b, n = median(clean(base)), median(clean(new))
        if b is not None and n is not None and b > 0 and n > 0:
            logs.append(math.log(n / b))
    if not logs:
        return RatioTest(None, None, None, None, None, "no pair with samples on both sides")
    d = float(np.mean(logs))
    if len(logs) < 2:
        return RatioTest(_exp(d), None, None, None, None, "one pair says nothing of the variation between processes")
    df = float(len(logs) - 1)
    se = float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
    m = math.log(1 + margin)
    if se == 0:
        return RatioTest(_exp(d), _exp(d), _exp(d), 0.0 if abs(d) > m else 1.0, df, low90=_exp(d), high90=_exp(d))
    tail = (1 - level) / 2
    half, half90 = t_quantile(1 - tail, df) * se, t_quantile(1 - 2 * tail, df) * se
    p = min(1.0, 2 * (1 - t_cdf((abs(d) - m) / se, df)))
    return RatioTest(_exp(d), _exp(d - half), _exp(d + half), p, df, low90=_exp(d - half90), high90=_exp(d + half90))


def _sorted(groups: list[np.ndarray]) -> list[np.ndarray]:
    return sorted(groups, key=lambda g: (len(g), float(np.median(g)), float(np.sum(g))))


def welch_df(v1: float, n1: int, v2: float, n2: int) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of two variances of means over n1 and n2
    units; between the smaller side's n - 1 and n1 + n2 - 2."""
    top = (v1 + v2) ** 2
    bottom = (v1 ** 2 / (n1 - 1) if v1 else 0.0) + (v2 ** 2 / (n2 - 1) if v2 else 0.0)
    df = top / bottom if bottom else float(n1 + n2 - 2)
    return max(1.0, min(df, float(n1 + n2 - 2)))


# --- Student's t, from the regularised incomplete beta function ------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (any df > 0)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on t_cdf; 0 < p < 1)."""
    if not 0 < p < 1:
        raise ValueError(f"p={p} is not in (0, 1)")
    if p == 0.5:
        return 0.0
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, abs(mid)):
            break
    return (lo + hi) / 2


# --- many cells, many tests --------------------------------------------------------------------


def benjamini_hochberg(p_values: Sequence[float | None], fdr: float = 0.05) -> list[bool]:
    """Which of the tests are discoveries at false discovery rate `fdr`: the k smallest p-values,
    k the largest rank with p_(k) <= k / m * fdr (m: the tests that have a p-value)."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None and not math.isnan(p))
    m = len(ranked)
    cut = 0
    for k, (p, _) in enumerate(ranked, 1):
        if p <= k / m * fdr:
            cut = k
    found = {i for _, i in ranked[:cut]}
    return [i in found for i in range(len(p_values))]


# --- noise -------------------------------------------------------------------------------------


def slow_steps(samples_us: Sequence[float], slice_us: float = SLICE_US) -> int:
    """How many steps took at least three quarters of an OS time slice longer than the fastest
    step and at least 1.5 times as long: steps whose threads waited for a busy core."""
    values = clean(samples_us)
    if len(values) < 2:
        return 0
    fastest = min(values)
    return sum(1 for v in values if v - fastest >= SLICE_SHARE * slice_us and v >= SLOW_FACTOR * fastest)


def quantised(samples_us: Sequence[float], slice_us: float = SLICE_US) -> bool:
    """Steps come in whole time slices: at least two steps (and 5% of them) waited for a core."""
    values = clean(samples_us)
    slow = slow_steps(values, slice_us)
    return slow >= 2 and slow >= SLOW_SHARE * len(values)
