"""Expectations checked: every statement of a sweep's `expect` (the grammar is
profsweep.expectations') against every job and grid point it applies to (expectations.csv; the
report opens with the mismatches), and the article's claims as data (claims.csv).
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any, Mapping, Sequence

from profsweep.expectations import (  # noqa: F401  (the grammar, used through this module by the analysis)
    COMPARISONS, CUDA_ONLY, EXPECT_FILE, EXPECTATIONS_FILE, RELATIVE, ClaimSpec, Condition, Expectation,
    ExpectationError, compare_values, number_of, series_of, show_value, is_claim, is_known, known_metrics, parse, parse_all,
    parse_claim, parse_claims, unknown_operators,
)
from analysis.tables import SweepTables, regime_doubt
from profsweep.columns import KERNEL_COLUMNS, OP_COLUMNS  # noqa: F401
from profsweep.contract import GridPoint, amount, flag, read_json


INCONCLUSIVE = "inconclusive"


def interval_of(row: Mapping[str, Any], terms: Sequence[str]) -> tuple[float, float] | None:
    """The 95% interval of a metric (or a sum of metrics) of a summary row, where it has one
    (`<metric>_low`, `<metric>_high`: the timing metrics measured over repeats)."""
    lows = [number_of(row.get(f"{t}_low")) for t in terms]
    highs = [number_of(row.get(f"{t}_high")) for t in terms]
    if None in lows or None in highs:
        return None
    return sum(lows), sum(highs)  # type: ignore[arg-type]


def compare_interval(low: float, high: float, cmp: str, expected: Any) -> bool | str | None:
    """A comparison of an interval with a number: True when the whole interval satisfies it,
    False when none of it does, INCONCLUSIVE when the interval straddles the number. Equality
    is checked on the value, not the interval (None: not for this comparison)."""
    value = number_of(expected)
    if value is None or cmp not in ("<", "<=", ">", ">="):
        return None
    whole, none_ = (high, low) if cmp in ("<", "<=") else (low, high)
    if COMPARISONS[cmp](whole, value):
        return True
    if not COMPARISONS[cmp](none_, value):
        return False
    return INCONCLUSIVE


def separated(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Two intervals that do not overlap."""
    return a[1] < b[0] or b[1] < a[0]


def _extremes(expectations: Sequence[Expectation], jobs: Sequence[GridPoint]) -> dict[tuple, Any]:
    """(key, smallest|largest, series) -> the value, for the conditions that name one."""
    keys = {c.key for e in expectations for c in e.where if c.value in RELATIVE}
    found: dict[tuple, list[float]] = {}
    for job in jobs:
        if not job.usable:
            continue
        for key in keys:
            number = number_of(job.get(key))
            if number is not None:
                found.setdefault((key, series_of(job)), []).append(number)
    out = {}
    for (key, series), values in found.items():
        out[(key, "smallest", series)], out[(key, "largest", series)] = min(values), max(values)
    return out


def _calls(entry: Any) -> int:
    return int(entry["calls"]) if isinstance(entry, Mapping) else int(entry)


def _per_step(found: int, job: Mapping[str, Any]) -> float | None:
    steps = number_of(job.get("steps"))
    return found / steps if steps else None


def _attribute(e: Expectation, matched: Mapping[str, Any]) -> tuple[bool | None, str]:
    """Every matching op or kernel against the expectation: (verdict, what was measured)."""
    if not matched:
        return False, "none"
    verdicts, seen = [], []
    columns = OP_COLUMNS if e.kind == "op" else KERNEL_COLUMNS
    for name, entry in matched.items():
        row = entry if isinstance(entry, Mapping) else {"calls": entry}
        measured = row.get(e.column)
        expected = row.get(e.value) if isinstance(e.value, str) and e.value in columns else e.value
        verdicts.append(compare_values(measured, e.cmp, expected))
        shown = _shown(measured) if measured is not None else "no value"
        seen.append(shown if expected is e.value else f"{shown}/{show_value(expected)}")
    verdict = False if False in verdicts else None if None in verdicts else True
    return verdict, f"{', '.join(seen)} in {amount(len(matched), e.kind)}"


def _shown(value: Any) -> str:
    """A measured value: 4 significant digits for a number with a fraction (1.473, not
    1.4731687143887233), as its interval has; anything else as the expectation shows it."""
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        return f"{value:.4g}"
    return show_value(value)


def check(expectations: Sequence[Expectation], jobs: Sequence[GridPoint],
          op_calls: Mapping[str, Mapping[str, Any]], kernel_calls: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (expectation, job it applies to): what was measured and whether it holds.
    op_calls / kernel_calls: job -> name -> its calls, or its row of ops.csv / kernels.csv (which
    the COLUMN forms need)."""
    rows = []
    extremes = _extremes(expectations, jobs)
    for e in expectations:
        for job in jobs:
            if not job.usable or not e.applies(job, extremes):
                continue
            name = str(job["job"])
            if e.kind == "metric":
                values = [job.get(t) for t in e.terms] if len(e.terms) > 1 else [job.get(e.subject)]
                numbers = [number_of(v) for v in values]
                measured = values[0] if len(values) == 1 else (sum(numbers) if None not in numbers else None)
                verdict = compare_values(measured, e.cmp, e.value)
                shown = _shown(measured) if measured is not None else "no value"
                interval = interval_of(job, e.terms or (e.subject,)) if measured is not None else None
                if e.terms == ("regime",) and verdict is not None and (
                        flag(job.get("regime_uncertain"))
                        or (flag(job.get("regime_at_ridge")) and e.value in ("compute-bound", "memory-bound"))):
                    verdict = INCONCLUSIVE  # work / host may be either side of 1, or intensity of the ridge
                    shown += f" (uncertain: {regime_doubt(job)})"
                if interval is not None:
                    # measured over repeats: it holds only when its whole interval does
                    verdict = compare_interval(*interval, e.cmp, e.value) if e.cmp not in ("==", "!=") else verdict
                    shown = f"{_shown(measured)} [{interval[0]:.4g}, {interval[1]:.4g}]"
            else:
                calls = op_calls.get(name, {}) if e.kind == "op" else kernel_calls.get(name, {})
                matched = {k: v for k, v in calls.items() if (k == e.subject if e.kind == "op"
                                                               else fnmatch.fnmatchcase(k, e.subject))}
                found = sum(_calls(v) for v in matched.values())
                if e.cmp in ("present", "absent"):
                    verdict = (found > 0) == (e.cmp == "present")
                    shown = f"{found} calls" if found else "absent"
                elif e.column is None:
                    per_step = _per_step(found, job)
                    verdict = compare_values(per_step, e.cmp, e.value)
                    shown = f"{per_step:g} per step" if per_step is not None else "no value"
                else:
                    verdict, shown = _attribute(e, matched)
            rows.append({"expectation": e.text, "job": name, "measured": shown, "expected": e.expected,
                         "holds": "n/a" if verdict is None else verdict if verdict == INCONCLUSIVE
                         else "true" if verdict else "false"})
    return rows


def _on_device(job: Mapping[str, Any]) -> bool:
    return number_of(job.get("device_us_per_step")) is not None


def _summary(label: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """`regime: overhead-bound (4 jobs)`; the jobs named where a value does not hold."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        groups.setdefault((r["measured"], r["holds"]), []).append(r["job"])
    order = sorted(groups.items(), key=lambda kv: (kv[0][1] != "false", -len(kv[1])))
    said = []
    for (measured, holds), names in order:
        count = amount(len(names), "job")
        named = holds != "true" or len(names) == 1  # the jobs named where it does not hold
        said.append(f"{measured} ({count}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                    if named else f"{measured} ({count})")
    return f"{label}: {'; '.join(said)}"


def judge(claim: ClaimSpec, jobs: Sequence[GridPoint], op_calls: Mapping[str, Mapping[str, Any]],
          kernel_calls: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """A claim against the sweep's jobs: {measured, holds (true|false|n/a), jobs}."""
    ok = [j for j in jobs if j.usable]
    extremes = _extremes(claim.checks, ok)
    on_device = [j for j in ok if _on_device(j)]
    pool = on_device if claim.cuda_only else ok
    for e, required in zip(claim.checks, claim.required):
        if required and not any(e.applies(j, extremes) for j in pool):
            cpu_only = claim.cuda_only and (not on_device or any(e.applies(j, extremes) for j in ok))
            return {"measured": CUDA_ONLY if cpu_only else claim.needs or f"no job for '{e.text}'",
                    "holds": "n/a", "jobs": ""}
    said, verdicts, names = [], [], []
    for e, required in zip(claim.checks, claim.required):
        rows = check([e], pool, op_calls, kernel_calls)
        if not rows:
            continue
        said.append(_summary(e.label, rows))
        holds = {r["holds"] for r in rows}
        verdicts.append("false" if "false" in holds else INCONCLUSIVE if INCONCLUSIVE in holds
                        else "true" if "true" in holds else "n/a" if required else "true")
        names += [r["job"] for r in rows if r["job"] not in names]
    holds = ("false" if "false" in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts
             else "n/a" if "n/a" in verdicts or not verdicts else "true")
    return {"measured": "; ".join(said), "holds": holds, "jobs": ", ".join(names)}


# --- a sweep's expectations ------------------------------------------------------------------------


def check_expectations(tables: SweepTables) -> list[dict[str, Any]] | None:
    """The rows of expectations.csv for the sweep's expect.json (None when it expects nothing)."""
    try:
        texts = read_json(tables.folder / EXPECT_FILE)["expect"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        expectations = parse_all(texts)
    except ExpectationError as exc:  # written by another version: say so, check nothing
        return [{"expectation": str(texts), "job": "", "measured": str(exc), "expected": "", "holds": "n/a"}]
    # Whole rows: an expectation may read any column of ops.csv / kernels.csv, not only calls.
    ops = {job: {o["name"]: o for o in rows} for job, rows in tables.ops.items()}
    kernels: dict[str, dict[str, dict[str, Any]]] = {}
    for k in tables.kernels:
        kernels.setdefault(k["job"], {})[k["name"]] = k
    return check(expectations, tables.points, ops, kernels)
