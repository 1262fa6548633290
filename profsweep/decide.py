"""One rule for every verdict on a ratio: compare, the conclusions, the article's claims, the
expectations, history, the regime and `run.repeats=auto` all decide with `decide`.

A ratio (NEW / BASE, or work / overhead) with its 95% interval [low, high] is, against a band of
±BAND (5%: TorchBench sees 5-9% run-to-run noise and asv's default threshold is 5%):

    above         low  > 1 + band                  (NEW slower; work exceeds overhead)
    below         high < 1 / (1 + band)            (NEW faster; overhead exceeds work)
    same          within the band by two one-sided tests at 5% each (Schuirmann's TOST, the
                  equivalence test of bioequivalence): the 90% interval, built as the 95% one is
                  (stats.ratio_test's low90 / high90: t's 95th percentile, the bootstrap's 5th
                  and 95th), lies within the band; where a caller has no 90% interval, the 95%
                  one must (a test at 2.5%)
    inconclusive  otherwise: the interval reaches past the band on one side and into it (or past
                  it on the other): more processes would decide it (`processes_needed`)

as nvbench's compare says FAST / SLOW / SAME / AMBG. Each verdict is a test at 5%: a change past
the band, by the two-sided 95% interval; no change past it, by the two one-sided tests. A ratio
without an interval (one process a side) is never decided. How many processes would decide an
inconclusive ratio at the spread observed: the interval's half-width on log scale shrinks as
sqrt(R / n) with n processes a side (R now), with Student's t for n - 1 degrees of freedom a
side; the smallest n whose interval, centred where it is now, would clear the band's edge
nearest it (the 95% one), or fit inside the band (the 90% one).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

from profsweep.stats import LEVEL, RatioTest, t_quantile

BAND = 0.05
_band: ContextVar[float] = ContextVar("band", default=BAND)
FDR = 0.05  # the false discovery rate Benjamini-Hochberg controls across a grid's verdicts (compare, history)
ABOVE, BELOW, SAME, INCONCLUSIVE = "above", "below", "same", "inconclusive"
MAX_PROCESSES = 1000  # beyond this, "more than 1000": the ratio sits on the band's edge


def percent(band: float) -> str:
    """A band as people write it: 5%, 2.5%, 0.5% (not rounded to a whole percent)."""
    return f"{band * 100:.3g}%"


def current_band() -> float:
    """The band every verdict of this analysis decides with: BAND, or what `using_band` set."""
    return _band.get()


MAX_BAND = 0.5  # ±50%: past it, a change of 1.5x would count as none


def check_band(band: object) -> float:
    """`band` as a fraction in (0, MAX_BAND] (0.05: ±5%), or ValueError naming it and what is
    allowed. Not 0: no interval fits inside a band of nothing, so no two sweeps could ever be the
    same, and a difference too small to matter would count as a change."""
    if isinstance(band, bool) or not isinstance(band, (int, float)) or not math.isfinite(band) \
            or not 0 < band <= MAX_BAND:
        raise ValueError(f"band={band!r} is not allowed: {BAND_ALLOWED}")
    return float(band)


BAND_ALLOWED = (f"give a fraction above 0 and at most {MAX_BAND:g} (0.05: ±5%; with no band no two sweeps could be "
                f"the same, and past ±{MAX_BAND:.0%} a 1.5x change would count as none)")


@contextmanager
def using_band(band: float) -> Iterator[None]:
    """Every verdict decided inside (compare, the conclusions, the claims, the expectations, the
    regime, history) decides with ±band instead of BAND: one band for one analysis (`--band`)."""
    token = _band.set(check_band(band))
    try:
        yield
    finally:
        _band.reset(token)


@dataclass(frozen=True)
class Decision:
    """A ratio's verdict under the band, the numbers it rests on, and what would decide it."""

    outcome: str  # ABOVE, BELOW, SAME or INCONCLUSIVE
    ratio: float | None
    low: float | None
    high: float | None
    band: float
    processes_needed: int | None = None  # a side, to decide an inconclusive ratio (None: decided, or unknown)
    why: str = ""
    equivalence: tuple[float, float] | None = None  # the 90% interval a `same` rests on, where the 95% one leaves the band

    @property
    def decided(self) -> bool:
        return self.outcome != INCONCLUSIVE

    def interval(self) -> str:
        """`1.23x [1.10, 1.38]` (the ratio alone where it has no interval)."""
        if self.ratio is None:
            return "?"
        if self.low is None or self.high is None:
            return f"{self.ratio:.3g}x"
        return f"{self.ratio:.3g}x [{self.low:.3g}, {self.high:.3g}]"

    def need(self) -> str:
        """`5 processes a side would decide it` ('' when decided or unknown)."""
        if self.decided or self.processes_needed is None:
            return ""
        if self.low is None or self.high is None:
            return "3 processes a side or more (run.repeats=3) would show the spread between processes"
        if self.processes_needed > MAX_PROCESSES:
            return f"more than {MAX_PROCESSES} processes a side would be needed: it sits on the ±{percent(self.band)} band's edge"
        return f"{self.processes_needed} processes a side would decide it at the spread observed"


def decide(ratio: float | None, low: float | None, high: float | None, repeats: int | None = None,
           band: float | None = None, df: float | None = None, same: tuple[float | None, float | None] | None = None
           ) -> Decision:
    """The verdict on `ratio` with its interval [low, high], measured over `repeats` processes a
    side (the fewer of the two sides; None: unknown, then no processes_needed); `df`: the degrees
    of freedom of the t quantile the interval was built with (default repeats - 1); `same`: the
    90% interval built the same way, for two one-sided tests (None: the 95% one decides `same`);
    `band` None: the current one (`current_band`)."""
    band = current_band() if band is None else check_band(band)
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return Decision(INCONCLUSIVE, ratio, low, high, band, why="no ratio")
    if low is None or high is None or not (low >= 0) or not (high >= low) or high == 0:
        return Decision(INCONCLUSIVE, ratio, low, high, band, processes_needed=3 if repeats is not None else None,
                        why="no interval: one process a side says nothing of the variation between processes")
    up, down = 1 + band, 1 / (1 + band)
    if low > up:
        return Decision(ABOVE, ratio, low, high, band, why=f"interval above +{percent(band)}")
    if high < down:
        return Decision(BELOW, ratio, low, high, band, why=f"interval below -{percent(band)}")
    if down <= low and high <= up:
        return Decision(SAME, ratio, low, high, band, why=f"interval within ±{percent(band)}")
    tost = same if same is not None and same[0] is not None and same[1] is not None and same[0] <= ratio <= same[1] \
        else None
    if tost is not None and down <= tost[0] and tost[1] <= up:
        return Decision(SAME, ratio, low, high, band, equivalence=tost,
                        why=f"90% interval {tost[0]:.3g}–{tost[1]:.3g} within ±{percent(band)} (two one-sided tests at 5%)")
    return Decision(INCONCLUSIVE, ratio, low, high, band,
                    processes_needed=processes_needed(ratio, low, high, repeats, band, df=df),
                    why=f"interval straddles the ±{percent(band)} band")


def decide_test(test: RatioTest, repeats: int | None, band: float | None = None) -> Decision:
    """`decide` on a ratio test's ratio, its 95% interval (with its degrees of freedom) and its 90%
    one (for `same`)."""
    return decide(test.ratio, test.low, test.high, repeats, band, df=test.df, same=(test.low90, test.high90))


def processes_needed(ratio: float, low: float, high: float, repeats: int | None, band: float | None = None,
                     level: float = LEVEL, df: float | None = None) -> int | None:
    """The smallest number of processes a side whose interval (this one's, narrowed as
    sqrt(repeats / n), with t for df * (n - 1) / (repeats - 1) degrees of freedom: df those of the
    interval now, default repeats - 1) would decide `ratio`; None without `repeats` >= 2;
    MAX_PROCESSES + 1 when none up to MAX_PROCESSES would."""
    if repeats is None or repeats < 2:
        return None
    band = current_band() if band is None else band
    if not low > 0:  # an interval down to 0: its spread on log scale is not one to narrow by a count
        return None
    d = math.log(ratio)
    half = max(d - math.log(low), math.log(high) - d)  # the wider side, on log scale
    if half <= 0 or not math.isfinite(half):
        return None if half <= 0 else MAX_PROCESSES + 1
    m = math.log(1 + band)
    gap = abs(abs(d) - m)  # to the band's nearest edge: clear it outward, or fit inside
    if gap == 0:
        return MAX_PROCESSES + 1
    per = (df if df and df > 0 else repeats - 1) / (repeats - 1)  # degrees of freedom per process beyond one
    se = half / t_quantile(1 - (1 - level) / 2, per * (repeats - 1))  # what the interval says of the standard error now
    # clearing the edge outward is a two-sided test (the 95% interval); fitting inside, two one-sided ones (the 90%)
    tail = 1 - (1 - level) / 2 if abs(d) > m else level
    z = t_quantile(tail, 1e6)  # t is above the normal quantile for every n: no n below this one can do
    n = max(repeats + 1, math.ceil(repeats * (z * se / gap) ** 2))
    while n <= MAX_PROCESSES:
        if t_quantile(tail, per * (n - 1)) * se * math.sqrt(repeats / n) < gap:
            return n
        n += 1
    return MAX_PROCESSES + 1
