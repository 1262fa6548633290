"""What a sweep shows, in sentences with their numbers: the top of report.html and the last lines
on the terminal.

Every sentence is made from the tables the report shows beside it (summary.csv, crossovers.csv,
top_ops.csv) and links to the table or plot that shows it, so a reader can check each number.
Figures measured in several processes carry their 95% interval; a difference whose interval
holds "no change" is said to be unclear, never given a direction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from analysis import points as grid_points
from analysis.peaks import ran_dtype
from profsweep.fit import CROSSOVER_SPAN
from analysis.tables import FITTED
from analysis.top_ops import on_gpu as _on_gpu
from analysis.text import count, fmt, interval, nbytes, rate, short_name, times, too_wide, us
from profsweep import stats
from profsweep.contract import TIMED, GridPoint, Job, amount, flag, point_jobs, series_key, timed_samples
from profsweep.decide import ABOVE, BELOW, MAX_PROCESSES, SAME, Decision, decide, decide_test, percent

SAID = 3  # of which the conclusions name


@dataclass(frozen=True)
class Conclusion:
    topic: str  # flops, regime, crossover, compile, cold, time, training, memory, ceilings, noise, claims, expectations
    text: str   # one sentence, plain text: what the terminal prints
    link: str   # the id in report.html of the table or plot that shows it
    detail: str = ""  # what the report adds after it

    @property
    def full(self) -> str:
        return f"{self.text} {self.detail}" if self.detail else self.text


def _sizes(sizes: Sequence[Any]) -> str:
    words = [str(s) for s in sizes]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


# --- series -------------------------------------------------------------------------------------


def series_name(row: dict[str, Any], leave_out: Iterable[str] = ()) -> str:
    """`matmul_add bf16 cold eager`: a series in words (a grid point less its size), with the
    settings that make it a series of its own (`compile_mode=max-autotune`)."""
    leave = set(leave_out)
    words = [str(row.get("variant") or row.get("workload") or "?")]
    if row.get(SETTINGS):
        words.append(str(row[SETTINGS]))
    if "dtype" not in leave and row.get("dtype"):
        words.append(str(row["dtype"]))
    if "warmup" not in leave:
        words.append("warm" if flag(row.get("warmup")) else "cold")
    if "compile" not in leave:
        words.append("compile" if flag(row.get("compile")) else "eager")
    if flag(row.get("train")):
        words.append("training")
    if isinstance(row.get("device"), str) and row["device"] != "cpu":
        words.append(f"on {row['device']}")
    return " ".join(words)


SETTINGS = "series_settings"  # a grid point's varying settings in words, set by conclude()


def _series(points: list[dict[str, Any]], without: str | None = None) -> dict[tuple, list[dict[str, Any]]]:
    """Usable grid points with a size, by series (less the key `without`), each sorted by size."""
    found: dict[tuple, list[dict[str, Any]]] = {}
    for p in points:
        if p.usable and stats.number(p.get("size")) is not None:
            found.setdefault(p.series_key(p.get(SETTINGS), without), []).append(p)
    for rows in found.values():
        rows.sort(key=lambda r: stats.number(r["size"]) or 0)
    return found


# --- the conclusions ----------------------------------------------------------------------------


def conclude(points: list[GridPoint], crossovers: list[dict[str, Any]], jobs: list[Job],
             top: list[dict[str, Any]], claims: Any = None, expectations: Any = None,
             fusion: list[dict[str, Any]] | None = None) -> list[Conclusion]:
    """Every conclusion of a sweep, most telling first: per series the regime and the crossover,
    then compile, cold vs warm, where the time goes, training phases, memory, and noise."""
    settings = grid_points.series_settings(points)
    points = [p.replace(**{SETTINGS: grid_points.settings_text(p, settings)}) for p in points]
    out: list[Conclusion] = _ran_otherwise(jobs)
    crossing = {series_key(c, c.get("settings")): c for c in crossovers}
    for key, rows in _series(points).items():
        out += _uncounted(rows)
        out += _size_unused(rows)
        out += _regime(rows, crossing.get(key))
    out += _compile(points, jobs)
    out += _fused(fusion or [], points)
    out += _cold_warm(points)
    out += _where_time_goes(points, top)
    out += _training(points)
    out += _memory(points)
    out += _ceilings(points)
    out += [Conclusion("noise", line, "noise") for line in grid_points.noise_lines(points)]
    out += _verdicts(claims, expectations)
    return out


SHORT = 3  # lines of the short answer that opens the report and the terminal's conclusions


def in_short(points: list[GridPoint], crossovers: list[dict[str, Any]], jobs: list[Job]) -> list[str]:
    """The short answer, at most SHORT lines, each a headline verdict with its interval: where
    each series' work starts to cost more than its overhead (the model's crossover), then what
    compile did at each size (the one rule's word, short)."""
    settings = grid_points.series_settings(points)
    points = [p.replace(**{SETTINGS: grid_points.settings_text(p, settings)}) for p in points]
    lines = []
    by_key = {series_key(c, c.get("settings")): c for c in crossovers}
    for key, rows in _series(points).items():
        c = by_key.get(key)
        if c is None or len(rows) < 2 or str(c.get("fit_check") or "").startswith("does not fit"):
            continue
        at = stats.number(c.get("fit_crossover_size"))
        low, high = stats.number(c.get("fit_crossover_size_low")), stats.number(c.get("fit_crossover_size_high"))
        sizes = sorted(stats.number(r.get("size")) or 0 for r in rows)
        # a crossover is said only with a finite interval and where the sizes swept bound it: within
        # them, or with its whole interval above the largest ("overhead-bound at every size swept");
        # never a regime no grid point measured, nor a line's far reach (one below the smallest size:
        # the regime conclusion says every size is bound by its work)
        if at is None or high is None or not math.isfinite(high):
            continue
        if at > sizes[-1] or at < sizes[0]:
            if low is not None and low > sizes[-1]:
                lines.append(f"{series_name(rows[0])}: overhead-bound at every size swept (up to {sizes[-1]:,.0f}); "
                             f"the model puts the crossover above them, at ≈{at:,.0f}"
                             f"{interval(c, 'fit_crossover_size', lambda v: f'{v:,.0f}', always=True)}")
            continue
        above = [r for r in rows if (stats.number(r.get("size")) or 0) > at
                 and r.get("regime") in ("compute-bound", "memory-bound")]
        ridge = [str(r["size"]) for r in above if flag(r.get("regime_at_ridge"))]
        labels = {str(r["regime"]) for r in above if not flag(r.get("regime_at_ridge"))}
        bound = labels.pop() if len(labels) == 1 else "compute- or memory-bound" if labels else \
            "memory-bound" if c.get("fit_work") == "bytes" and not ridge else "bound by its work"
        if ridge:  # compute- or memory-bound alike there: the roofline's ridge
            bound += f" (at the roofline's ridge at {', '.join(ridge)})"
        lines.append(f"{series_name(rows[0])}: overhead-bound below size ≈{at:,.0f}"
                     f"{interval(c, 'fit_crossover_size', lambda v: f'{v:,.0f}', always=True)}, "
                     f"{bound} above it")
    by_job = {str(j.get("job")): j for j in jobs}
    for name, pairs in _grouped(_pairs(points, "compile"), "compile").items():
        said = []
        for eager, compiled in pairs:
            found = None if flag(compiled.get("compiled_nothing")) else compile_change(eager, compiled, by_job)
            if flag(compiled.get("compiled_nothing")):
                said.append(f"{NOTHING_COMPILED} at {eager['size']}")
            elif found is not None:
                said.append(f"{_without_advice(found[0])} at {eager['size']}")
        if said:
            lines.append(f"compile against eager, {name}: {'; '.join(said)}")
    return lines[:SHORT]


def _without_advice(words: str) -> str:
    """A verdict without its advice: `no clear difference (0.97× [0.65×, 1.44×])` of `no clear
    difference (0.97× [0.65×, 1.44×]; 628 processes a side would decide it ...)`."""
    head, sep, _ = words.partition("; ")
    return f"{head})" if sep and head.count("(") > head.count(")") else head


def job_warnings(row: dict[str, Any]) -> list[str]:
    """A job's `warnings` (metrics.json: what it ran other than the grid asked, e.g. "inputs are
    float64, the grid asked for bf16"), as a list of strings whether the row holds the list or its
    JSON text."""
    import json

    found = row.get("warnings")
    if isinstance(found, str):
        try:
            found = json.loads(found)
        except ValueError:
            found = [found]
    return [str(w) for w in found if w] if isinstance(found, list) else []


def _ran_otherwise(jobs: list[dict[str, Any]]) -> list[Conclusion]:
    """Jobs that warned: most ran something other than the grid asked (another dtype or device, a
    step compiled again while measured), others measured less (FLOPs not counted); first, since
    their figures are about something else or lack something."""
    warned = [(str(j.get("job")), job_warnings(j)) for j in jobs]
    warned = [(name, w) for name, w in warned if w]
    if not warned:
        return []
    kinds = sorted({w for _, found in warned for w in found})
    return [Conclusion("warnings", f"{len(warned)} of {amount(len(jobs), 'job')} warned: "
                       + "; ".join(kinds[:3]) + (f"; and {len(kinds) - 3} more" if len(kinds) > 3 else "")
                       + f" (first: {warned[0][0]}).", "warnings")]


def _uncounted(rows: list[dict[str, Any]]) -> list[Conclusion]:
    """A series whose FLOPs were not counted (the record's `flops_uncounted`: an operator ran whose
    matrix products torch's counter has no formula for), said before its regime."""
    ops = sorted({op.strip() for r in rows if isinstance(r.get("flops_uncounted"), str)
                  for op in r["flops_uncounted"].split(",") if op.strip()})
    if not ops:
        return []
    return [Conclusion("flops", f"{series_name(rows[0])}: FLOPs not counted: {', '.join(ops)} ran, and torch's "
                       "FLOP counter has no formula for the arithmetic (matrix products, FFTs, a custom or quantized op's) inside "
                       f"{'it' if len(ops) == 1 else 'them'}, so no achieved FLOP/s or arithmetic intensity is "
                       "given and the series' model uses the bytes moved; a cost model gives the FLOPs "
                       "(docs/own-model.md).", "summary")]


def _size_unused(rows: list[dict[str, Any]]) -> list[Conclusion]:
    """A series whose counted work (FLOPs and bytes a call) is the same at every size: its factory
    seems not to use `size` (as one that ignores dtype or device is warned of by its jobs), and
    its regimes, crossover and model are of one workload measured again, not of sizes."""
    sizes = {stats.number(r.get("size")) for r in rows}
    work = {(stats.number(r.get("flops_per_call")), stats.number(r.get("bytes_per_call"))) for r in rows}
    if len(sizes) < 2 or len(work) != 1 or not any(v for v in next(iter(work))):
        return []
    flops, moved = next(iter(work))
    counted = " and ".join(x for x in (f"{flops:,.0f} FLOPs" if flops else "", nbytes(moved) if moved else "") if x)
    return [Conclusion("flops", f"{series_name(rows[0])}: the same work at every size ({counted} a call at "
                       f"{', '.join(str(r['size']) for r in rows)}): its factory seems not to use `size`, and its "
                       "sizes measure one workload again.", "summary")]


def _regime(rows: list[dict[str, Any]], crossover: dict[str, Any] | None) -> list[Conclusion]:
    """The regime at each size and the crossover size. Where the series' model fits (profsweep.fit:
    the un-profiled step as an overhead floor plus a cost per unit of work), both come from it:
    the fitted work cost over the floor at each size; else from the split of the profiled steps
    (host or framework overhead against device or compute time within a step)."""
    gpu = _on_gpu(rows[0])
    work, host = ("device", "host") if gpu else ("compute", "overhead")
    fitted = all(r.get("regime_source") == FITTED for r in rows if r.get("regime") is not None)
    runs: list[tuple[str, list[str]]] = []
    for r in rows:
        regime = r.get("regime")
        key = "work_overhead_ratio" if r.get("regime_source") == FITTED else grid_points.RATIO
        raw = r.get(key)
        ratio = stats.number(raw)
        if regime is None or (ratio is None and raw != math.inf):
            continue
        text = f"{r['size']} ({times(ratio)}{interval(r, key)}" if ratio is not None else f"{r['size']} (no overhead floor"
        flags = [word for word, on in (("uncertain", flag(r.get("regime_uncertain"))), ("noisy", flag(r.get("noisy"))))
                 if on]
        needed = stats.number(r.get("regime_processes_needed"))
        if flag(r.get("regime_uncertain")) and needed is not None:
            flags.append(f"{needed:.0f} processes would decide it" if needed <= 1000 else "at the crossover")
        if flag(r.get("regime_at_ridge")):  # which ceiling is not the roofline's to say there
            regime = "bound by its work"
            flags.append("at the roofline's ridge: compute- or memory-bound alike")
        text += "".join(f", {w}" for w in flags) + ")"
        if runs and runs[-1][0] == regime:
            runs[-1][1].append(text)
        else:
            runs.append((regime, [text]))
    out = []
    name = series_name(rows[0])
    if runs:
        said = "; ".join(f"{regime} at {_sizes(texts)}" for regime, texts in runs)
        intensity = [stats.number(r.get("arithmetic_intensity")) for r in rows]
        intensity = [x for x in intensity if x is not None]
        ai = (f"Arithmetic intensity {fmt(intensity[0])} to {fmt(intensity[-1])} FLOP/byte (the workload's FLOPs "
              "over the bytes it must move: shown as such, not as the regime)." if len(intensity) > 1 else "")
        how = ("the un-profiled step's fitted work cost / overhead floor" if fitted
               else f"{work} / {host} within a profiled step")
        out.append(Conclusion("regime", f"{name}, by measured time ({how}): {said}.", "summary", ai))
    if crossover is not None and len(rows) > 1:
        out.append(Conclusion("crossover", _crossing(name, crossover, rows, work, host), "crossovers"))
    return out


def _crossing(name: str, crossover: dict[str, Any], rows: list[dict[str, Any]], work: str, host: str) -> str:
    """The crossover in words: the model's where it fits (with the floor and the throughput), else
    where the profiled split crosses."""
    size = stats.number(crossover.get("fit_crossover_size"))
    check = str(crossover.get("fit_check") or "")
    floor = stats.number(crossover.get("fit_overhead_us"))
    sizes = [r["size"] for r in rows]
    if floor is not None and not check.startswith("does not fit"):
        unit = "FLOP/s" if crossover.get("fit_work") == "flops" else "B/s"
        speed = stats.number(crossover.get("fit_throughput"))
        said = (f"{name}: the un-profiled step fits {us(floor)}"
                f"{interval(crossover, 'fit_overhead_us', us, always=True)} of overhead plus the work at "
                f"{rate(speed, unit)}{interval(crossover, 'fit_throughput', lambda v: rate(v, unit), always=True)}"
                f"{_past_the_peak(speed, unit, rows)}")
        if size is None:
            return said + _no_floor(crossover, rows)
        where = ("between the sizes swept" if sizes[0] <= size <= sizes[-1] else
                 f"below the smallest size swept ({sizes[0]})" if size < sizes[0] else
                 f"above the largest size swept ({sizes[-1]})")
        needed = stats.number(crossover.get("fit_crossover_processes_needed"))
        locate = ("" if needed is None else f"; {needed:,.0f} processes a grid point would locate it within "
                  f"{CROSSOVER_SPAN:g}x at the spread observed" if needed <= MAX_PROCESSES else
                  f"; more than {MAX_PROCESSES} processes a grid point would be needed to locate it within "
                  f"{CROSSOVER_SPAN:g}x")
        return (f"{said}; the work costs more than the overhead from size ≈{fmt(size)}"
                f"{interval(crossover, 'fit_crossover_size', fmt, always=True)}, {where}{locate} ({check}).")
    size = stats.number(crossover.get("crossover_size"))
    status = str(crossover.get("status") or "")
    misfit = f" The model of the un-profiled steps {check}." if check.startswith("does not fit") else ""
    if size is not None:
        between = status.split(" (uncertain")[0].removeprefix("crossed ")
        unsure = f"; uncertain: the interval of {work} / {host} holds 1 there" if flag(crossover.get("uncertain")) else ""
        return f"{name}: {work} time overtakes {host} time at size ≈{fmt(size)}, {between}{unsure}.{misfit}"
    if status.startswith("not reached: work exceeds"):
        return (f"{name}: no crossover between sizes {sizes[0]} and {sizes[-1]}: {work} exceeds {host} at every "
                f"size; it would lie below {sizes[0]}.{misfit}")
    if status.startswith("not reached: host exceeds"):
        return (f"{name}: no crossover between sizes {sizes[0]} and {sizes[-1]}: {host} exceeds {work} at every "
                f"size; it would lie above {sizes[-1]}.{misfit}")
    return f"{name}: crossover {status}.{misfit}"


def _no_floor(crossover: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """A fit with no overhead floor (0 µs) in words: the work dominates at every size where the
    floor's interval stays under half the smallest size's step (past it, the overhead may equal
    the work there: nothing is shown); the work, not "compute": bytes where the line is through them."""
    high = stats.number(crossover.get("fit_overhead_us_high"))
    smallest = min(rows, key=lambda r: stats.number(r.get("size")) or 0)
    step = stats.number(smallest.get("timed_us_per_step"))
    if high is not None and step is not None and high >= step / 2:
        noisy = " (noisy)" if any(flag(r.get("noisy")) for r in rows) else ""
        return (f"; no overhead floor measured, and none ruled out: the floor's interval reaches {us(high)} against "
                f"a step of {us(step)} at {smallest['size']}{noisy}, so the work may not dominate there; more "
                "processes (run.repeats) or smaller sizes would tell.")
    return "; no overhead floor measurable: the work dominates at every size."


def _past_the_peak(speed: float | None, unit: str, rows: list[dict[str, Any]]) -> str:
    """Where a line through FLOPs puts the step's throughput past this machine's matmul peak: words
    that say no step runs that fast, so the line is not the step's throughput ('' otherwise). A
    line through two noisy sizes put a training step at 12.2 TFLOP/s on a CPU whose peak is 247
    GFLOP/s."""
    peaks = [p for r in rows if (p := stats.number(r.get("peak_flops_per_s"))) is not None and p > 0]
    if unit != "FLOP/s" or speed is None or not peaks or speed <= ABOVE_CEILING * max(peaks):
        return ""  # (bytes: a step whose data stays in the caches does outrun the memory's bandwidth)
    return (f" ({times(speed / max(peaks))} this machine's matmul peak, {rate(max(peaks), unit)}, which no step "
            "outruns: the line is not this step's throughput; more sizes, or more processes a size, fit one)")


def _samples(point: dict[str, Any], by_job: dict[str, dict[str, Any]]) -> list[list[float]]:
    """The un-profiled step samples of each repeat of a grid point."""
    found = []
    for name in point_jobs(point):
        job = by_job.get(name)
        if job is not None and job.usable:
            samples = timed_samples(job)
            if samples:
                found.append(samples)
    return found


def _step_key(eager: dict[str, Any], compiled: dict[str, Any]) -> str:
    """The step compile against eager is judged on: the un-profiled one where both points have it,
    else the host time of a profiled step."""
    return TIMED if all(stats.number(p.get(TIMED)) for p in (eager, compiled)) else "host_us_per_step"


# A compiled point whose jobs' torch.compile made no graph (`compiled_nothing`): both sides ran eagerly.
NOTHING_COMPILED = "not compared, torch.compile compiled nothing (Dynamo made no graph of the step: both ran eagerly)"
SIDE_BY_SIDE, ROUNDS = "side by side", "rounds"  # how compile against eager paired its processes
PAIRING = {SIDE_BY_SIDE: "eager and compiled timed in turn in each compiled process",
           ROUNDS: "each round's two processes paired"}


def compile_change(eager: dict[str, Any], compiled: dict[str, Any], by_job: dict[str, dict[str, Any]]
                   ) -> tuple[str, float, str, tuple[float | None, float | None]] | None:
    """Compile against eager at one size (change); how its processes were paired: SIDE_BY_SIDE
    where each compiled process timed the same step eager beside its own (two or more of them:
    what a process draws for itself then moves both sides alike), ROUNDS where the sweep measured
    both points in the same rounds, else ""; and the two steps (eager, compiled) it rests on."""
    key = _step_key(eager, compiled)
    timed = key == TIMED
    side = grid_points.side_by_side(compiled, by_job) if timed else None
    if side and len(side) >= 2:
        steps = grid_points.side_by_side_steps(side)
        found, how = change([], [], *steps, paired=side), SIDE_BY_SIDE
    else:
        paired = grid_points.rounds_paired(eager, compiled, by_job) if timed else None
        steps = (stats.number(eager.get(key)), stats.number(compiled.get(key)))
        found = change(_samples(eager, by_job) if timed else [], _samples(compiled, by_job) if timed else [],
                       *steps, paired=paired)
        how = ROUNDS if paired else ""
    return None if found is None else (*found, how, steps)


def change(base: list[list[float]], new: list[list[float]], base_value: float | None,
           new_value: float | None, paired: list[tuple[list[float], list[float]]] | None = None
           ) -> tuple[str, float] | None:
    """`2.00× slower [1.81, 2.20]`, `1.30× faster (0.77× [0.70, 0.83])`, `the same within ±5%
    (0.98× [0.96, 1.02])`, `no clear difference (0.98× [0.80, 1.20]; 9 processes a side would
    decide it)`: NEW against BASE by the one rule (profsweep.decide), from the repeats' samples
    where both have them (`paired`: the processes in pairs by round, stats.paired_ratio_test);
    `undecided (1.36×; one process each: no interval; ...)` without an interval (one process a
    side, or the two medians only), as the rule decides nothing then."""
    test = stats.paired_ratio_test(paired) if paired else stats.ratio_test(base, new) if base and new else None
    ratio = test.ratio if test is not None and test.ratio is not None else (
        new_value / base_value if new_value and base_value else None)
    if ratio is None:
        return None
    if test is None or test.low is None or test.high is None:
        # no interval, no verdict (the one rule): one process a side says nothing of the spread between processes
        repeats = min(len(base), len(new)) if base and new else None
        why = ("from the two medians: no interval" if not repeats else "one process each: no interval"
               if len(base) == len(new) == 1 else f"{len(base)} vs {len(new)} processes: no interval")
        return f"undecided ({times(ratio)}; {why}{_need(decide(ratio, None, None, repeats))})", ratio
    d = decide_test(test, len(paired) if paired else min(len(base), len(new)))
    if too_wide(test.low, test.high):
        # not "no clear difference": the ratio may be far from 1 (0.0066x), only its interval says nothing
        return f"undecided ({times(ratio)}; its interval too wide to read{_need(d)})", ratio
    where = f"[{times(test.low)}, {times(test.high)}]"
    if d.outcome == ABOVE:
        return f"{times(ratio)} slower {where}", ratio
    if d.outcome == BELOW:
        return f"{times(1 / ratio)} faster ({times(ratio)} {where})", ratio
    if d.outcome == SAME:
        if d.equivalence is not None:  # the 95% interval leaves the band, the two one-sided tests' 90% one does not
            where = f"[{times(d.equivalence[0])}, {times(d.equivalence[1])}], the 90% interval of two one-sided tests"
        return f"the same within ±{percent(d.band)} ({times(ratio)} {where})", ratio
    return f"no clear difference ({times(ratio)} {where}{_need(d)})", ratio


def _need(d: Decision) -> str:
    need = d.need()
    return f"; {need}" if need else ""


def _pairs(points: list[dict[str, Any]], key: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Grid points that differ only in the flag `key` (False first), by series and size."""
    out = []
    for rows in _series(points, without=key).values():
        by_size: dict[str, dict[bool, dict[str, Any]]] = {}
        for r in rows:
            by_size.setdefault(str(r["size"]), {})[flag(r.get(key))] = r
        out += [(pair[False], pair[True]) for pair in by_size.values() if len(pair) == 2]
    return out


def _grouped(pairs: list[tuple[dict[str, Any], dict[str, Any]]], key: str,
             also: Sequence[str] = ()) -> dict[str, list[tuple[dict, dict]]]:
    grouped: dict[str, list[tuple[dict, dict]]] = {}
    for a, b in pairs:
        grouped.setdefault(series_name(a, leave_out=[key, *also]), []).append((a, b))
    return grouped


def _compile(points: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> list[Conclusion]:
    """What compile changed at each size: the un-profiled step (compile / eager, with its
    interval) and the op and kernel counts behind it."""
    by_job = {str(j.get("job")): j for j in jobs}
    out = []
    for name, pairs in _grouped(_pairs(points, "compile"), "compile").items():
        said, behind, found_all = [], [], []
        for eager, compiled in pairs:
            found = None if flag(compiled.get("compiled_nothing")) else compile_change(eager, compiled, by_job)
            if found is not None:
                found_all.append((eager, compiled, found))
            elif flag(compiled.get("compiled_nothing")):
                said.append(f"{NOTHING_COMPILED} at {eager['size']}")
        hows = {found[2] for *_, found in found_all}
        every = hows.pop() if len(hows) == 1 else ""  # one pairing for all sizes: said once, in the heading
        for eager, compiled, found in found_all:
            # side by side, each process is its own pair: its processes disagreeing is no noise in the
            # ratio, the machine's load (other processes, waits for a CPU) still is
            said_noisy = "noisy_load" if found[2] == SIDE_BY_SIDE else "noisy"
            noisy = ", noisy" if any(_noisy(p, said_noisy) for p in (eager, compiled)) else ""
            how = f", {PAIRING[found[2]]}" if found[2] and not every else ""
            said.append(f"{found[0]} at {eager['size']} ({us(found[3][0])} → {us(found[3][1])} per step{noisy}{how})")
        if not said:
            continue
        eager, compiled = pairs[-1]
        gpu = _on_gpu(eager)
        for column, words in (("step_aten_ops_median", "aten ops per step"),
                              *((("step_kernels_median", "kernels per step"),
                                 ("step_launches_median", "launches per step")) if gpu else ())):
            a, b = stats.number(eager.get(column)), stats.number(compiled.get(column))
            if a is not None and b is not None and a != b:
                behind.append(f"{words} {count(a)} → {count(b)}")
        if eager.get("top_kernel") and compiled.get("top_kernel") and eager["top_kernel"] != compiled["top_kernel"]:
            behind.append(f"top {'kernel' if gpu else 'compute op'} {short_name(eager['top_kernel'])} → "
                          f"{short_name(compiled['top_kernel'])}")
        tail = f" Behind it (size {eager['size']}): {'; '.join(behind)}." if behind else ""
        how = f" ({PAIRING[every]})" if every else ""
        out.append(Conclusion("compile", f"compile against eager, {name}{how}: {'; '.join(said)}.{tail}", "summary"))
    return out + _compiled_alone(points, by_job)


def _compiled_alone(points: list[dict[str, Any]], by_job: dict[str, dict[str, Any]]) -> list[Conclusion]:
    """Compile against eager where the grid has no eager point beside a compiled one (compile=true
    alone): from the steps each compiled process timed eager and compiled in turn (helper-56: a
    compiled step 3.5x slower than eager from graph breaks went unsaid)."""
    with_eager = {series_name(p, leave_out=["compile"]) for p in points if not flag(p.get("compile"))}
    alone = [p for p in points if flag(p.get("compile")) and not flag(p.get("compiled_nothing"))
             and series_name(p, leave_out=["compile"]) not in with_eager]
    grouped: dict[str, list[dict[str, Any]]] = {}
    for p in sorted(alone, key=lambda r: stats.number(r.get("size")) or 0):
        grouped.setdefault(series_name(p, leave_out=["compile"]), []).append(p)
    out = []
    for name, rows in grouped.items():
        said = []
        for compiled in rows:
            side = grid_points.side_by_side(compiled, by_job)
            if not side or len(side) < 2:  # one process: no interval to decide by (as compile_change)
                continue
            steps = grid_points.side_by_side_steps(side)
            found = change([], [], *steps, paired=side)
            if found is not None:
                noisy = ", noisy" if _noisy(compiled, "noisy_load") else ""
                said.append(f"{found[0]} at {compiled['size']} ({us(steps[0])} → {us(steps[1])} per step{noisy})")
        if said:
            out.append(Conclusion("compile", f"compile against eager, {name} ({PAIRING[SIDE_BY_SIDE]}; the grid has "
                                             f"no eager point of its own): {'; '.join(said)}.", "summary"))
    return out


def _noisy(point: dict[str, Any], how: str) -> bool:
    """A grid point flagged noisy (`noisy`), or noisy by the machine's load (`noisy_load`: its
    `noise_load`, which moves both steps of a process alike only by chance)."""
    return flag(point.get("noisy" if how == "noisy" else "noise_load"))


def _fused(fusion: list[dict[str, Any]], points: Sequence[dict[str, Any]] = ()) -> list[Conclusion]:
    """Per compiled series at its largest size, the generated kernel that covers the most eager ops
    (the costliest of those), with what they took eager and what it takes compiled (fusion.csv);
    `noisy` where either grid point is (its profiled steps may be what was disturbed)."""
    noisy = {job for p in points if flag(p.get("noisy")) for job in point_jobs(p)}
    largest: dict[str, dict[str, Any]] = {}
    for r in fusion:
        series = str(r["point"]).replace(f"size {r['size']} ", "")
        if series not in largest or (stats.number(r["size"]) or 0) > (stats.number(largest[series]["size"]) or 0):
            largest[series] = r
    out = []
    for series, top in largest.items():
        rows = [r for r in fusion if r["point"] == top["point"] and str(r["eager_ops"] or "").count("aten::") > 1]
        if not rows:
            continue
        # a kernel whose ops no other kernel covers first: its eager time is then its own
        r = max(rows, key=lambda row: (not _text(row.get("eager_ops_shared")), str(row["eager_ops"]).count("aten::"),
                                       stats.number(row["compiled_us_per_step"]) or 0))
        ops = [o for o in str(r["eager_ops"]).split("; ") if o]
        eager, compiled = stats.number(r["eager_us_per_step"]), stats.number(r["compiled_us_per_step"])
        shared = _text(r.get("eager_ops_shared"))
        took = (f": those ops took {us(eager)} a profiled step eager"
                + (f" ({shared.replace('; ', ', ')} also covered by another kernel: every call's time, not this "
                   "kernel's alone)" if shared else "") + f", the kernel {us(compiled)} compiled"
                if eager is not None else "")
        if {str(r.get("compiled_job")), str(r.get("eager_job"))} & noisy:
            took += " (noisy)"
        out.append(Conclusion("compile", f"compile fused {_sizes(ops)} into one kernel ({short_name(str(r['kernel']))}) "
                              f"in {series} at {r['size']}{took}.", "fusion"))
    return out


def _text(value: Any) -> str:
    """A table's text cell: '' for none (NaN as pandas reads an empty cell back)."""
    return value if isinstance(value, str) else ""


def _cold_warm(points: list[dict[str, Any]]) -> list[Conclusion]:
    """What warming up changes (the first profiled step's dead window), and what the first call
    costs (compile's one-time cost shows here)."""
    out = []
    for name, pairs in _grouped(_pairs(points, "warmup"), "warmup").items():
        said = []
        for cold, warm in pairs:
            a, b = stats.number(cold.get("dead_window_us")), stats.number(warm.get("dead_window_us"))
            if a is not None and b is not None:
                said.append(f"{us(a)}{interval(cold, 'dead_window_us', us)} cold → {us(b)}"
                            f"{interval(warm, 'dead_window_us', us)} warm at {cold['size']}")
        if said:
            out.append(Conclusion("cold", f"{name}: the first profiled step's dead window (step start to the first "
                                  f"aten op): {'; '.join(said)}.", "summary"))
    # a cold process's first call: its own process (not run.isolation=none, where jobs share one)
    # and its own compilation (not from a cache an earlier job filled: run.compile_cache=shared)
    cold = [p for p in points if not flag(p.get("warmup")) and p.get("isolation") != "none"
            and p.get("compile_cache") != "shared"]
    for name, pairs in _grouped(_pairs(cold, "compile"), "compile", also=["warmup"]).items():
        said = []
        for eager, compiled in pairs:
            a, b = stats.number(eager.get("first_call_ms")), stats.number(compiled.get("first_call_ms"))
            if a is not None and b is not None:
                said.append(f"{us(a * 1e3)} eager, {us(b * 1e3)} compiled at {eager['size']}")
        if said:
            out.append(Conclusion("cold", f"first call of a cold process, {name}: {'; '.join(said)} (compiling is "
                                  "paid once per process, on the first call).", "summary"))
    return out


def _where_time_goes(points: list[dict[str, Any]], top: list[dict[str, Any]]) -> list[Conclusion]:
    """Per series: the top ops at its smallest and largest size, with their share of the step."""
    by_point: dict[str, list[dict[str, Any]]] = {}  # by the grid point's first job: one per point
    for row in top:
        by_point.setdefault(str(row["job"]), []).append(row)
    out = []
    for rows in _series(points).values():
        ends = [rows[0]] if len(rows) == 1 else [rows[0], rows[-1]]
        kind = "kernel" if _on_gpu(rows[0]) else "op"
        said = []
        for p in ends:
            found = [r for r in by_point.get(str(p.get("job")), [])
                     if r["kind"] == kind][:SAID]
            if found:
                outside = 1 - (stats.number(found[0].get("all_ops_share")) or 1)
                rest = (f" (ops {100 - outside * 100:.0f}% of the step; the rest ran outside any op: Python, "
                        "waiting (sleep, I/O, locks), the profiler's annotations)" if kind == "op" and outside >= 0.2
                        else "")
                said.append(f"at {p['size']} " + ", ".join(
                    f"{short_name(r['name'])} {r['share'] * 100:.0f}% ({us(r['us_per_step'])})" for r in found) + rest)
        if said:
            what = "device time by kernel" if kind == "kernel" else "host self time by op"
            out.append(Conclusion("time", f"where the time goes, {series_name(rows[0])} ({what} in a profiled step, "
                                  f"the median over its steps; share of the step): {'; '.join(said)}.",
                                  "where-the-time-goes"))
    return out


PHASES = ("forward", "backward", "optimizer")


def _training(points: list[dict[str, Any]]) -> list[Conclusion]:
    out = []
    for rows in _series([p for p in points if flag(p.get("train"))]).values():
        p = rows[-1]
        kind = "device" if stats.number(p.get("step_forward_device_us_median")) is not None else "host"
        times_ = {ph: stats.number(p.get(f"step_{ph}_{kind}_us_median")) for ph in PHASES}
        total = sum(t for t in times_.values() if t)
        if not total:
            continue
        split = ", ".join(f"{ph} {us(t)} ({t / total * 100:.0f}%)" for ph, t in times_.items() if t is not None)
        out.append(Conclusion("training", f"training step, {series_name(p)} at {p['size']} ({kind} time per phase): "
                              f"{split}.", "training"))
    return out


ABOVE_CEILING = 1.1  # a fraction of a ceiling past this says the ceiling, not the point, is off


def _ceilings(points: list[dict[str, Any]]) -> list[Conclusion]:
    """Per series, how close its largest size comes to the ceiling it is held against: this
    machine's measured matmul peak (or a GPU's datasheet peak, said as such), with the interval
    over the repeats; the bandwidth ceiling instead where the roofline calls the point memory-bound."""
    out = []
    for rows in _series(points).values():
        placed = [r for r in rows if stats.number(r.get("achieved_flops_frac")) is not None]
        if not placed:
            continue
        r = max(placed, key=lambda row: stats.number(row["size"]) or 0)
        bandwidth = stats.number(r.get("achieved_bandwidth_frac")) is not None
        at_ridge = flag(r.get("regime_at_ridge")) and bandwidth  # both ceilings are the one it meets
        memory = r.get("regime") == "memory-bound" and bandwidth and not at_ridge
        source = str(r.get("peak_source") or "")
        whose = ("this machine's measured" if source.startswith("measured") else "the datasheet's")
        when = f", measured {source.split(' ', 1)[1]}" if source.startswith("measured ") else ""
        held = {"achieved_bandwidth_frac": f"{whose} memory bandwidth ({rate(stats.number(r.get('peak_bytes_per_s')), 'B/s')}"
                                           f"{when})",
                "achieved_flops_frac": f"{whose} {ran_dtype(r)} matmul peak "
                                       f"({rate(stats.number(r.get('peak_flops_per_s')), 'FLOP/s')}{when})"}
        keys = (["achieved_flops_frac", "achieved_bandwidth_frac"] if at_ridge
                else ["achieved_bandwidth_frac" if memory else "achieved_flops_frac"])
        percent = lambda v: f"{v * 100:.0f}%" if v >= 0.1 else f"{v * 100:.2g}%"  # noqa: E731  (0.35%, not 0%)
        reached = " and ".join(f"{percent(r[k])}{interval(r, k, percent)} of {held[k]}" for k in keys)
        ridge = " (its intensity is at the roofline's ridge: either ceiling may be the one it meets)" if at_ridge else ""
        over = [k for k in keys if stats.number(r[k]) > ABOVE_CEILING]
        counted = ("bytes_per_call counts every input and output as moved once to and from memory, which a step "
                   "whose data stays in the caches moves faster than memory can, and one that reads part of an "
                   "input (a gather) moves less; or " if "achieved_bandwidth_frac" in over else "")
        above = (f" Above the ceiling: {counted}the ceiling was measured low (a busy machine?): python -m analysis "
                 "calibrate measures it again" if over else "")
        out.append(Conclusion("ceilings", f"{series_name(r)} at {r['size']} reaches {reached}{ridge}.{above}",
                              "plot-roofline"))
    return out


def _memory(points: list[dict[str, Any]]) -> list[Conclusion]:
    out = []
    for rows in _series(points).values():
        found = [(stats.number(r["size"]), stats.number(r.get("peak_memory_bytes")), r) for r in rows]
        found = [(s, m, r) for s, m, r in found if s and m]
        if len(found) < 2:
            continue
        (s0, m0, _), (s1, m1, _) = found[0], found[-1]
        slope = math.log(m1 / m0) / math.log(s1 / s0) if s1 != s0 and m0 > 0 else None
        # a slope that rounds to 0 (-0.0 too) is no growth: said so, not as size^-0.0
        grows = "" if slope is None else "; does not grow with the size" if round(slope, 1) == 0 else \
            f"; grows as size^{slope:.1f}"
        out.append(Conclusion("memory", f"peak memory, {series_name(found[0][2])}: {nbytes(m0)} at {int(s0)} → "
                              f"{nbytes(m1)} at {int(s1)} ({times(m1 / m0)} for {times(s1 / s0)} the size{grows}).",
                              "plot-memory"))
    return out


def _verdicts(claims: Any, expectations: Any) -> list[Conclusion]:
    out = []
    for frame, what, link in ((claims, "the article's claims", "article-check"),
                              (expectations, "your expectations", "expectations")):
        if frame is None or not len(frame):
            continue
        said = frame["holds"].astype(str).value_counts()
        held, wrong, unsure, na = (int(said.get(k, 0)) for k in ("true", "false", "inconclusive", "n/a"))
        parts = [f"{held} hold{'s' if held == 1 else ''}"]
        mismatches = frame[frame["holds"].astype(str) == "false"]
        if wrong:
            first = mismatches.iloc[0]
            parts.append(f"{wrong} do{'es' if wrong == 1 else ''} not (first: “{first.get('claim', first.get('expectation'))}”)")
        if unsure:
            parts.append(f"{unsure} inconclusive (the interval straddles the value)")
        if na:
            parts.append(f"{na} could not be judged (each says why)")
        out.append(Conclusion("claims" if link == "article-check" else "expectations",
                              f"{what}, {len(frame)} checked: {', '.join(parts)}.", link))
    return out
