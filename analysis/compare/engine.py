"""Compare two sweeps (or two single runs) grid point by grid point, with verdicts that know the
noise; or two single traces, op by op and kernel by kernel.

    python -m analysis compare BASE NEW [--out DIR] [--ignore KEY ...] [--fail-if-slower R] [--fdr Q]

Pairing: by what was measured, never by folder names, job numbers or config hashes: the
workload and its settings, size, dtype, compile, warmup, train, optimizer, the device it ran on,
the profiler schedule, the compiler settings, run.isolation, run.compile_cache,
run.warmup_iters and run.threads (PAIR_KEYS, PAIR_PREFIXES). `--ignore compile` pairs eager
with compiled jobs, `--ignore device` CPU with CUDA.

Verdict, per pair of grid points. The unit of replication is the repeat (one job process): the
samples are each repeat's steps (device time per step where both sides have it, else the
un-profiled step where both sides timed it, else the profiled step's host duration), and the
ratio NEW/BASE of the two medians of repeat medians gets a 95% interval from a hierarchical
bootstrap over both sides' repeats, made honest for few repeats (profsweep.stats.ratio_test).
`slower` when the whole interval lies above 1 + MARGIN, `faster` when it lies below
1 / (1 + MARGIN), `same` when the 90% interval (two one-sided tests at 5%) lies within
[1 / (1 + MARGIN), 1 + MARGIN], else `inconclusive`, as it is when a side has a single repeat or was measured while other processes
loaded the machine (its `noise_load`). Across the grid, a change is a verdict only when it is a
discovery of Benjamini–Hochberg at `--fdr` (default 0.05) over the pairs' p-values. Identical
samples on both sides (a sweep compared with itself) are `same`, ratio 1.

What changed in the work, per pair (ops_diff.csv, compare.html): every op by its self time on
the host and every kernel by its time on the device, per profiled step of each side, the median
over a grid point's repeats; calls per step beside; ranked by the size of the change in time,
slower or faster (`time_diff`). Annotations (`ProfilerStep#N`, record_function) are not ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from analysis.diff import Use, calls_changed, environment_diff, per_step, same_probe, time_diff
from analysis.points import (ALLOCATOR_REMEDY, NOT_PAIRING, PAIR_KEYS, PAIR_PREFIXES, PYTHON_PROBES, allocator_held,
                             faults_apart, pair_key_of, pairing_columns, unkept)
from analysis.compare.side import CompareError, Side, kernel_uses, op_uses
from analysis.text import us
from profsweep import stats
from profsweep.contract import ENVIRONMENT_FILE, GridPoint, flag, point_jobs, timed_samples
from profsweep.decide import ABOVE, BAND, BELOW, FDR, MAX_PROCESSES, SAME, current_band, decide_test, percent

MARGIN = BAND  # what counts as the same: within 5% (profsweep.decide, the one rule)
VERDICT_ORDER = {"slower": 0, "faster": 1, "inconclusive": 2, "same": 3}
MORE_REPEATS = 3  # what a user is told to rerun with when one repeat per side says nothing


# --- verdicts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    verdict: str
    ratio: float | None  # NEW / BASE of the medians of repeat medians
    low: float | None
    high: float | None
    why: str
    p_value: float | None = None
    processes_needed: int | None = None  # a side, to decide an inconclusive pair (profsweep.decide)


def verdict(base: Sequence[Sequence[float]], new: Sequence[Sequence[float]], seed: int = 0,
            band: float | None = None) -> Verdict:
    """The rule of the module docstring on each side's samples, one list per repeat (before the
    control of false discoveries across the grid): profsweep.decide on the ratio test's interval."""
    band = current_band() if band is None else band
    test = stats.ratio_test(base, new, margin=band, seed=seed)
    if test.ratio is None:
        return Verdict("inconclusive", None, None, None, test.why)
    if test.why == "identical samples":
        return Verdict("same", 1.0, 1.0, 1.0, "identical samples", 1.0)
    reps = (sum(1 for g in base if stats.clean(g)), sum(1 for g in new if stats.clean(g)))
    if (test.low is None or test.high is None) and min(reps) >= 2:  # samples no interval can be built on
        return Verdict("inconclusive", test.ratio, None, None, f"no interval: {test.why}")
    if test.low is None or test.high is None:
        return Verdict("inconclusive", test.ratio, None, None,
                       f"{'1 repeat per side' if reps == (1, 1) else f'{reps[0]} vs {reps[1]} repeats'}: one process "
                       f"says nothing of the variation between processes; rerun both with run.repeats={MORE_REPEATS} "
                       f"({MORE_REPEATS} processes a side or more show that spread)", None, MORE_REPEATS)
    d = decide_test(test, min(reps), band)
    interval = f"95% interval {test.low:.3f}–{test.high:.3f}"
    if d.outcome == ABOVE:
        return Verdict("slower", test.ratio, test.low, test.high, interval, test.p_value)
    if d.outcome == BELOW:
        return Verdict("faster", test.ratio, test.low, test.high, interval, test.p_value)
    if d.outcome == SAME:  # the 95% interval within the band, or the 90% one (two one-sided tests)
        within = f" within ±{percent(band)}" if d.equivalence is None else f"; {d.why}"
        return Verdict("same", test.ratio, test.low, test.high, interval + within, test.p_value)
    need = d.need()
    return Verdict("inconclusive", test.ratio, test.low, test.high,
                   interval + f" straddles the ±{percent(band)} band" + (f": {need}" if need else ""), test.p_value,
                   d.processes_needed)


def control_discoveries(pairs: list[dict[str, Any]], fdr: float = FDR) -> None:
    """Benjamini–Hochberg over the pairs that have a p-value: a `slower` or `faster` pair that is
    not among the discoveries becomes `inconclusive`, with why."""
    found = stats.benjamini_hochberg([p.get("p_value") for p in pairs], fdr)
    tested = sum(1 for p in pairs if p.get("p_value") is not None)
    for pair, discovered in zip(pairs, found):
        if pair["verdict"] in ("slower", "faster") and not discovered:
            pair["verdict_why"] += (f"; {pair['verdict']} by itself (p={pair['p_value']:.3g}), but not a discovery "
                                    f"at a false discovery rate of {fdr:g} over {tested} pairs")
            pair["verdict"] = "inconclusive"


MIN_SHIFT_PAIRS = 3  # fewer pairs moving one way happens by chance too often (1 in 4 for three)


def grid_shift(pairs: Sequence[dict[str, Any]], band: float | None = None) -> str | None:
    """What to say when every pair moved the same way by about the same factor, at least half the
    band (smaller shifts the processes' own spread makes), not all `same`:
    a shift common to the grid, which drift of the machine's speed between the two sweeps makes
    as a change that moves every point alike does, and which no interval over one sweep's
    processes includes (docs/numbers.md, "Drift between sweeps"); None otherwise. "About the same
    factor": their geometric mean lies within every pair's interval."""
    judged = [p for p in pairs if stats.number(p.get("step_ratio")) is not None and p["step_ratio"] > 0
              and p.get("verdict_why") != "identical samples"]
    if len(judged) < MIN_SHIFT_PAIRS or all(p["verdict"] == "same" for p in judged):
        return None
    logs = [math.log(p["step_ratio"]) for p in judged]
    if not (all(d > 0 for d in logs) or all(d < 0 for d in logs)):
        return None
    together = math.exp(sum(logs) / len(logs))
    if abs(math.log(together)) < math.log(1 + (current_band() if band is None else band)) / 2:
        return None
    for p in judged:
        low, high = stats.number(p.get("interval_low")), stats.number(p.get("interval_high"))
        if low is not None and high is not None and not low <= together <= high:
            return None  # the pairs moved by factors of their own: not one shift
    way = "slower" if together > 1 else "faster"
    ratios = sorted(p["step_ratio"] for p in judged)
    return (f"all {len(judged)} pairs moved the same way, NEW {ratios[0]:.3g}-{ratios[-1]:.3g}x BASE ({together:.3g}x "
            f"together, within every pair's interval): a shift common to the grid. Each interval is over its own "
            f"sweep's processes; the machine running at another speed from one sweep to the next moves every point "
            f"alike and is not in them, and a change that makes every point {way} alike looks the same. Identical "
            f"sweeps run one after the other on a 2-core VM differed by up to 9% (docs/numbers.md, drift between "
            f"sweeps). To tell them apart, run BASE again after NEW and compare BASE with that rerun: what the A/A "
            f"pair shows is this machine's drift between sweeps")


def diff_lines(diff: dict[str, Any], top: int = 20) -> list[str]:
    """The op and kernel diff of two traces, ranked, for the terminal."""
    lines = []
    for what in ("ops", "kernels"):
        rows = diff[f"{what}_diff"]
        if not rows:
            continue
        lines.append(f"{what} by change in {'self host' if what == 'ops' else 'device'} time per step "
                     "(base -> new, change; calls per step base -> new):")
        for d in rows[:top]:
            ratio = f"{d['self_us_per_step_ratio']:.2f}x" if d["self_us_per_step_ratio"] is not None else "-"
            base, new, diff_us = d["self_us_per_step_base"], d["self_us_per_step_new"], d["self_us_per_step_diff"]
            lines.append(f"  {d['rank']:>3} {us(base):>9} -> {us(new):>9}  {us(diff_us, True):>10} "
                         f"{ratio:>8}  {d['change']:<8} calls {d['calls_per_step_base']:g} -> "
                         f"{d['calls_per_step_new']:g}  {d['name'][:90]}")
        if len(rows) > top:
            lines.append(f"  ... {len(rows) - top} more")
    return lines or ["no op or kernel changed its time or calls per step"]


# --- sides ---------------------------------------------------------------------------------------


def _repeat_jobs(side: Side, point: dict[str, Any]) -> list[dict[str, Any]]:
    names = point_jobs(point)
    return [side.jobs[n] for n in names if n in side.jobs] or [point]


def _uses(side: Side, point: dict[str, Any], what: str) -> list[dict[str, Use]]:
    """Each repeat's ops (or kernels) per its own profiled steps."""
    table = side.ops if what == "op" else side.kernels
    return [per_step(table.get(job["job"], []), job.get("steps")) for job in _repeat_jobs(side, point)]


def _samples(side: Side, point: dict[str, Any], on: str) -> list[tuple[list[float], dict[str, Any]]]:
    """Each repeat's samples (its steps' device time, its un-profiled steps, or its profiled
    steps' host duration) with its row, for the repeats that have samples."""
    found = ((timed_samples(job) if on == "timed" else stats.clean(s.get(on) for s in side.steps.get(job["job"], [])),
              job) for job in _repeat_jobs(side, point))
    return [(g, job) for g, job in found if g]


# The probes each job times before and after its un-profiled steps (experiments/job.py), in words
PROBES = {"speed_probe_us": "the machine's speed probe (a 64x64 matmul timed before and after the steps)",
          "overhead_probe_us": "the machine's overhead probe (a one-element torch.add timed before and after the "
                               "steps: the Python call and dispatch an overhead-bound step spends its time on)",
          "cache_probe_us": "the machine's cache probe (one thread adding 1.5 MiB, past a core's own caches, timed "
                            "before and after the steps: the cache and memory the host shares with other tenants)"}


def _probed(repeats: list[tuple[list[float], dict[str, Any]]], on: str,
            probe: str = "speed_probe_us") -> list[tuple[list[float], float]]:
    """Each repeat's samples with a probe of the machine's speed in its process (PROBES), for the
    repeats that have one (a probe that could not run is null; a sweep from before the probe has
    none): one process without it must not switch the check off for the others; none where the
    samples are the device's time, which the host's speed does not set."""
    if on == "device_us":
        return []
    found = [(g, stats.number(job.get(probe))) for g, job in repeats]
    return [(g, p) for g, p in found if p is not None and p > 0]  # type: ignore[misc]


# What the probe itself depends on besides the machine's load: where these differ (or the thread
# count), the probe's change is part of what is compared, and nothing is vetoed by it.
def against_the_machine(judged: Verdict, base: list[tuple[list[float], float]], new: list[tuple[list[float], float]],
                        band: float | None = None, comparable: bool = True, probe: str = "speed_probe_us"
                        ) -> tuple[Verdict, tuple[float | None, float | None]]:
    """A change of the step is a verdict only if it is one relative to the machine's speed too.

    Each job times a small matmul right before and after its un-profiled steps (speed_probe_us,
    experiments/job.py). A virtual machine's cores are shared with other tenants; while one is
    busy every step runs slower alike, for seconds to minutes, and every process of a sweep run
    then can be slow together: no interval over one sweep's processes shows it. So where the two
    sides' probes differ beyond the band, a `slower` or `faster` verdict stands only where the
    steps, each process's divided by its own probe, give the same verdict; otherwise it is
    `inconclusive`, with the probe's numbers. Only ever a verdict less, never one more. Nothing
    is vetoed where the probes are not `comparable` (another torch, CPU, host or thread count:
    same_probe). Returns the verdict and the two sides' probes (the medians over their repeats;
    None without probes)."""
    band = current_band() if band is None else band
    if not base or not new:
        return judged, (None, None)
    probes = (stats.median([p for _, p in base]), stats.median([p for _, p in new]))
    pb, pn = probes
    if (judged.verdict not in ("slower", "faster") or not comparable or pb is None or pn is None
            or abs(math.log(pn / pb)) <= math.log(1 + band)):
        return judged, probes
    relative = verdict([[v / p for v in g] for g, p in base], [[v / p for v in g] for g, p in new], band=band)
    if relative.verdict == judged.verdict:
        return judged, probes
    shown = (f"{relative.ratio:.3g}x [{relative.low:.3g}, {relative.high:.3g}]" if relative.low is not None
             and relative.high is not None and relative.ratio is not None else "undecided")
    why = (f"{judged.why}; but {PROBES[probe]} took "
           f"{pn / pb:.2f}x as long in NEW's processes as in BASE's ({pb:.3g} -> {pn:.3g} µs), and relative to it "
           f"the step is {shown}, not {judged.verdict}: another tenant of this machine's cores most likely slowed "
           "one side; rerun BASE and NEW when their probes agree")
    needed = relative.processes_needed or _as_many(judged, base, new)
    return Verdict("inconclusive", judged.ratio, judged.low, judged.high, why, None, needed), probes


def against_the_allocator(judged: Verdict, base: list[tuple[list[float], dict[str, Any]]],
                          new: list[tuple[list[float], dict[str, Any]]], band: float | None = None) -> Verdict:
    """A change of the un-profiled step is a verdict only if the code made it, not the allocator's
    state that each process happens to be in.

    A step that frees and allocates big buffers faults them in again every step in some processes
    and not in others (glibc hands them back to the system, or not, as the heap's layout lets
    it): matmul_add 1024 bf16, one sweep's processes 5.0-5.2 ms at ~250 faults a step and one at
    6.3 ms with 976, the next sweep's three all at 6.1 ms with ~990, a false "1.20x slower" in an
    A/A comparison. So a `slower` or `faster` verdict is `inconclusive`, with the faults and the
    remedy that fixes them (ALLOCATOR_REMEDY), where all of these hold: the two sides' processes
    faulted a typical number of pages per timed step apart (points.faults_apart: twice, and 50 more); the
    slower side is the one that faults more; and one side's own processes include some that
    fault the other side's way (past the geometric middle of the two counts) and took, in the
    median, what the other side's took, within the band. Only ever a verdict less, never one more."""
    band = current_band() if band is None else band
    if judged.verdict not in ("slower", "faster") or not base or not new:
        return judged
    sides: list[list[tuple[float, float]]] = []  # per side: (faults per timed step, median step) of each process
    for side in (base, new):
        found = [(stats.number(job.get("timed_minor_faults_per_step")), stats.median(samples)) for samples, job in side]
        if any(f is None or f < 0 or step is None or step <= 0 for f, step in found):
            return judged
        sides.append(found)  # type: ignore[arg-type]
    typical = [stats.median([f for f, _ in side]) for side in sides]
    few, many = sorted(typical)
    slower = 1 if judged.verdict == "slower" else 0  # NEW (1) or BASE (0)
    if not faults_apart(few, many) or typical[slower] != many:
        return judged
    cut = math.sqrt((few + 1) * (many + 1))  # between the two ways, on log scale (a count of 0 too)
    names = ("BASE", "NEW")
    for mixed, other in ((0, 1), (1, 0)):
        their_way = [(f, step) for f, step in sides[mixed] if (f > cut) == (typical[other] > cut)]
        if not their_way:
            continue
        ours, theirs = stats.median([step for _, step in their_way]), stats.median([step for _, step in sides[other]])
        if abs(math.log(ours / theirs)) > math.log(1 + band):
            continue
        cause = ("most likely glibc's allocator, which hands the step's buffers back to the system and gets them "
                 "again in some processes and not in others as each heap's layout lets it, not the code; rerun BASE "
                 f"and NEW with {ALLOCATOR_REMEDY}")
        jobs = [job for side in (base, new) for _, job in side]
        if allocator_held(jobs):
            cause = (f"the state of memory that glibc's heap does not keep though its thresholds were held "
                     f"({unkept(jobs)}), not the code; more processes a side show how often each way comes")
        why = (f"{judged.why}; but BASE's processes faulted a median {typical[0]:,.0f} pages a step and NEW's "
               f"{typical[1]:,.0f}, and {len(their_way)} of {names[mixed]}'s {len(sides[mixed])} faulted "
               f"{names[other]}'s way ({', '.join(f'{f:,.0f}' for f, _ in their_way)}) and took what {names[other]}'s "
               f"did ({us(ours)} against {us(theirs)} a step): {cause}")
        return Verdict("inconclusive", judged.ratio, judged.low, judged.high, why, None,
                       _as_many(judged, [g for g, _ in base], [g for g, _ in new]))
    return judged


def _as_many(judged: Verdict, base: Sequence[Any], new: Sequence[Any]) -> int | None:
    """How many processes a side would decide a pair that a cause other than the spread left
    inconclusive (load, the machine's speed, the allocator's state): as many as decided it here,
    once the cause is gone; or what the spread asked for, where it was undecided too."""
    if judged.processes_needed is not None:
        return judged.processes_needed
    return min(len(base), len(new)) if judged.verdict in ("slower", "faster", "same") and base and new else None


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _ratio(a: Any, b: Any) -> float | None:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return None
    if math.isnan(a) or math.isnan(b) or a == 0:
        return None
    return b / a


def compare_sides(base: Side, new: Side, ignore: Sequence[str] = (), fdr: float = FDR,
                  band: float | None = None) -> dict[str, Any]:
    """Pairs, their verdicts and diffs, the unmatched jobs of each side, the environment diff."""
    band = current_band() if band is None else band
    if not base.points:  # nothing measured to compare against (NEW failing everywhere is the gate's: exit 1)
        first = base.failed[0] if base.failed else None
        raise CompareError(f"{base.folder}: no job finished with a readable trace"
                           + (f" ({first['job']}: {first.get('error') or first.get('status') or 'failed'})" if first else ""))
    known = set(pairing_columns(base.points + new.points, ()))
    wanted = [pair_key_of(k) for k in ignore]
    unknown = [k for k, c in zip(ignore, wanted) if c not in known]
    if unknown:
        raise CompareError(f"--ignore {unknown[0]!r} is not a key that pairs jobs: choose from "
                           f"{', '.join(sorted(known))}")
    columns = pairing_columns(base.points + new.points, wanted)
    by_key: dict[tuple, list[GridPoint]] = {}
    for point in base.points:
        by_key.setdefault(point.pair_identity(columns), []).append(point)
    # In passes: points alike in every ignored key's value pair first, then those apart in one of
    # them, two, ... (--ignore compile on two sweeps of eager and compiled points: eager with eager
    # where both sides have it, whatever order their jobs come in; eager with compiled only where
    # not; with --ignore allocator too, compiled with compiled across the allocator first)
    ignored = [k for k in wanted if k in known]
    partner_of: dict[str, GridPoint] = {}
    used: set[str] = set()

    def candidates(job: GridPoint, apart: int) -> list[GridPoint]:
        mine = job.pair_identity(ignored)
        return [b for b in by_key.get(job.pair_identity(columns), []) if b["job"] not in used and
                sum(x != y for x, y in zip(b.pair_identity(ignored), mine)) == apart]

    for apart in range(len(ignored) + 1):
        # within a pass, the points with the fewest partners this far apart choose first, so that
        # one with several does not take another's only one (then in job order)
        waiting = [j for j in new.points if j["job"] not in partner_of]
        for job in sorted(waiting, key=lambda j: len(candidates(j, apart))):
            found = candidates(job, apart)
            if found:
                used.add(found[0]["job"])
                partner_of[job["job"]] = found[0]
    pairs, unmatched_new = [], []
    for job in new.points:
        partner = partner_of.get(job["job"])
        if partner is None:
            unmatched_new.append(job["job"])
            continue
        pairs.append(_pair(base, partner, new, job, columns, band))
        # what the ignored keys say on each side (the pair's words leave them out): `compile False -> True`
        pairs[-1]["ignored_values"] = "; ".join(
            f"{k} {a}" if a == b else f"{k} {a} -> {b}"
            for k, a, b in zip(ignored, partner.identity(ignored), job.identity(ignored))) or None
    unmatched_base = [j["job"] for j in base.points if j["job"] not in used]
    # a grid point one side measured and the other has, failed: never a point "without a partner"
    failed_new = _failed(base.points, unmatched_base, new.failed, columns)
    failed_base = _failed(new.points, unmatched_new, base.failed, columns)
    unmatched_base = [j for j in unmatched_base if j not in {f["measured_job"] for f in failed_new}]
    unmatched_new = [j for j in unmatched_new if j not in {f["measured_job"] for f in failed_base}]
    twice_base = _twice(base, new, unmatched_base, {b["job"]: n for n, b in partner_of.items()}, columns, ignored)
    twice_new = _twice(new, base, unmatched_new, {n: b["job"] for n, b in partner_of.items()}, columns, ignored)
    unmatched_base = [j for j in unmatched_base if j not in {t["job"] for t in twice_base}]
    unmatched_new = [j for j in unmatched_new if j not in {t["job"] for t in twice_new}]
    if not pairs and not failed_new:
        raise CompareError(f"{base.folder} and {new.folder} have nothing in common: no job of one measured "
                           f"what a job of the other did (paired by {', '.join(columns)}){_apart(base, new, columns)}; "
                           "--ignore KEY pairs across a key")
    control_discoveries(pairs, fdr)
    shift = grid_shift(pairs, band)
    pairs.sort(key=lambda p: (VERDICT_ORDER.get(p["verdict"], 9), -(p["step_ratio"] or 0)))
    # a side without a readable environment.json: one entry that says so, not every key as emptied
    said = ["read" if side.environment else "missing or unreadable" for side in (base, new)]
    environment = ([] if not (base.environment or new.environment) else  # two job folders: nothing to tell apart
                   [{"key": ENVIRONMENT_FILE, "base": said[0], "new": said[1]}] if not (base.environment and new.environment)
                   else [{"key": k, "base": a, "new": b} for k, a, b in environment_diff(base.environment, new.environment)])
    return {"columns": columns, "pairs": pairs, "unmatched_base": unmatched_base,
            "unmatched_new": unmatched_new, "failed_new": failed_new, "failed_base": failed_base,
            "twice_base": twice_base, "twice_new": twice_new,
            **{f"lost_{name}": [{"job": j, "error": e, "point_known": known} for j, e, known in side.lost]
               for name, side in (("base", base), ("new", new))},
            **{f"damaged_{name}": [{"job": j, "error": e} for j, e in side.damaged]
               for name, side in (("base", base), ("new", new))},
            "incomplete_base": base.incomplete, "incomplete_new": new.incomplete,
            "edited_base": base.edited, "edited_new": new.edited,
            "environment": environment, "fdr": fdr, "band": band, "grid_shift": shift,
            "tested": sum(1 for p in pairs if p.get("p_value") is not None)}


def _twice(side: Side, other: Side, unmatched: list[str], partner: dict[str, str],
           columns: list[str], ignored: list[str]) -> list[dict[str, Any]]:
    """The points of `side` left without a partner although `other` has their grid point: another
    point of `side` alike in every key that pairs (and every key --ignore names) took it (a rerun
    into the folder with a setting that does not pair, profiler.active=5, left the first run's
    jobs beside its own). Each: job, the point judged in its place (judged_job), and why, with
    the settings the two differ in."""
    theirs: dict[tuple, list[str]] = {}
    for point in other.points:
        theirs.setdefault(point.pair_identity(columns), []).append(point["job"])
    mine = {p["job"]: p for p in side.points}
    by_other = {o: m for m, o in partner.items()}
    found = []
    for job in unmatched:
        point = mine.get(job)
        if point is None:
            continue
        judged = next((mine[by_other[o]] for o in theirs.get(point.pair_identity(columns), []) if o in by_other
                       and mine[by_other[o]].pair_identity(ignored) == point.pair_identity(ignored)), None)
        if judged is None:  # (apart in a key --ignore names: the pairing asked for leaves it without a partner)
            continue
        keys = sorted({k for r in (point, judged) for k in r
                       if k in PAIR_KEYS or k.startswith(PAIR_PREFIXES) or k in NOT_PAIRING}
                      - {"config_hash"})
        apart = [f"{k} {judged.get(k)} vs {point.get(k)}" for k in keys if repr(judged.get(k)) != repr(point.get(k))]
        found.append({"job": job, "judged_job": judged["job"], "why": (
            f"it pairs with {partner[judged['job']]} as {judged['job']} does, which was judged in its place; they "
            f"differ in {', '.join(apart) if apart else 'their configuration (config_hash)'}: jobs of other settings "
            f"left in {side.folder} by a rerun into it (python -m analysis {side.folder} names them)")})
    return found


def _failed(measured: list[GridPoint], unmatched: list[str], failed: list[GridPoint],
            columns: list[str]) -> list[dict[str, Any]]:
    """The points of `measured` left without a partner whose partner on the other side failed:
    (measured_job: the measured one's first job, failed_job: the failed one's, error: why it failed).
    A job the sweep's process recorded as failed (killed, timed out, a crash: its process wrote no
    record) has no `device`, only the device it asked for: it pairs on that, or on any where it
    asked for `auto`."""
    by_key: dict[tuple, GridPoint] = {}
    anywhere: dict[tuple, GridPoint] = {}  # failed without a device of their own, by the rest of their identity
    at = columns.index("device") if "device" in columns else None
    for f in failed:
        asked = f.get("device_requested")
        if at is None or f.get("device") not in (None, ""):
            by_key.setdefault(f.pair_identity(columns), f)
        elif asked in (None, "", "auto"):
            anywhere.setdefault(_without(f.pair_identity(columns), at), f)
        else:
            key = list(f.pair_identity(columns))
            key[at] = asked
            by_key.setdefault(tuple(key), f)
    found = []
    for point in measured:
        if point["job"] not in unmatched:
            continue
        mine = point.pair_identity(columns)
        other = by_key.get(mine) or (anywhere.get(_without(mine, at)) if at is not None else None)
        if other is not None:
            found.append({"measured_job": point["job"], "failed_job": other["job"],
                          "error": str(other.get("error") or other.get("status") or "failed")})
    return found


def _without(key: tuple, at: int) -> tuple:
    return key[:at] + key[at + 1:]


def _apart(base: Side, new: Side, columns: list[str]) -> str:
    """`; their allocator never meets (BASE system, NEW fixed): --ignore allocator pairs across it,
    and its difference is then in every verdict`: the pairing keys whose values on the two sides
    have none in common ('' when every key shares a value and only their combinations differ)."""
    said = []
    identities = [[p.pair_identity(columns) for p in side.points] for side in (base, new)]
    for k, column in enumerate(columns):
        values = [sorted({str(i[k]) for i in side}) for side in identities]
        if not set(values[0]) & set(values[1]):
            shown = [", ".join(v[:3]) + (", ..." if len(v) > 3 else "") for v in values]
            said.append(f"{column} (BASE {shown[0]}, NEW {shown[1]})")
    if not said:
        return ""
    return (f"; their {'; '.join(said)} never meet: --ignore {' --ignore '.join(s.split(' ')[0] for s in said)} "
            "pairs across, and the difference is then part of every verdict")


def _pair(base: Side, b: dict[str, Any], new: Side, n: dict[str, Any], columns: list[str],
          band: float) -> dict[str, Any]:
    def has(key: str) -> bool:
        return b.get(key) is not None and n.get(key) is not None and not _nan(b[key]) and not _nan(n[key])

    on, said = (("device_us", "device time per step") if has("device_us_per_step") else
                ("timed", "un-profiled step") if has("timed_us_per_step") else ("host_us", "host duration per step"))
    base_repeats, new_repeats = _samples(base, b, on), _samples(new, n, on)
    base_samples, new_samples = [g for g, _ in base_repeats], [g for g, _ in new_repeats]
    judged = verdict(base_samples, new_samples, band=band)
    decided = judged.verdict != "inconclusive"  # by the spread: what follows can only take the verdict away
    loaded = [side for side, point in (("BASE", b), ("NEW", n)) if flag(point.get("noise_load"))]
    if loaded and judged.why != "identical samples":
        reasons = "; ".join(f"{side} noisy: {point.get('noise_reason')}" for side, point in (("BASE", b), ("NEW", n))
                            if side in loaded)
        interval = (f"95% interval {judged.low:.3f}–{judged.high:.3f}; " if judged.low is not None
                    and judged.high is not None else "")
        judged = Verdict("inconclusive", judged.ratio, judged.low, judged.high,
                         f"{interval}{reasons}; rerun {' and '.join(loaded)} on a quiet machine", None,
                         _as_many(judged, base_samples, new_samples))
    comparable = (same_probe(base.environment, new.environment)
                  and stats.number(b.get("torch_threads")) == stats.number(n.get("torch_threads")))
    same_python = base.environment.get("python_version") == new.environment.get("python_version")
    probes: dict[str, tuple[float | None, float | None]] = {}
    for probe in PROBES:  # what slows one part of the machine need not slow another: every probe must agree
        judged, probes[probe] = against_the_machine(judged, _probed(base_repeats, on, probe), _probed(new_repeats, on, probe),
                                                    band, comparable and (same_python or probe not in PYTHON_PROBES), probe)
    if on == "timed":
        judged = against_the_allocator(judged, base_repeats, new_repeats, band)
    if (judged.verdict == "inconclusive" and judged.processes_needed is not None
            and "processes a side" not in judged.why):  # every undecided pair says how many would decide it
        need = judged.processes_needed
        judged = replace(judged, why=f"{judged.why}; " + (
            f"once that cause is gone, {need} processes a side would decide it" if decided else
            f"more than {MAX_PROCESSES} processes a side would be needed at the spread observed"
            if need > MAX_PROCESSES else f"{need} processes a side would decide it at the spread observed"
            + (", a spread the load made (two modes under load are no spread more processes narrow): a quiet "
               "machine first" if loaded else "")))
    row: dict[str, Any] = {c: n.get(c) if n.get(c) is not None else b.get(c) for c in columns}
    row.update({
        "base_job": b["job"], "new_job": n["job"], "variant": n.get("variant"),
        "host_us_per_step_base": b.get("host_us_per_step"), "host_us_per_step_new": n.get("host_us_per_step"),
        "host_us_per_step_ratio": _ratio(b.get("host_us_per_step"), n.get("host_us_per_step")),
        "device_us_per_step_base": b.get("device_us_per_step"), "device_us_per_step_new": n.get("device_us_per_step"),
        "device_us_per_step_ratio": _ratio(b.get("device_us_per_step"), n.get("device_us_per_step")),
        "timed_us_per_step_base": b.get("timed_us_per_step"), "timed_us_per_step_new": n.get("timed_us_per_step"),
        "verdict": judged.verdict, "verdict_on": said,
        "step_ratio": judged.ratio, "interval_low": judged.low, "interval_high": judged.high, "p_value": judged.p_value,
        "verdict_why": judged.why, "processes_needed": judged.processes_needed,
        "repeats_base": len(base_samples), "repeats_new": len(new_samples),
        **{column: value for probe in PROBES for column, value in (
            (f"{probe}_base", probes[probe][0]), (f"{probe}_new", probes[probe][1]),
            (f"{probe.removesuffix('_us')}_ratio", _ratio(*probes[probe])))},
        "noisy_base": b.get("noisy"), "noisy_new": n.get("noisy"),
        "first_call_ms_ratio": _ratio(b.get("first_call_ms"), n.get("first_call_ms")),
        "peak_memory_ratio": _ratio(b.get("peak_memory_bytes"), n.get("peak_memory_bytes")),
    })
    for key in ("step_kernels_median", "step_launches_median", "step_aten_ops_median"):
        row[f"{key}_base"], row[f"{key}_new"] = b.get(key), n.get(key)
    for what in ("op", "kernel"):
        diff = time_diff(_uses(base, b, what), _uses(new, n, what))
        row[f"{what}s_diff"] = diff
        row[f"{what}s_changed"] = calls_changed(diff)  # appeared, vanished or other calls per step
        top = diff[0] if diff else {}
        row[f"{what}_most_changed"] = top.get("name")  # by self time per step, either way
        row[f"{what}_most_changed_us_per_step_diff"] = top.get("self_us_per_step_diff")
    return row


def compare_traces(base: Path, new: Path) -> dict[str, Any]:
    """Two single traces: their ops' self time and their kernels' device time per step, diffed."""
    from analysis.trace import TraceError, analyse_trace

    try:
        a, b = analyse_trace(base), analyse_trace(new)
    except TraceError as exc:
        raise CompareError(str(exc)) from None
    steps_a, steps_b = a["steps"] or 1, b["steps"] or 1

    def kernels(m: dict[str, Any]) -> list[tuple[str, float, float]]:
        return kernel_uses(m["kernels"]) if m["platform"] != "cpu" else []

    return {
        "host_us_per_step_ratio": _ratio(a["self_cpu_total_us"] / steps_a, b["self_cpu_total_us"] / steps_b),
        "steps_base": steps_a, "steps_new": steps_b,
        "ops_diff": time_diff([per_step(op_uses(a["top_ops"]), steps_a)], [per_step(op_uses(b["top_ops"]), steps_b)]),
        "kernels_diff": time_diff([per_step(kernels(a), steps_a)], [per_step(kernels(b), steps_b)]),
    }


