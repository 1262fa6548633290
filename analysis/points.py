"""One row per grid point from the rows of its repeats (the jobs that measured it, one process
each): the median over the repeats of each repeat's median, a 95% interval from the hierarchical
bootstrap (profsweep.stats), and whether the point is noisy, and why.

Repeats are the jobs whose metrics.json carry the same `config_hash` (the hash leaves out which
repeat a job is and how many the sweep made); a job without one is a point of its own.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from profsweep import stats
from profsweep import contract
from profsweep.columns import SETTING_PREFIXES, flat_key
from profsweep.contract import COPY, SERIES_KEYS, SIDE_COMPILED, SIDE_EAGER, TIMED, TIMED_SAMPLES, GridPoint, Job, amount, flag, point_jobs, timed_samples

# summary column -> (where each repeat's samples are, the key there): "steps" = the job's
# per-step rows (steps.csv), "record" = a list in its metrics.json, "value" = one value a repeat.
PER_STEP = {
    "host_us_per_step": "self_cpu_us",  # self CPU time of the step (torch's "Self CPU", per step)
    "compute_us_per_step": "compute_us",
    "overhead_us_per_step": "overhead_us",
    "step_host_us_median": "host_us",  # the step's duration on the host
}
DEVICE_PER_STEP = {"device_us_per_step": "device_us", "step_device_us_median": "device_us"}
# Work over host time within each step (device / self CPU on a GPU, compute / overhead on the CPU):
# paired step by step, it says the regime and the crossover with far less noise than two
# separate medians whose steps all move together (a cold first step is slow in both).
RATIO = "work_host_ratio"
ONE_PER_REPEAT = ("first_call_ms", "dead_window_us", "warmup_ms", "profiler_overhead_ratio", SIDE_EAGER, SIDE_COMPILED,
                  contract.SIDE_RATIO)
# Summed or worst over the repeats, not a median: how much was measured and how busy it was.
SUMMED = ("timed_steps", "timed_slow_steps", "side_by_side_steps", "recompiles", "trace_bytes", "lock_wait_s")
WORST = ("other_cpus", "cpu_pressure", "loadavg_1m", "recompile_limit")
# Noise: repeats whose medians' logarithms have a standard deviation above this (processes more
# than about 12% apart; TorchBench sees 5-9% run-to-run on one build), other processes using more
# CPUs than the job left free plus OTHER_CPUS, runnable tasks waiting for a CPU this share of the
# time, or steps that waited for a core.
NOISE_DISPERSION = 0.12
OTHER_CPUS = 0.5
PRESSURE = 0.2
# ... but only while other processes used this many CPUs, where that was measured: runnable tasks
# wait without any other load when a job's threads fill every CPU and one more of its own (or of
# the sweep's) wakes up (matmul_add 512, 2 threads on 2 CPUs, nothing else running: 0.2-23% of a
# 0.22 s window, other_cpus 0.00-0.06; 2 sweeps in 5 flagged as loaded, a real 6.3x then inconclusive).
PRESSURE_OTHERS = 0.1



# --- what a grid point is: the settings that pair it across sweeps and make its series ----------

# What a job's record must say to be placed in a grid point, when it has no config_hash to place
# it by (analysis.tables takes that from a record without one of these): a problem, not a point.
REQUIRED = ("workload", "size", "dtype", "compile")

PAIR_KEYS = ("workload", "size", "dtype", "compile", "warmup", "train", "optimizer", "device",
             "isolation", "compile_cache", "warmup_iters", "threads", "allocator")
PAIR_PREFIXES = SETTING_PREFIXES
# How many steps were profiled, how much of the table was printed and whether the trace was
# gzipped, or whether Inductor's provenance was read, do not change what a step measures: a sweep
# rerun with profiler.active=20 for tighter verdicts still pairs with the first.
NOT_PAIRING = ("profiler_active", "profiler_repeat", "profiler_row_limit", "profiler_gzip", "compile_provenance",
               "profiler_overhead_ratio")  # (a measurement, not a setting)


def pairing_columns(rows: Iterable[dict[str, Any]], ignore: Sequence[str]) -> list[str]:
    found = {k for r in rows for k in r if (k in PAIR_KEYS or k.startswith(PAIR_PREFIXES)) and k not in NOT_PAIRING
             and not k.startswith(tuple(f"{n}_" for n in NOT_PAIRING))}
    # the grid keys first, in the order of PAIR_KEYS, then the settings by name
    columns = sorted(found, key=lambda k: (PAIR_KEYS.index(k) if k in PAIR_KEYS else len(PAIR_KEYS), k))
    return [c for c in columns if c not in set(ignore)]


def pair_key_of(column: str) -> str:
    """The summary column a user's `--ignore` names: workload.hidden -> workload_hidden."""
    return flat_key(column)


def distinct_keys(ignore: Sequence[str]) -> list[str]:
    """--ignore's keys, each once (`threads` and `run.threads` are one key): the first spelling."""
    seen: dict[str, str] = {}
    for key in ignore:
        seen.setdefault(pair_key_of(key), key)
    return list(seen.values())


def series_settings(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The settings beyond the series keys (and size, and the workload's own, which `variant`
    names) whose values differ between these grid points: compile_mode, threads, a profiler
    setting... Each of their values makes a series of its own, never merged with another."""
    rows = [r for r in rows if contract.usable(r)]
    columns = [c for c in pairing_columns(rows, ()) if c not in SERIES_KEYS and c != "size"
               and not c.startswith("workload_")]
    return [c for c in columns
            if len({repr(_setting(r, c)) for r in rows if c != "optimizer" or _setting(r, c) is not None}) > 1]


def _setting(row: dict[str, Any], column: str) -> Any:
    """A grid point's value of a setting, None where it does not apply (the optimizer of an
    inference step)."""
    if column == "optimizer" and not flag(row.get("train")):
        return None
    return contract.identity(row, [column])[0]


def settings_text(row: dict[str, Any], settings: Sequence[str]) -> str:
    """`compile_mode=max-autotune threads=1`: a series' varying settings in words ('' for none)."""
    return " ".join(f"{c}={value}" for c in settings if (value := _setting(row, c)) is not None)


def timing_metrics(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The summary columns that get a median over repeats and an interval, for these rows."""
    keys = {k for r in rows for k in r}
    phases = sorted(k for k in keys if re.fullmatch(r"step_(forward|backward|optimizer)_(host|compute|device)_us_median", k))
    return [*PER_STEP, *DEVICE_PER_STEP, TIMED, RATIO, *phases, *ONE_PER_REPEAT]


def group(jobs: list[Job]) -> list[list[Job]]:
    """The jobs of each grid point, in the order of each point's first job."""
    points: dict[str, list[Job]] = {}
    for row in jobs:
        key = row.get("config_hash")
        if (not key and (any(row.get(k) is None for k in REQUIRED) or row.get("status") != "ok")
                or row.get("status") == COPY):
            continue  # no record, one that cannot say what it measured, a copy of another: a problem, not a point
        points.setdefault(str(key) if isinstance(key, str) and key else f"job:{row['job']}", []).append(row)
    for rows in points.values():
        rows.sort(key=lambda r: (stats.number(r.get("repeat")) or 1, str(r["job"])))
    return list(points.values())


def samples(row: dict[str, Any], metric: str, steps: list[dict[str, Any]]) -> list[float]:
    """One repeat's samples of a summary metric: its steps' values, its timed steps, or its one value."""
    if metric in PER_STEP:
        return stats.clean(s.get(PER_STEP[metric]) for s in steps)
    if metric in DEVICE_PER_STEP:
        if row.get("self_device_total_us") is None or stats.number(row.get("self_device_total_us")) is None:
            return []
        return stats.clean(s.get(DEVICE_PER_STEP[metric]) for s in steps)
    if metric == RATIO:
        device = stats.number(row.get("self_device_total_us")) is not None
        work, host = ("device_us", "self_cpu_us") if device else ("compute_us", "overhead_us")
        pairs = [(stats.number(s.get(work)), stats.number(s.get(host))) for s in steps]
        found = [w / h for w, h in pairs if w is not None and h]
        return found if found else stats.clean([row.get(RATIO)])
    if metric == TIMED:
        return timed_samples(row)
    phase = re.fullmatch(r"step_(\w+?)_(host_us|compute_us|device_us)_median", metric)
    if phase:
        return stats.clean(s.get(f"{phase.group(1)}_{phase.group(2)}") for s in steps)
    return stats.clean([row.get(metric)])


def point_row(rows: list[Job], steps_of: dict[str, list[dict[str, Any]]],
              metrics: list[str]) -> dict[str, Any]:
    """The summary row of one grid point."""
    ok = [r for r in rows if r.usable]
    first = dict(ok[0] if ok else rows[0])
    first.pop(TIMED_SAMPLES, None)
    first.pop("repeat", None)
    point = first
    point["jobs"] = ";".join(str(r["job"]) for r in rows)
    point["repeats"] = len(ok)
    point["repeats_failed"] = sum(1 for r in rows if not r.usable and r.get("status") != "skipped")
    if not ok:
        point["noisy"] = point["noise_reason"] = point["noise_load"] = None
        return point
    for metric in metrics:
        groups = [samples(r, metric, steps_of.get(str(r["job"]), [])) for r in ok]
        e = stats.estimate(groups)
        point[metric] = e.value
        point[f"{metric}_low"] = e.low
        point[f"{metric}_high"] = e.high
        if metric == _main(point):
            point["spread"] = e.spread
            point["dispersion"] = stats.dispersion(groups)
            point["interval_width"] = e.width
    for key in SUMMED:
        found = stats.clean(r.get(key) for r in ok)
        point[key] = sum(found) if found else None
    for key in WORST:
        found = stats.clean(r.get(key) for r in ok)
        point[key] = max(found) if found else None
    done = {*metrics, *(f"{m}_{end}" for m in metrics for end in ("low", "high")), *SUMMED, *WORST,
            "repeats", "repeats_failed", "spread", "dispersion", "interval_width"}
    for key in [k for k in first if k not in done]:
        values = [r.get(key) for r in ok]
        found = stats.clean(values)
        if len(found) != len(values) or not found or any(isinstance(v, str) for v in values):
            continue  # not a number in every repeat: the first repeat's (text, flags, settings, a job named 7)
        if key.startswith("step_") and key.endswith(("_min", "_max")):
            point[key] = min(found) if key.endswith("_min") else max(found)
        else:  # every other number of a repeat (totals, counts, the top kernel): over the repeats
            point[key] = float(stats.median(found)) if len(set(found)) > 1 else first[key]
    reasons = noise_reasons(point, ok, steps_of)
    point["noise_reason"] = "; ".join(reasons.values())
    point["noise_load"] = bool(set(reasons) & LOAD)
    point["noisy"] = bool(reasons)
    return point


def by_round(point: dict[str, Any], by_job: dict[str, dict[str, Any]], key: str = TIMED) -> dict[int, list[float]] | None:
    """Each repeat's samples of `key` (the un-profiled steps, or the one value a repeat has of a
    figure such as dead_window_us) by its round (run.repeat); None where a repeat has no round or
    two share one (jobs from elsewhere put in one folder)."""
    found: dict[int, list[float]] = {}
    for name in point_jobs(point):
        job = by_job.get(name)
        if job is None or not contract.usable(job):
            continue
        samples = timed_samples(job) if key == TIMED else stats.clean([job.get(key)])
        if not samples:
            continue
        r = stats.number(job.get("repeat"))
        if r is None or int(r) in found:
            return None
        found[int(r)] = samples
    return found


def rounds_paired(base: dict[str, Any], new: dict[str, Any], by_job: dict[str, dict[str, Any]], key: str = TIMED
                  ) -> list[tuple[list[float], list[float]]] | None:
    """The two grid points' processes in pairs by round, where both were measured in the same two
    rounds or more (a sweep measures its grid round by round, each point once a round): None
    otherwise, so that no process of either is left out (a round one side lost, a point that
    run.repeats=auto measured more often: the processes are then judged unpaired)."""
    rounds = [by_round(p, by_job, key) for p in (base, new)]
    return None if rounds[0] is None or rounds[1] is None else stats.pairs_by_round(rounds[0], rounds[1])


def side_by_side(compiled: dict[str, Any], by_job: dict[str, dict[str, Any]]
                 ) -> list[tuple[list[float], list[float]]] | None:
    """A compiled grid point's processes as pairs (eager, compiled) of the same step timed in turn in
    each (side_by_side_*_us, experiments.job): what a process draws for itself moves both alike;
    the compiled one as the eager one times the process's ratio of paired blocks (contract.side_pair).
    None unless every usable process of the point has both (the point is then judged as any other)."""
    pairs = []
    for name in point_jobs(compiled):
        job = by_job.get(name)
        if job is None or not contract.usable(job):
            continue
        found = contract.side_pair(job)
        if found is None:
            return None
        pairs.append(([found[0]], [found[1]]))
    return pairs or None


def side_by_side_steps(pairs: list[tuple[list[float], list[float]]]) -> tuple[float | None, float | None]:
    """The eager and the compiled step a side-by-side verdict rests on: each side's median over
    the processes (side_by_side's pairs)."""
    return stats.median([e[0] for e, _ in pairs]), stats.median([c[0] for _, c in pairs])


def _main(point: dict[str, Any]) -> str:
    """The metric whose repeats say how noisy a point is: the un-profiled step where there is
    one, else the profiled step's duration."""
    return TIMED if stats.number(point.get(TIMED)) is not None else "step_host_us_median"


# What the machine did to every repeat alike, which no interval over the repeats can show:
# compare gives no verdict of change on such a point (`noise_load`).
LOAD = {"other processes", "cpu pressure", "time slices", "load unknown"}
LOAD_UNREADABLE = "load_unreadable"  # a job row's load fields that were there but not numbers (analysis.tables)


def noise_reasons(point: dict[str, Any], ok: list[dict[str, Any]],
                  steps_of: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """Why a point's numbers are not to be trusted, by kind ({} when nothing says so)."""
    reasons: dict[str, str] = {}
    spread, apart = stats.number(point.get("spread")), stats.number(point.get("dispersion"))
    if apart is not None and apart > NOISE_DISPERSION:
        reasons["spread"] = (f"repeats disagree {spread or 0:.1f}x (processes {apart:.0%} apart): "
                             + disagreement(ok, _main(point)))
    other = stats.number(point.get("other_cpus"))
    cores = stats.number(point.get("cpu_count"))
    threads = stats.number(point.get("torch_threads"))
    free = max(0.0, cores - threads) if cores is not None and threads is not None else 0.0
    if other is not None and other > free + OTHER_CPUS:
        reasons["other processes"] = f"other processes used {other:.1f} CPUs while it measured"
    pressure = stats.number(point.get("cpu_pressure"))
    if pressure is not None and pressure > PRESSURE and (other is None or other >= PRESSURE_OTHERS):
        reasons["cpu pressure"] = f"runnable tasks waited for a CPU {pressure:.0%} of the time"
    # The un-profiled steps, not the profiled ones: a cold job's first profiled steps are slow by
    # design, and three steps are too few to tell a wait from a warm-up.
    slow = stats.number(point.get("timed_slow_steps")) or 0
    timed = stats.number(point.get("timed_steps")) or 0
    if slow >= 2 and slow >= stats.SLOW_SHARE * timed:
        reasons["time slices"] = (f"steps waited for a busy core in whole OS time slices ({slow:.0f} of "
                                  f"{timed:.0f} timed steps)")
    unreadable = sorted({k for r in ok for k in str(r.get(LOAD_UNREADABLE) or "").split(", ") if k})
    if unreadable:
        reasons["load unknown"] = (f"what {'a process' if len(ok) > 1 else 'its process'} recorded of the machine's "
                                   f"load ({', '.join(unreadable)}) is not a number: the load it ran under is unknown")
    disturbed = profiled_disturbed(point)
    if disturbed:
        reasons["profiled steps"] = disturbed
    recompiled = stats.number(point.get("recompiles")) or 0
    limit = (stats.number(point.get("recompile_limit")) or 0) > 0
    if recompiled > 0 or limit:  # not load: the step itself compiled while it was measured, or gave up
        reasons["recompiled"] = (
            f"the step was compiled again while it was measured ({recompiled:.0f} graphs over its processes, after "
            "their first calls" + ("; Dynamo reached its recompile limit and ran the rest eagerly" if limit else "")
            + "): its times hold compilations or eager code, not what a warm compiled step costs; job.log has "
            "Dynamo's reasons (a Python number the step changes, a shape that changes)")
    return reasons


# The profiled steps against the un-profiled ones: what the profiler adds is a few µs an op on the
# CPU (a median of 22 µs an aten op over 190 grid points of this project's sweeps; a cold 4096
# step's first-step excess is larger in all but about 1.2x the step), so a profiled step 20x the
# un-profiled one and more than 100 µs an op slower was slowed by something else (8 such points in
# those 190, each beside another sweep, at 116-300x; every other one at most 10.3x).
PROFILED_APART = 20.0
PROFILER_OP_US = 100.0


def profiled_disturbed(point: dict[str, Any]) -> str:
    """Why the point's profiled steps are not what the profiler makes of its step ('' when they
    are): far slower than its un-profiled step, by more an op than the profiler costs."""
    profiled, timed = stats.number(point.get("step_host_us_median")), stats.number(point.get(TIMED))
    ops = stats.number(point.get("step_aten_ops_median"))
    if not profiled or not timed or timed <= 0 or ops is None:
        return ""
    per_op = (profiled - timed) / max(ops, 1.0)
    if profiled / timed <= PROFILED_APART or per_op <= PROFILER_OP_US:
        return ""
    return (f"its profiled steps took {profiled / timed:.0f}x its un-profiled step ({per_op / 1000:.2g} ms more an "
            f"aten op, where the profiler costs microseconds): something else slowed them (another process, OS time "
            "slices); their split, op and kernel times are not to be trusted, rerun on a quiet machine")


MODES_GAP = 1.3  # sorted repeat medians this far apart (x) split into two modes
FAULTS_APART = 2.0  # the slow processes faulted this many times as many pages a step (and 50 more)
LOAD_APART = 0.3  # other processes used this many more CPUs during the slow processes
PROBE_APART = 1.15  # a probe of the machine took this many times as long during the slow processes
# The probes each job times beside its un-profiled steps (experiments/job.py), in words; a noise
# reason names the first that took PROBE_APART as long in the slow processes
PROBE_NAMES = {"speed_probe_us": "the machine's speed probe (a 64x64 matmul timed beside the steps)",
               "overhead_probe_us": "the machine's overhead probe (a one-element torch.add timed beside the steps)",
               "cache_probe_us": "the machine's cache probe (one thread adding 1.5 MiB timed beside the steps)"}
# the probes that time Python calls too: under another Python their change is part of what is compared
PYTHON_PROBES = ("overhead_probe_us", "cache_probe_us")
# The measured remedy for steps that fault their buffers in again (glibc hands them back, or not,
# by the heap's layout): held thresholds keep them alike in every process (experiments/allocator.py,
# the default since run.allocator existed). attention 256 (math), bf16, 1 thread, fresh processes:
# 18-23 ms and 2,761-6,624 faults a step in 6 of 6 plain ones, 11.9-12.3 ms and 0-137 faults in 4
# of 4 with them (2026-12-05).
ALLOCATOR_REMEDY = "run.allocator=steady"
HELD = ("steady", "fixed")  # run.allocator's values that hold glibc's thresholds


def allocator_held(rows: Iterable[dict[str, Any]]) -> bool:
    """Whether every one of these jobs ran with glibc's thresholds held (run.allocator=steady or fixed)."""
    return all(str(r.get("allocator")) in HELD for r in rows)


def unkept(rows: Iterable[dict[str, Any]]) -> str:
    """What glibc's heap does not keep with the thresholds these jobs held: words for a noise
    reason ("allocator steady: blocks of 32 MiB or more, ...")."""
    held = sorted({str(r.get("allocator")) for r in rows} & set(HELD))
    smallest = "32 MiB" if "steady" in held else "256 MiB"
    return (f"allocator {' and '.join(held)}: possibly memory its heap does not keep (blocks of {smallest} or "
            "more, mapped anew every step as in any plain process; over 64 MiB on another thread; another "
            "allocator's)")


def faults_apart(few: float, many: float) -> bool:
    """Whether processes faulting `many` pages a step did so in another way than those faulting
    `few`: FAULTS_APART times as many, and 50 more."""
    return many >= FAULTS_APART * few + 50


def disagreement(ok: list[dict[str, Any]], metric: str) -> str:
    """What differed between a grid point's processes when their medians disagree, from what each
    job recorded, and the remedy for that cause: two modes or a spread; more minor page faults a
    step (glibc's allocator handing memory back), more load (other processes, waits for a CPU, time
    slices) during the slow ones, a slower machine (its speed probe: another tenant's load); or,
    with several threads and nothing else different, the threads'
    placement. Words for the noise reason."""
    found = sorted(((v, r) for r in ok if (v := stats.number(r.get(metric))) is not None and v > 0),
                   key=lambda vr: vr[0])
    if len(found) < 2:
        return "rerun with more processes"
    values = [v for v, _ in found]
    gaps = [b / a for a, b in zip(values, values[1:])]
    cut = max(range(len(gaps)), key=lambda i: gaps[i]) + 1
    if gaps[cut - 1] >= MODES_GAP:
        fast, slow = found[:cut], found[cut:]
        shape = (f"two modes, {_us(stats.median([v for v, _ in fast]))} ({_processes(len(fast))}) and "
                 f"{_us(stats.median([v for v, _ in slow]))} ({_processes(len(slow))})")
    else:
        half = len(found) // 2
        fast, slow = found[:half], found[len(found) - half:]
        shape = f"from {_us(values[0])} to {_us(values[-1])}"

    def typical(rows: list[tuple[float, dict[str, Any]]], key: str) -> float | None:
        return stats.median([v for v in stats.clean(r.get(key) for _, r in rows) if v >= 0])

    causes = []
    f_fast, f_slow = typical(fast, "timed_minor_faults_per_step"), typical(slow, "timed_minor_faults_per_step")
    if f_fast is not None and f_slow is not None and faults_apart(f_fast, f_slow):
        faulted = f"the slow processes faulted {f_slow:,.0f} pages a step, the fast ones {f_fast:,.0f}"
        if allocator_held(r for _, r in found):
            causes.append(f"{faulted} (timed_minor_faults_per_step), with glibc's thresholds held "
                          f"({unkept(r for _, r in found)}); more processes narrow the interval")
        else:
            causes.append(f"{faulted}: glibc's allocator handed their buffers back to the system and got them "
                          "again every step (timed_minor_faults_per_step), as the heap's layout let it, which "
                          f"{ALLOCATOR_REMEDY} fixes for every process")
    o_fast, o_slow = typical(fast, "other_cpus"), typical(slow, "other_cpus")
    if o_fast is not None and o_slow is not None and o_slow - o_fast > LOAD_APART:
        causes.append(f"other processes used {o_slow:.1f} CPUs during the slow ones, {o_fast:.1f} during "
                      "the fast: rerun on a quiet machine")
    p_fast, p_slow = typical(fast, "cpu_pressure"), typical(slow, "cpu_pressure")
    if p_fast is not None and p_slow is not None and p_slow - p_fast > 0.1:
        causes.append(f"runnable tasks waited for a CPU {p_slow:.0%} of the time during the slow ones, {p_fast:.0%} "
                      "during the fast: rerun on a quiet machine")
    s_fast, s_slow = typical(fast, "timed_slow_steps"), typical(slow, "timed_slow_steps")
    if s_slow is not None and s_slow >= 2 and s_slow > 2 * (s_fast or 0):
        causes.append(f"the slow processes' steps waited for a core in whole time slices ({s_slow:.0f} steps): "
                      "rerun on a quiet machine")
    loaded = any(c.startswith(("other processes", "runnable tasks", "the slow processes' steps")) for c in causes)
    probe = next(filter(None, (_probe_apart(fast, slow, key, what) for key, what in PROBE_NAMES.items())), None)
    if probe:
        causes.append(f"{probe}: the load above slowed it too" if loaded else
                      f"{probe}: another tenant of this machine's cores was busy while they ran (a virtual machine "
                      "shares them), which no setting of the sweep removes: rerun on a quiet machine, or on a "
                      "dedicated one")
    threads = stats.number(found[0][1].get("torch_threads"))
    if not causes and threads is not None and threads > 1:
        causes.append(f"nothing else they record differs; with {threads:.0f} threads a step waits for the slowest "
                      "of them, so it feels any one CPU running slow, which a virtual machine's host can do unseen, "
                      "and where the threads run can differ from process to process: run.threads=1 is steadier "
                      "(docs/numbers.md, 'Threads')")
    if not causes:
        causes.append("nothing they record differs (threads, page faults, load, time slices, the machine's "
                      "probes): more processes narrow the interval")
    return f"{shape}; {'; '.join(causes)}"


def _probe_apart(fast: list[tuple[float, dict[str, Any]]], slow: list[tuple[float, dict[str, Any]]], key: str,
                 what: str) -> str | None:
    """`what took 1.36x as long in the slow processes (6.93 µs -> 9.4 µs)` where the probe `key`
    took PROBE_APART as long or more in at least half of the slow processes that have it; None
    otherwise. The slow processes whose probe was slow too: a median over slow ones of both kinds
    (5.9 µs and 11 ms) said "943x as long in the slow processes" of one (helper-43)."""
    m_fast = stats.median([v for v in stats.clean(r.get(key) for _, r in fast) if v > 0])
    probed = [(v, r) for v, r in slow if (stats.number(r.get(key)) or 0) > 0]
    slowed = [(v, r) for v, r in probed if m_fast and stats.number(r.get(key)) >= PROBE_APART * m_fast]
    if m_fast is None or not slowed or len(slowed) * 2 < len(probed):
        return None
    m_slow = stats.median([stats.number(r.get(key)) for _, r in slowed])
    which = "the slow processes" if len(slowed) == len(probed) else f"{len(slowed)} of the {len(probed)} slow processes"
    return f"{what} took {m_slow / m_fast:.2f}x as long in {which} ({_us(m_fast)} -> {_us(m_slow)})"


def _processes(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def _us(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value / 1e3:.3g} ms" if value >= 1e3 else f"{value:.3g} µs"


def points(jobs: list[Job], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summary's rows (SUMMARY_FILE): one per grid point, still open to the derived columns
    (analysis.tables makes each a GridPoint once they are all there)."""
    steps_of: dict[str, list[dict[str, Any]]] = {}
    for s in steps:
        steps_of.setdefault(str(s["job"]), []).append(s)
    metrics = timing_metrics(jobs)
    return [point_row(rows, steps_of, metrics) for rows in group(jobs)]


def remedy(noisy: list[GridPoint], measured: list[GridPoint]) -> str:
    """What to do about the noisy points, by their causes: a quiet machine for load (another
    tenant's too), one thread for two modes that only threads explain, a step that compiles once
    for one that compiled again while measured, else more processes (as many as their verdicts
    need)."""
    reasons = " ".join(str(r.get("noise_reason") or "") for r in noisy)
    said = []
    if "run.threads=1" in reasons:
        said.append("rerun with run.threads=1")
    if ALLOCATOR_REMEDY in reasons:
        said.append(f"rerun with {ALLOCATOR_REMEDY}")
    if any(flag(r.get("noise_load")) for r in noisy) or "quiet machine" in reasons:
        said.append("rerun on a quiet machine")
    if "compiled again while it was measured" in reasons:  # more processes compile again as well
        said.append("make the step compile once (the guard that fails is in each job's job.log, or TORCH_LOGS=recompiles)")
    needed = [int(n) for r in noisy if (n := stats.number(r.get("regime_processes_needed"))) is not None and n <= 1000]
    repeats = max(int(stats.number(r.get("repeats")) or 1) for r in measured)
    if not said or "more processes" in reasons:
        said.append(f"rerun with run.repeats={max([5, repeats + 2, *needed])}")
    return "; ".join(said)


KIND_WORDS = (  # how the sweep's last line names each kind of noise, by the start of its reason
    ("repeats disagree", "repeats disagree"), ("other processes", "other processes used CPUs while they measured"),
    ("runnable tasks", "runnable tasks waited for a CPU"),
    ("steps waited", "steps waited for a busy core in whole OS time slices"),
    ("its profiled steps", "profiled steps far slower than the un-profiled step"),
)


def reasons(text: str) -> list[str]:
    """A noise_reason's reasons: split at each `; ` outside parentheses (a reason may hold one)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    return [r for r in (*out, text[start:]) if r]


def noise_lines(rows: list[GridPoint]) -> list[str]:
    """The sweep's last word on noise: how many points are noisy, for what reasons (each with how
    many points and the worst or only one), what to do."""
    noisy = [r for r in rows if r.get("noisy") is True]
    measured = [r for r in rows if r.get("noisy") is not None]
    lines = []
    if noisy:
        kinds: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for r in noisy:
            for reason in reasons(str(r.get("noise_reason") or "")):
                kind = next((words for start, words in KIND_WORDS if reason.startswith(start)), reason)
                if not any(point is r for _, point in kinds.get(kind, [])):  # a kind counts points, once each
                    kinds.setdefault(kind, []).append((reason, r))
        said = []
        for kind, found in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            reason, point = found[0]
            said.append(f"{reason} at {point.label()}" if len(found) == 1 else f"{kind} ({len(found)} points)")
        lines.append(f"{len(noisy)} of {amount(len(measured), 'grid point')} noisy: {'; '.join(said)}; "
                     f"{remedy(noisy, measured)}")
    single = [r for r in measured if (stats.number(r.get("repeats")) or 0) < 2]
    if single and len(single) == len(measured):
        said = [r.get("repeats_planned") for r in measured]
        most = max((n for x in said if (n := stats.number(x)) is not None), default=1)
        planned = "auto" if "auto" in said else f"{most:g}" if most >= 2 else None
        lines.append("one process per grid point: intervals cover its steps only, not the variation between processes "
                     + (f"(run.repeats={planned} was planned: rerun the same command into the same folder to finish)"
                        if planned else "(run.repeats=3 or more, in a sweep with -m, for that)"))
    auto = [r for r in measured if r.get("repeats_planned") == "auto"]
    unmet = [r for r in auto if (stats.number(r.get("interval_width")) or 0) > (stats.number(r.get("precision")) or 1)]
    if unmet:
        lines.append(f"{len(unmet)} of {amount(len(auto), 'grid point')} did not reach run.precision="
                     f"{stats.number(unmet[0].get('precision')):g} within run.max_repeats: "
                     + ", ".join(r.label() for r in unmet[:4]) + (", ..." if len(unmet) > 4 else ""))
    return lines
