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
1 / (1 + MARGIN), `same` when it lies within [1 / (1 + MARGIN), 1 + MARGIN], else
`inconclusive`, as it is when a side has a single repeat or was measured while other processes
loaded the machine (its `noise_load`). Across the grid, a change is a verdict only when it is a
discovery of Benjamini–Hochberg at `--fdr` (default 0.05) over the pairs' p-values. Identical
samples on both sides (a sweep compared with itself) are `same`, ratio 1.

What changed in the work, per pair (ops_diff.csv, compare.html): every op by its self time on
the host and every kernel by its time on the device, per profiled step of each side, the median
over a grid point's repeats; calls per step beside; ranked by the size of the change in time,
slower or faster (`time_diff`). Annotations (`ProfilerStep#N`, record_function) are not ops.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from analysis.points import (  # noqa: F401  (what a grid point is: compare's and history's pairing)
    NOT_PAIRING, PAIR_DEFAULTS, PAIR_KEYS, PAIR_PREFIXES, identity, pairing_columns,
)
from analysis.trace import is_op, same_op
from profsweep import stats
from profsweep.columns import flat_key
from profsweep.contract import ENVIRONMENT_FILE, flag, point_jobs, point_label, timed_samples, trace_files
from profsweep.decide import ABOVE, BAND, BELOW, SAME, decide

MARGIN = BAND  # what counts as the same: within 5% (profsweep.decide, the one rule)
FDR = 0.05  # the false discovery rate controlled across the pairs
ENVIRONMENT_KEYS = ("torch_version", "cuda_build", "driver_version", "gpus", "cpu_model", "cpu_count",
                    "hostname", "git_commit", "git_dirty", "command", "python_version", "platform")
WHERE_OVERRIDES = ("hydra.sweep.dir=", "hydra.run.dir=", "hydra.sweep.subdir=", "+hydra.sweep.dir=",
                   "++hydra.sweep.dir=")  # where a sweep wrote, not how it ran: left out of the command's diff
VERDICT_ORDER = {"slower": 0, "faster": 1, "inconclusive": 2, "same": 3}
MORE_REPEATS = 3  # what a user is told to rerun with when one repeat per side says nothing


class CompareError(ValueError):
    """Input that cannot be compared; the message names it (exit 2)."""


def pair_key_of(column: str) -> str:
    """The summary column a user's `--ignore` names: workload.hidden -> workload_hidden."""
    return flat_key(column)


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
            band: float = MARGIN) -> Verdict:
    """The rule of the module docstring on each side's samples, one list per repeat (before the
    control of false discoveries across the grid): profsweep.decide on the ratio test's interval."""
    test = stats.ratio_test(base, new, margin=band, seed=seed)
    if test.ratio is None:
        return Verdict("inconclusive", None, None, None, test.why)
    if test.why == "identical samples":
        return Verdict("same", 1.0, 1.0, 1.0, "identical samples", 1.0)
    reps = (sum(1 for g in base if stats.clean(g)), sum(1 for g in new if stats.clean(g)))
    if test.low is None or test.high is None:
        return Verdict("inconclusive", test.ratio, None, None,
                       f"{'1 repeat per side' if reps == (1, 1) else f'{reps[0]} vs {reps[1]} repeats'}: one process "
                       f"says nothing of the variation between processes; rerun both with run.repeats={MORE_REPEATS}")
    d = decide(test.ratio, test.low, test.high, min(reps), band, df=test.df)
    interval = f"95% interval {test.low:.3f}–{test.high:.3f}"
    if d.outcome == ABOVE:
        return Verdict("slower", test.ratio, test.low, test.high, interval, test.p_value)
    if d.outcome == BELOW:
        return Verdict("faster", test.ratio, test.low, test.high, interval, test.p_value)
    if d.outcome == SAME:
        return Verdict("same", test.ratio, test.low, test.high, interval + f" within ±{band:.0%}", test.p_value)
    need = d.need()
    return Verdict("inconclusive", test.ratio, test.low, test.high,
                   interval + f" straddles the ±{band:.0%} band" + (f": {need}" if need else ""), test.p_value,
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


# --- the diff of ops and kernels: self time per step, calls beside ---------------------------------------
#
# An outer join by name, as HTA's TraceDiff, ranked by how much each op's time changed: per
# profiled step, each side divided by its own step count (two sweeps may profile 5 and 20 steps),
# over a grid point's repeats the median of each repeat's per-step figure. Ops are timed by their
# self time on the host, kernels by their time on the device (on the CPU the "kernels" are the
# compute ops, already among the ops: left out).


@dataclass(frozen=True)
class Use:
    """One op's (or kernel's) use in one job, per profiled step."""

    calls: float
    self_us: float  # ops: self time on the host; kernels: time on the device


def per_step(rows: Iterable[tuple[str, float, float]], steps: Any) -> dict[str, Use]:
    """(name, calls, µs) over a job's trace -> per name, per profiled step (a trace without
    `ProfilerStep#` is one step); a compiled graph under any hash is one name."""
    n = stats.number(steps) or 1
    found: dict[str, list[float]] = {}
    for name, calls, us in rows:
        total = found.setdefault(same_op(name), [0.0, 0.0])
        total[0] += calls
        total[1] += us
    return {name: Use(calls / n, us / n) for name, (calls, us) in found.items()}


DIFF_DECIMALS = {"self_us_per_step_base": 3, "self_us_per_step_new": 3, "self_us_per_step_diff": 3,  # ns
                 "self_us_per_step_ratio": 4, "calls_per_step_base": 3, "calls_per_step_new": 3}
DIFF_COLUMNS = ("rank", "name", "change", "self_us_per_step_base", "self_us_per_step_new", "self_us_per_step_diff",
                "self_us_per_step_ratio", "calls_per_step_base", "calls_per_step_new")


def time_diff(base: Sequence[dict[str, Use]], new: Sequence[dict[str, Use]]) -> list[dict[str, Any]]:
    """Per name, from each side's repeats (one dict per repeat, an absent name: not called): the
    median over the repeats of self µs and calls per step, NEW - BASE and NEW / BASE; `change`
    says appeared, vanished, slower, faster or calls (the time the same). Names whose time and
    calls are the same on both sides are left out. Ranked by the size of the change in time,
    either way: what moved the step most comes first, and BASE and NEW swapped rank alike."""

    def median(side: Sequence[dict[str, Use]], name: str, attr: str) -> float:
        return statistics.median(getattr(r[name], attr) if name in r else 0.0 for r in side) if side else 0.0

    rows = []
    for name in sorted({n for r in [*base, *new] for n in r}):
        b, n = median(base, name, "self_us"), median(new, name, "self_us")
        calls_b, calls_n = median(base, name, "calls"), median(new, name, "calls")
        if b == n and calls_b == calls_n:
            continue
        in_base, in_new = any(name in r for r in base), any(name in r for r in new)
        change = ("appeared" if not in_base else "vanished" if not in_new else
                  "slower" if n > b else "faster" if n < b else "calls")
        rows.append({"name": name, "change": change, "self_us_per_step_base": b, "self_us_per_step_new": n,
                     "self_us_per_step_diff": n - b, "self_us_per_step_ratio": n / b if b else None,
                     "calls_per_step_base": calls_b, "calls_per_step_new": calls_n})
    rows.sort(key=lambda r: (-abs(r["self_us_per_step_diff"]),
                             -abs(r["calls_per_step_new"] - r["calls_per_step_base"]), r["name"]))
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return [{k: row[k] for k in DIFF_COLUMNS} for row in rows]


def calls_changed(rows: Iterable[dict[str, Any]]) -> int:
    """How many ops (or kernels) appeared, vanished or changed calls per step."""
    return sum(1 for r in rows if r["calls_per_step_base"] != r["calls_per_step_new"])


def _op_uses(ops: Iterable[dict[str, Any]]) -> list[tuple[str, float, float]]:
    return [(o["name"], o["calls"], o["self_host_us"]) for o in ops if is_op(o)]


def _kernel_uses(kernels: Iterable[dict[str, Any]]) -> list[tuple[str, float, float]]:
    return [(k["name"], k["calls"], k["total_us"]) for k in kernels]


def _duration(us: float | None, signed: bool = False) -> str:
    """µs as a person reads them: 850 µs, 11.7 ms, 1.58 s (with its sign: +1.57 s)."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return ""
    sign = ("+" if us > 0 else "-" if us < 0 else "±") if signed else ("-" if us < 0 else "")
    size = abs(us)
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if size >= scale:
            return f"{sign}{size / scale:.3g} {unit}"
    return f"{sign}{size:.3g} µs"


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
            lines.append(f"  {d['rank']:>3} {_duration(base):>9} -> {_duration(new):>9}  {_duration(diff_us, True):>10} "
                         f"{ratio:>8}  {d['change']:<8} calls {d['calls_per_step_base']:g} -> "
                         f"{d['calls_per_step_new']:g}  {d['name'][:90]}")
        if len(rows) > top:
            lines.append(f"  ... {len(rows) - top} more")
    return lines or ["no op or kernel changed its time or calls per step"]


# --- sides ---------------------------------------------------------------------------------------


@dataclass
class Side:
    folder: Path
    jobs: list[dict[str, Any]]  # one per grid point (summary.csv's rows) with a usable repeat
    steps: dict[str, list[dict[str, Any]]]  # job -> its step rows
    ops: dict[str, list[tuple[str, float, float]]]  # job -> (op, calls, self host µs) over its trace
    kernels: dict[str, list[tuple[str, float, float]]]  # job -> (kernel, calls, device µs); none on the CPU
    environment: dict[str, Any]
    repeats: dict[str, dict[str, Any]] = field(default_factory=dict)  # job -> its row (repeats.csv)


def load_side(folder: Path) -> Side:
    from analysis.points import usable
    from analysis.sweep import analyse_sweep

    folder = Path(folder)
    if not folder.is_dir():
        raise CompareError(f"{folder}: no such folder")
    tables = analyse_sweep(folder)
    points = [p for p in tables.points if usable(p)]
    if not tables.jobs:
        raise CompareError(f"{folder}: not a sweep or a run: no job folder with a metrics.json in it")
    if not points:
        raise CompareError(f"{folder}: no job finished with a readable trace ({len(tables.jobs)} jobs)")
    steps: dict[str, list[dict[str, Any]]] = {}
    for s in tables.steps:
        steps.setdefault(s["job"], []).append(s)
    on_cpu = {str(j["job"]) for j in tables.jobs if j.get("platform") == "cpu"}
    kernels: dict[str, list[tuple[str, float, float]]] = {}
    for k in tables.kernels:
        if k["job"] not in on_cpu:  # the CPU's "kernels" are its compute ops, already among the ops
            kernels.setdefault(k["job"], []).append((k["name"], k["calls"], k["total_us"]))
    try:
        environment = json.loads((folder / ENVIRONMENT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        environment = {}
    return Side(folder, points, steps, {j: _op_uses(ops) for j, ops in tables.ops.items()},
                kernels, environment, {str(j["job"]): j for j in tables.jobs if usable(j)})


def _repeat_jobs(side: Side, point: dict[str, Any]) -> list[dict[str, Any]]:
    names = point_jobs(point)
    return [side.repeats[n] for n in names if n in side.repeats] or [point]


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


def _probed(repeats: list[tuple[list[float], dict[str, Any]]], on: str) -> list[tuple[list[float], float]]:
    """Each repeat's samples with the machine's speed probe of its process (speed_probe_us); none
    where a repeat has no probe (a sweep from before it, a value that is not one) or where the
    samples are the device's time, which the host's speed does not set."""
    probes = [stats.number(job.get("speed_probe_us")) for _, job in repeats]
    if on == "device_us" or any(p is None or p <= 0 for p in probes):
        return []
    return [(g, p) for (g, _), p in zip(repeats, probes)]  # type: ignore[misc]


# What the probe itself depends on besides the machine's load: where these differ (or the thread
# count), the probe's change is part of what is compared, and nothing is vetoed by it.
PROBE_DEPENDS_ON = ("torch_version", "cpu_model", "hostname", "cpu_count")


def same_probe(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two environments' probes measure the same thing: the same torch, CPU and host."""
    return not {k for k, _, _ in environment_diff(a, b)} & set(PROBE_DEPENDS_ON)


def against_the_machine(judged: Verdict, base: list[tuple[list[float], float]], new: list[tuple[list[float], float]],
                        band: float = MARGIN, comparable: bool = True) -> tuple[Verdict, tuple[float | None, float | None]]:
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
    why = (f"{judged.why}; but the machine's speed probe (a 64x64 matmul timed before and after the steps) took "
           f"{pn / pb:.2f}x as long in NEW's processes as in BASE's ({pb:.3g} -> {pn:.3g} µs), and relative to it "
           f"the step is {shown}, not {judged.verdict}: another tenant of this machine's cores most likely slowed "
           "one side; rerun BASE and NEW when their probes agree")
    return Verdict("inconclusive", judged.ratio, judged.low, judged.high, why, None, relative.processes_needed), probes


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
                  band: float = MARGIN) -> dict[str, Any]:
    """Pairs, their verdicts and diffs, the unmatched jobs of each side, the environment diff."""
    known = set(pairing_columns(base.jobs + new.jobs, ()))
    wanted = [pair_key_of(k) for k in ignore]
    unknown = [k for k, c in zip(ignore, wanted) if c not in known]
    if unknown:
        raise CompareError(f"--ignore {unknown[0]!r} is not a key that pairs jobs: choose from "
                           f"{', '.join(sorted(known))}")
    columns = pairing_columns(base.jobs + new.jobs, wanted)
    by_key: dict[tuple, list[dict[str, Any]]] = {}
    for job in base.jobs:
        by_key.setdefault(identity(job, columns), []).append(job)
    pairs, unmatched_new = [], []
    used: set[str] = set()
    for job in new.jobs:
        candidates = [b for b in by_key.get(identity(job, columns), []) if b["job"] not in used]
        if not candidates:
            unmatched_new.append(job["job"])
            continue
        partner = candidates[0]
        used.add(partner["job"])
        pairs.append(_pair(base, partner, new, job, columns, band))
    unmatched_base = [j["job"] for j in base.jobs if j["job"] not in used]
    if not pairs:
        raise CompareError(f"{base.folder} and {new.folder} have nothing in common: no job of one measured "
                           f"what a job of the other did (paired by {', '.join(columns)}); "
                           "--ignore KEY pairs across a key")
    control_discoveries(pairs, fdr)
    pairs.sort(key=lambda p: (VERDICT_ORDER.get(p["verdict"], 9), -(p["step_ratio"] or 0)))
    environment = [{"key": k, "base": a, "new": b} for k, a, b in environment_diff(base.environment, new.environment)]
    return {"columns": columns, "pairs": pairs, "unmatched_base": unmatched_base,
            "unmatched_new": unmatched_new, "environment": environment, "fdr": fdr, "band": band,
            "tested": sum(1 for p in pairs if p.get("p_value") is not None)}


def environment_diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, before, after) for each environment key that differs between two sweeps; values as
    environment.json holds them or as text (the history store's). The command is compared without
    the folder it wrote to: two runs of one command into two folders ran the same way."""
    shown = [(k, _comparable(k, a.get(k)), _comparable(k, b.get(k))) for k in ENVIRONMENT_KEYS]
    return [(k, x, y) for k, x, y in shown if x != y]


def _comparable(key: str, value: Any) -> str:
    if key == "command" and isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if key == "command" and isinstance(value, list):
        value = [arg for arg in value if not str(arg).startswith(WHERE_OVERRIDES)]
    return _show(value)


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else "" if value is None else str(value)


def _pair(base: Side, b: dict[str, Any], new: Side, n: dict[str, Any], columns: list[str],
          band: float = MARGIN) -> dict[str, Any]:
    def has(key: str) -> bool:
        return b.get(key) is not None and n.get(key) is not None and not _nan(b[key]) and not _nan(n[key])

    on, said = (("device_us", "device time per step") if has("device_us_per_step") else
                ("timed", "un-profiled step") if has("timed_us_per_step") else ("host_us", "host duration per step"))
    base_repeats, new_repeats = _samples(base, b, on), _samples(new, n, on)
    base_samples, new_samples = [g for g, _ in base_repeats], [g for g, _ in new_repeats]
    judged = verdict(base_samples, new_samples, band=band)
    loaded = [side for side, point in (("BASE", b), ("NEW", n)) if flag(point.get("noise_load"))]
    if loaded and judged.why != "identical samples":
        reasons = "; ".join(f"{side} noisy: {point.get('noise_reason')}" for side, point in (("BASE", b), ("NEW", n))
                            if side in loaded)
        interval = (f"95% interval {judged.low:.3f}–{judged.high:.3f}; " if judged.low is not None
                    and judged.high is not None else "")
        judged = Verdict("inconclusive", judged.ratio, judged.low, judged.high,
                         f"{interval}{reasons}; rerun {' and '.join(loaded)} on a quiet machine", None)
    comparable = (same_probe(base.environment, new.environment)
                  and stats.number(b.get("torch_threads")) == stats.number(n.get("torch_threads")))
    judged, probes = against_the_machine(judged, _probed(base_repeats, on), _probed(new_repeats, on), band, comparable)
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
        "speed_probe_us_base": probes[0], "speed_probe_us_new": probes[1], "speed_probe_ratio": _ratio(*probes),
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
        return _kernel_uses(m["kernels"]) if m["platform"] != "cpu" else []

    return {
        "host_us_per_step_ratio": _ratio(a["self_cpu_total_us"] / steps_a, b["self_cpu_total_us"] / steps_b),
        "steps_base": steps_a, "steps_new": steps_b,
        "ops_diff": time_diff([per_step(_op_uses(a["top_ops"]), steps_a)], [per_step(_op_uses(b["top_ops"]), steps_b)]),
        "kernels_diff": time_diff([per_step(kernels(a), steps_a)], [per_step(kernels(b), steps_b)]),
    }


# --- outputs ----------------------------------------------------------------------------------------

COMPARE_FILE = "compare.json"
GRID_WORDS = ("workload", "size", "dtype", "compile", "warmup", "train", "device")  # a pair's grid point, in short
SERVED_BASE, SERVED_NEW = "_base", "_new"  # the URL folders the server maps to BASE and NEW
CSV_COLUMNS_FIRST = ("verdict", "step_ratio", "interval_low", "interval_high", "p_value", "verdict_why",
                     "host_us_per_step_ratio", "device_us_per_step_ratio", "base_job", "new_job")


def write_compare(result: dict[str, Any], base: Side, new: Side, out: Path) -> list[Path]:
    """compare.csv, ops_diff.csv, plots/ratio.png and compare.html in `out`, each written atomically."""
    import pandas as pd

    from analysis.files import atomic_write_text
    from analysis.plots import write_ratio_plot

    out.mkdir(parents=True, exist_ok=True)
    pairs = result["pairs"]
    flat_rows = [{k: v for k, v in p.items() if k not in ("ops_diff", "kernels_diff")} for p in pairs]
    frame = pd.DataFrame(flat_rows)
    order = list(result["columns"]) + [c for c in CSV_COLUMNS_FIRST if c in frame]
    frame = frame[order + [c for c in frame.columns if c not in order]]
    atomic_write_text(out / "compare.csv", frame.to_csv(index=False))
    # per pair (in compare.csv's order), its ops then its kernels, each ranked by the change in time
    grid = [c for c in result["columns"] if c in GRID_WORDS]
    diffs = [{**{c: p.get(c) for c in grid}, "base_job": p["base_job"], "new_job": p["new_job"],
              "what": what, **d} for p in pairs for what in ("op", "kernel") for d in p[f"{what}s_diff"]]
    atomic_write_text(out / "ops_diff.csv", pd.DataFrame(
        diffs, columns=[*grid, "base_job", "new_job", "what", *DIFF_COLUMNS]).round(DIFF_DECIMALS).to_csv(index=False))
    plots = write_ratio_plot(frame, out / "plots")
    # where `python -m analysis serve` finds the two sides' traces (SERVED_BASE/..., SERVED_NEW/...)
    atomic_write_text(out / COMPARE_FILE, json.dumps(
        {"base": str(base.folder.resolve()), "new": str(new.folder.resolve())}, indent=2) + "\n")
    html = out / "compare.html"
    atomic_write_text(html, _html(result, base, new, plots, out))
    return [out / "compare.csv", out / "ops_diff.csv", out / COMPARE_FILE, *plots, html]


def _html(result: dict[str, Any], base: Side, new: Side, plots: list[Path], out: Path) -> str:
    import os
    from html import escape

    from analysis import perfetto
    from analysis.html import CSS
    from analysis.html import image as _image
    from analysis.html import table as _table
    from analysis.conclusions import fmt as _fmt

    pairs = result["pairs"]
    counts = {v: sum(1 for p in pairs if p["verdict"] == v) for v in VERDICT_ORDER}
    style = {"slower": "bad", "faster": "ok"}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>compare · profiling sweeps</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Comparison</h1><p>BASE <code>{escape(str(base.folder))}</code><br>NEW <code>{escape(str(new.folder))}</code></p>",
        f"<p>{len(pairs)} pairs: " + ", ".join(f"<span class='{style.get(v, '')}'>{n} {escape(v)}</span>"
                                               for v, n in counts.items()) + ". Paired by "
        + escape(", ".join(result["columns"])) + ". Verdicts: the ratio NEW/BASE of the medians over repeats "
        "(one process each) of each repeat's median step, with a 95% interval from a hierarchical bootstrap over "
        f"both sides' repeats; <i>same</i> within ±{result.get('band', MARGIN):.0%}; <i>inconclusive</i> when the interval straddles "
        "that band, a side has one repeat, or a side was measured on a loaded machine. False discoveries "
        f"controlled across the grid: Benjamini–Hochberg at {result.get('fdr', FDR):g} over "
        f"{result.get('tested', 0)} pairs.</p>",
    ]
    parts.append("<p>Each pair's <b>Perfetto</b> buttons open its BASE and NEW traces in two tabs of "
                 "<a href='https://ui.perfetto.dev'>ui.perfetto.dev</a>, side by side, when this page is served: "
                 f"<code>python -m analysis serve {escape(str(out))}</code>.</p>")
    few = [p for p in pairs if "one process says nothing" in p["verdict_why"]]
    if few:
        parts.append(f"<p class='bad'>{len(few)} pair(s) have one repeat on a side: rerun both sweeps with "
                     f"<code>run.repeats={MORE_REPEATS}</code> or more.</p>")

    def link(side: Side, job: str, mount: str) -> str:
        record = next((j for j in side.jobs if j["job"] == job), {})
        trace = (trace_files(record) or [""])[0]
        if not trace:
            return escape(job)
        inside = f"{job}/{trace}" if job != side.folder.name else trace
        target = os.path.relpath(side.folder / inside, out)
        return (f"<a href='{escape(target, quote=True)}'>{escape(job)}</a>"
                + perfetto.button(f"{mount}/{inside}", f"{mount.strip('_')}: {job}", f"{mount.strip('_')} in Perfetto"))

    for title, wanted in (("Regressions (slower)", ("slower",)), ("Improvements (faster)", ("faster",)),
                          ("The rest", ("inconclusive", "same"))):
        chosen = [p for p in pairs if p["verdict"] in wanted]
        if not chosen:
            continue
        parts.append(f"<h2>{escape(title)}</h2>")
        rows = []
        for p in chosen:
            label = point_label({"job": p["new_job"], **p}, without=[k for k in GRID_WORDS if k not in result["columns"]])
            rows.append([escape(label), f"<span class='{style.get(p['verdict'], '')}'>{escape(p['verdict'])}</span>",
                         escape(_rests_on(p)), escape(str(p["verdict_on"])),
                         escape(_fmt(p["host_us_per_step_ratio"])), escape(_fmt(p["device_us_per_step_ratio"])),
                         escape(_fmt(p["host_us_per_step_base"])), escape(_fmt(p["host_us_per_step_new"])),
                         escape(p["verdict_why"]), escape(_fmt(p["first_call_ms_ratio"])),
                         escape(_fmt(p["peak_memory_ratio"])), _most_changed(p),
                         f"{link(base, p['base_job'], SERVED_BASE)} · {link(new, p['new_job'], SERVED_NEW)}"])
        parts.append(_table(["grid point", "verdict", "ratio NEW/BASE [95% interval]", "the verdict is on",
                             "profiled host ratio", "device ratio", "host µs base", "host µs new",
                             "why", "first call ratio", "peak memory ratio", "op most changed (self time per step)",
                             "traces (base · new)"],
                            rows, left=2))
        for p in chosen:
            parts.append(_diff_tables(p))
    for side, key in (("BASE", "unmatched_base"), ("NEW", "unmatched_new")):
        if result[key]:
            parts.append(f"<h2>Jobs of {side} without a partner</h2><ul>"
                         + "".join(f"<li>{escape(j)}</li>" for j in result[key]) + "</ul>")
    parts.append("<h2>What differs in the environment</h2>")
    parts.append(_table(["", "base", "new"], ([escape(e["key"]), escape(e["base"]), escape(e["new"])]
                                               for e in result["environment"]))
                 if result["environment"] else "<p>Nothing recorded differs.</p>")
    parts.append("<h2>Plots</h2>")
    parts += [_image(p) for p in plots]
    parts.append(perfetto.script(str(out)))
    parts.append("</body></html>")
    return "\n".join(parts)


DIFF_ROWS_SHOWN = 25  # per pair and kind in compare.html; ops_diff.csv has them all


def _rests_on(pair: dict[str, Any]) -> str:
    """`2.049× [1.53, 2.75]`: the ratio and interval a pair's verdict rests on."""
    ratio, low, high = pair.get("step_ratio"), pair.get("interval_low"), pair.get("interval_high")
    if ratio is None:
        return ""
    return f"{ratio:.3f}×" + (f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else " (no interval)")


def _most_changed(pair: dict[str, Any]) -> str:
    """The pair table's cell: the op (or, without ops, the kernel) whose time changed most."""
    from html import escape

    for what in ("op", "kernel"):
        name = pair.get(f"{what}_most_changed")
        if name:
            return (f"<code title='{escape(name, quote=True)}'>{escape(name[:40])}</code> "
                    f"{escape(_duration(pair[f'{what}_most_changed_us_per_step_diff'], True))}")
    return ""


def _diff_tables(pair: dict[str, Any]) -> str:
    """A pair's ops (self host time) and kernels (device time) ranked by the change per step."""
    from html import escape

    from analysis.html import table as _table

    style = {"slower": "bad", "faster": "ok"}
    parts = []
    for what, timed in (("op", "self host time"), ("kernel", "device time")):
        rows = pair[f"{what}s_diff"]
        if not rows:
            continue
        more = len(rows) - DIFF_ROWS_SHOWN
        parts.append(
            f"<details{' open' if pair['verdict'] == 'slower' else ''}><summary>{escape(pair['base_job'])} → "
            f"{escape(pair['new_job'])}: {len(rows)} {what}s by the change in {timed} per step (the biggest change, "
            "slower or faster, first)</summary>" + _table(
                ["#", what, "change", "per step base", "per step new", "difference", "ratio", "calls per step base",
                 "calls per step new"],
                ([str(d["rank"]), f"<code>{escape(str(d['name'])[:110])}</code>",
                  f"<span class='{style.get(d['change'], '')}'>{escape(d['change'])}</span>",
                  escape(_duration(d["self_us_per_step_base"])), escape(_duration(d["self_us_per_step_new"])),
                  escape(_duration(d["self_us_per_step_diff"], True)),
                  escape(f"{d['self_us_per_step_ratio']:.2f}×" if d["self_us_per_step_ratio"] is not None else ""),
                  escape(f"{d['calls_per_step_base']:g}"), escape(f"{d['calls_per_step_new']:g}")]
                 for d in rows[:DIFF_ROWS_SHOWN]), left=3)
            + (f"<p>{more} more in ops_diff.csv.</p>" if more > 0 else "") + "</details>")
    return "\n".join(parts)
