"""Numbers in words, for every page, plot and terminal line of the analysis: one convention each.

- durations are given in µs and said in the unit that reads best (19 µs, 2.03 ms, 1.58 s);
- bytes are binary (KiB, MiB, GiB) in the text and on the plots' axes alike;
- rates take an SI prefix (417 GFLOP/s); ratios are written with ×;
- an interval whose ends lie more than TOO_WIDE times apart (or that reaches zero) says nothing
  in numbers and is said to be too wide to read, wherever it is shown (`too_wide`).

The one rule that turns a ratio and its interval into a verdict is `profsweep.decide`; this module
only says numbers.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from analysis.trace import same_op
from profsweep import stats

TOO_WIDE = 100  # an interval whose ends are further apart than this says nothing in numbers


def fmt(value: Any) -> str:
    """A number as the report's tables print it (crossover 175.2, 0.314, 1,024.0, 9.25e+09)."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if abs(value) >= 1e6:
            return f"{value:.3g}"
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def us(value: float | None, signed: bool = False) -> str:
    """A duration given in µs, in the unit that reads best: 19 µs, 2.03 ms, 1.58 s; with
    `signed`, a change with its sign (+1.57 s, -850 µs, ±0 µs). "?" where there is none."""
    number = stats.number(value)
    if number is None:
        return "?"
    sign = ("+" if number > 0 else "-" if number < 0 else "±") if signed else ("-" if number < 0 else "")
    size = abs(number)
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if size >= scale:
            return f"{sign}{size / scale:.3g} {unit}"
    return f"{sign}{size:.3g} µs"


def rate(value: float | None, unit: str) -> str:
    """A rate with an SI prefix: 417 GFLOP/s, 12.3 GB/s."""
    if value is None:
        return "?"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


BYTE_UNITS = [" B", " KiB", " MiB", " GiB", " TiB"]


def nbytes(n: float | None) -> str:
    """Bytes, binary as on the plots' axes: 512 B, 1.5 KiB, 64 MiB, 2.1 GiB."""
    if n is None:
        return "?"
    return "0 B" if n == 0 else _number(n, 1024, BYTE_UNITS)


def count(x: float) -> str:
    """A count as a person writes it: 6, 5.5."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def times(x: float) -> str:
    """A ratio: 0.0029×, 0.50×, 12.0×, 272×."""
    return (f"{x:.2g}×" if x < 0.1 else f"{x:.2f}×" if x < 10 else f"{x:.1f}×" if x < 100 else f"{x:,.0f}×")


def too_wide(low: Any, high: Any) -> bool:
    """Whether an interval says nothing in numbers: it reaches zero, or its ends lie more than
    TOO_WIDE times apart (two noisy repeats give that)."""
    a, b = stats.number(low), stats.number(high)
    return a is not None and b is not None and (a <= 0 or b / a > TOO_WIDE)


def interval(row: dict[str, Any], key: str, unit: Callable[[float], str] | None = None,
             always: bool = False) -> str:
    """` [low, high]` of a summary value over its repeats ('' with one repeat unless `always`; said
    to be too wide where `too_wide` says so)."""
    low, high = stats.number(row.get(f"{key}_low")), stats.number(row.get(f"{key}_high"))
    show = unit or times
    if always and low is not None and row.get(f"{key}_high") == math.inf:
        return f" [{show(low)}, ∞]"
    if low is None or high is None or (not always and (stats.number(row.get("repeats")) or 0) < 2):
        return ""
    if always and low == 0 and high >= 0:  # a bound at zero (the model's floor in some draws): said as such
        return f" [0, {show(high)}]"
    if too_wide(low, high):
        n = int(stats.number(row.get("repeats")) or 0)
        return f" [too wide to read{f': {n} repeats' if n else ''}]"
    return f" [{show(low)}, {show(high)}]"


def short_name(name: str, width: int = 60) -> str:
    """An op or kernel name as a sentence can hold it: a compiled graph without its hash, a
    templated kernel cut."""
    name = same_op(str(name))
    return name if len(name) <= width else name[:width - 1] + "…"


# --- the plots' ticks: the same units, fewer digits ----------------------------------------------


def _number(value: float, step: float, units: list[str], digits: int = 3) -> str:
    """`value` in the largest unit of `units` (each `step` times the one before) it reaches."""
    if value == 0:
        return "0"
    index = 0
    while index + 1 < len(units) and abs(value) >= step ** (index + 1) * (1 - 0.5 * 10 ** -digits):
        index += 1  # (999.9999 µs reads 1 ms, not 1e+03 µs)
    return f"{value / step ** index:.{digits}g}{units[index]}"


def size_label(value: float) -> str:
    """A size or count as people write it: 64, 512, 1k (1024), 4k, 1.5k, 16k, 1M."""
    if value == 0 or abs(value) < 1000:
        return f"{value:.4g}"
    base = 1024 if value % 256 == 0 else 1000  # 1024 -> 1k, 1536 -> 1.5k, 1000 -> 1k
    return _number(value, base, ["", "k", "M", "G"], digits=4)


def duration_label(value: float) -> str:
    """Microseconds as a tick reads them: 5 µs, 250 µs, 2 ms, 1.5 s (100 ns below a µs)."""
    if value != 0 and abs(value) < 1:
        return f"{value * 1e3:.3g} ns"
    return _number(value, 1000, [" µs", " ms", " s"])


def bytes_label(value: float) -> str:
    return _number(value, 1024, BYTE_UNITS)


def rate_label(value: float) -> str:
    return _number(value, 1000, ["", "k", "M", "G", "T", "P"])
