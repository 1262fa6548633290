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
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from profsweep import stats

MARGIN = 0.05  # what counts as the same: within 5%
FDR = 0.05  # the false discovery rate controlled across the pairs
PAIR_KEYS = ("workload", "size", "dtype", "compile", "warmup", "train", "optimizer", "device",
             "isolation", "compile_cache", "warmup_iters", "threads")
PAIR_PREFIXES = ("workload_", "profiler_", "compile_")
# How many steps were profiled, how much of the table was printed and whether the trace was
# gzipped do not change what a step measures: a sweep rerun with profiler.active=20 for tighter
# verdicts still pairs with the first.
NOT_PAIRING = ("profiler_active", "profiler_repeat", "profiler_row_limit", "profiler_gzip",
               "profiler_overhead_ratio")  # (a measurement, not a setting)
ENVIRONMENT_KEYS = ("torch_version", "cuda_build", "driver_version", "gpus", "cpu_model", "cpu_count",
                    "hostname", "git_commit", "git_dirty", "command", "python_version", "platform")
VERDICT_ORDER = {"slower": 0, "faster": 1, "inconclusive": 2, "same": 3}
MORE_REPEATS = 3  # what a user is told to rerun with when one repeat per side says nothing


class CompareError(ValueError):
    """Input that cannot be compared; the message names it (exit 2)."""


def pair_key_of(column: str) -> str:
    """The summary column a user's `--ignore` names: workload.hidden -> workload_hidden."""
    for group, prefix in (("workload.", "workload_"), ("profiler.", "profiler_"), ("compiler.", "compile_"),
                          ("run.", "")):
        if column.startswith(group):
            return prefix + column[len(group):]
    return column


def pairing_columns(rows: Iterable[dict[str, Any]], ignore: Sequence[str]) -> list[str]:
    found = {k for r in rows for k in r if (k in PAIR_KEYS or k.startswith(PAIR_PREFIXES)) and k not in NOT_PAIRING
             and not k.startswith(tuple(f"{n}_" for n in NOT_PAIRING))}
    # the grid keys first, in the order of PAIR_KEYS, then the settings by name
    columns = sorted(found, key=lambda k: (PAIR_KEYS.index(k) if k in PAIR_KEYS else len(PAIR_KEYS), k))
    return [c for c in columns if c not in set(ignore)]


# A pairing key a sweep from before it existed does not record, and the value that sweep had.
PAIR_DEFAULTS = {"threads": "auto"}


def _identity(row: dict[str, Any], columns: list[str]) -> tuple:
    def norm(c: str) -> Any:
        v = row.get(c)
        if isinstance(v, float) and math.isnan(v):
            v = None
        return PAIR_DEFAULTS.get(c) if v is None else v

    return tuple(norm(c) for c in columns)


# --- verdicts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    verdict: str
    ratio: float | None  # NEW / BASE of the medians of repeat medians
    low: float | None
    high: float | None
    why: str
    p_value: float | None = None


def verdict(base: Sequence[Sequence[float]], new: Sequence[Sequence[float]], seed: int = 0) -> Verdict:
    """The rule of the module docstring on each side's samples, one list per repeat (before the
    control of false discoveries across the grid)."""
    test = stats.ratio_test(base, new, margin=MARGIN, seed=seed)
    if test.ratio is None:
        return Verdict("inconclusive", None, None, None, test.why)
    if test.why == "identical samples":
        return Verdict("same", 1.0, 1.0, 1.0, "identical samples", 1.0)
    if test.low is None or test.high is None:
        reps = (len(stats._groups(base)), len(stats._groups(new)))
        return Verdict("inconclusive", test.ratio, None, None,
                       f"{'1 repeat per side' if reps == (1, 1) else f'{reps[0]} vs {reps[1]} repeats'}: one process "
                       f"says nothing of the variation between processes; rerun both with run.repeats={MORE_REPEATS}")
    up, down = 1 + MARGIN, 1 / (1 + MARGIN)
    interval = f"95% interval {test.low:.3f}–{test.high:.3f}"
    if test.low > up:
        return Verdict("slower", test.ratio, test.low, test.high, interval, test.p_value)
    if test.high < down:
        return Verdict("faster", test.ratio, test.low, test.high, interval, test.p_value)
    if down <= test.low and test.high <= up:
        return Verdict("same", test.ratio, test.low, test.high, interval + f" within ±{MARGIN:.0%}", test.p_value)
    return Verdict("inconclusive", test.ratio, test.low, test.high,
                   interval + f" straddles the ±{MARGIN:.0%} band: more repeats (run.repeats) narrow it", test.p_value)


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


# --- the diff of ops and kernels (as HTA's TraceDiff: an outer join of counts) -----------------------


# Inductor names each compiled graph's call by its hash, which changes with torch, the graph and
# the settings: the same call under two hashes is one op that did not change.
_GRAPH_HASH = re.compile(r"(## Call CompiledFxGraph) \w+ (##)")


def same_op(name: str) -> str:
    return _GRAPH_HASH.sub(r"\1 \2", name)


def _by_name(counts: dict[str, float]) -> dict[str, float]:
    merged: dict[str, float] = {}
    for name, calls in counts.items():
        merged[same_op(name)] = merged.get(same_op(name), 0) + calls
    return merged


def count_diff(base: dict[str, float], new: dict[str, float], steps_base: float, steps_new: float) -> list[dict[str, Any]]:
    """Per name: calls per step on each side and whether it appeared, vanished or changed count."""
    base, new = _by_name(base), _by_name(new)
    rows = []
    for name in sorted(set(base) | set(new)):
        b = base.get(name, 0) / (steps_base or 1)
        n = new.get(name, 0) / (steps_new or 1)
        if name not in base:
            change = "appeared"
        elif name not in new:
            change = "vanished"
        elif abs(b - n) > 1e-9:
            change = "changed count"
        else:
            continue
        rows.append({"name": name, "base_per_step": b, "new_per_step": n, "change": change})
    return rows


# --- sides ---------------------------------------------------------------------------------------


@dataclass
class Side:
    folder: Path
    jobs: list[dict[str, Any]]  # one per grid point (summary.csv's rows) with a usable repeat
    steps: dict[str, list[dict[str, Any]]]  # job -> its step rows
    ops: dict[str, dict[str, float]]  # job -> op name -> calls
    kernels: dict[str, dict[str, float]]  # job -> kernel name -> calls
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
    kernels: dict[str, dict[str, float]] = {}
    for k in tables.kernels:
        kernels.setdefault(k["job"], {})[k["name"]] = k["calls"]
    try:
        environment = json.loads((folder / "environment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        environment = {}
    return Side(folder, points, steps, {j: {o["name"]: o["calls"] for o in ops} for j, ops in tables.ops.items()},
                kernels, environment, {str(j["job"]): j for j in tables.jobs if usable(j)})


def _repeat_jobs(side: Side, point: dict[str, Any]) -> list[dict[str, Any]]:
    names = str(point.get("jobs") or point["job"]).split(";")
    return [side.repeats[n] for n in names if n in side.repeats] or [point]


def _samples(side: Side, point: dict[str, Any], on: str) -> list[list[float]]:
    """Each repeat's samples: its steps' device time, its un-profiled steps, or its profiled
    steps' host duration."""
    from profsweep.contract import timed_samples

    out = []
    for job in _repeat_jobs(side, point):
        if on == "timed":
            out.append(timed_samples(job))
        else:
            out.append(stats.clean(s.get(on) for s in side.steps.get(job["job"], [])))
    return [g for g in out if g]


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


def compare_sides(base: Side, new: Side, ignore: Sequence[str] = (), fdr: float = FDR) -> dict[str, Any]:
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
        by_key.setdefault(_identity(job, columns), []).append(job)
    pairs, unmatched_new = [], []
    used: set[str] = set()
    for job in new.jobs:
        candidates = [b for b in by_key.get(_identity(job, columns), []) if b["job"] not in used]
        if not candidates:
            unmatched_new.append(job["job"])
            continue
        partner = candidates[0]
        used.add(partner["job"])
        pairs.append(_pair(base, partner, new, job, columns))
    unmatched_base = [j["job"] for j in base.jobs if j["job"] not in used]
    if not pairs:
        raise CompareError(f"{base.folder} and {new.folder} have nothing in common: no job of one measured "
                           f"what a job of the other did (paired by {', '.join(columns)}); "
                           "--ignore KEY pairs across a key")
    control_discoveries(pairs, fdr)
    pairs.sort(key=lambda p: (VERDICT_ORDER.get(p["verdict"], 9), -(p["step_ratio"] or 0)))
    environment = [
        {"key": k, "base": _show(base.environment.get(k)), "new": _show(new.environment.get(k))}
        for k in ENVIRONMENT_KEYS if _show(base.environment.get(k)) != _show(new.environment.get(k))
    ]
    return {"columns": columns, "pairs": pairs, "unmatched_base": unmatched_base,
            "unmatched_new": unmatched_new, "environment": environment, "fdr": fdr,
            "tested": sum(1 for p in pairs if p.get("p_value") is not None)}


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else "" if value is None else str(value)


def _pair(base: Side, b: dict[str, Any], new: Side, n: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    def has(key: str) -> bool:
        return b.get(key) is not None and n.get(key) is not None and not _nan(b[key]) and not _nan(n[key])

    on, said = (("device_us", "device time per step") if has("device_us_per_step") else
                ("timed", "un-profiled step") if has("timed_us_per_step") else ("host_us", "host duration per step"))
    base_samples, new_samples = _samples(base, b, on), _samples(new, n, on)
    judged = verdict(base_samples, new_samples)
    loaded = [side for side, point in (("BASE", b), ("NEW", n)) if point.get("noise_load") in (True, "True")]
    if loaded and judged.why != "identical samples":
        reasons = "; ".join(f"{side} noisy: {point.get('noise_reason')}" for side, point in (("BASE", b), ("NEW", n))
                            if side in loaded)
        judged = Verdict("inconclusive", judged.ratio, judged.low, judged.high,
                         f"{reasons}; rerun {' and '.join(loaded)} on a quiet machine", None)
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
        "verdict_why": judged.why,
        "repeats_base": len(base_samples), "repeats_new": len(new_samples),
        "noisy_base": b.get("noisy"), "noisy_new": n.get("noisy"),
        "first_call_ms_ratio": _ratio(b.get("first_call_ms"), n.get("first_call_ms")),
        "peak_memory_ratio": _ratio(b.get("peak_memory_bytes"), n.get("peak_memory_bytes")),
    })
    for key in ("step_kernels_median", "step_launches_median", "step_aten_ops_median"):
        row[f"{key}_base"], row[f"{key}_new"] = b.get(key), n.get(key)
    steps_b, steps_n = b.get("steps") or 1, n.get("steps") or 1
    row["ops_diff"] = count_diff(base.ops.get(b["job"], {}), new.ops.get(n["job"], {}), steps_b, steps_n)
    row["kernels_diff"] = count_diff(base.kernels.get(b["job"], {}), new.kernels.get(n["job"], {}), steps_b, steps_n)
    row["ops_changed"] = len(row["ops_diff"])
    row["kernels_changed"] = len(row["kernels_diff"])
    return row


def compare_traces(base: Path, new: Path) -> dict[str, Any]:
    """Two single traces: their op and kernel counts per step, diffed."""
    from analysis.trace import TraceError, analyse_trace

    try:
        a, b = analyse_trace(base), analyse_trace(new)
    except TraceError as exc:
        raise CompareError(str(exc)) from None
    steps_a, steps_b = a["steps"] or 1, b["steps"] or 1
    return {
        "host_us_per_step_ratio": _ratio(a["self_cpu_total_us"] / steps_a, b["self_cpu_total_us"] / steps_b),
        "ops_diff": count_diff({o["name"]: o["calls"] for o in a["top_ops"]},
                               {o["name"]: o["calls"] for o in b["top_ops"]}, steps_a, steps_b),
        "kernels_diff": count_diff({k["name"]: k["calls"] for k in a["kernels"]},
                                   {k["name"]: k["calls"] for k in b["kernels"]}, steps_a, steps_b),
    }


# --- outputs ----------------------------------------------------------------------------------------

COMPARE_FILE = "compare.json"
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
    diffs = [{"base_job": p["base_job"], "new_job": p["new_job"], "what": what, **d}
             for p in pairs for what in ("op", "kernel") for d in p[f"{what}s_diff"]]
    atomic_write_text(out / "ops_diff.csv", pd.DataFrame(
        diffs, columns=["base_job", "new_job", "what", "name", "base_per_step", "new_per_step", "change"]).to_csv(index=False))
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
    from analysis.report import CSS, _fmt, _image, _table

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
        f"both sides' repeats; <i>same</i> within ±{MARGIN:.0%}; <i>inconclusive</i> when the interval straddles "
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
        trace = str(record.get("trace_file") or "").split(";")[0]
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
            label = " ".join(f"{c}={_fmt(p.get(c))}" for c in result["columns"] if c in ("workload", "size", "dtype",
                                                                                      "compile", "warmup", "train", "device"))
            rows.append([escape(label), f"<span class='{style.get(p['verdict'], '')}'>{escape(p['verdict'])}</span>",
                         escape(_fmt(p["host_us_per_step_ratio"])), escape(_fmt(p["device_us_per_step_ratio"])),
                         escape(_fmt(p["host_us_per_step_base"])), escape(_fmt(p["host_us_per_step_new"])),
                         escape(p["verdict_why"]), escape(_fmt(p["first_call_ms_ratio"])),
                         escape(_fmt(p["peak_memory_ratio"])), escape(str(p["ops_changed"])),
                         f"{link(base, p['base_job'], SERVED_BASE)} · {link(new, p['new_job'], SERVED_NEW)}"])
        parts.append(_table(["grid point", "verdict", "host ratio", "device ratio", "host µs base", "host µs new",
                             "why", "first call ratio", "peak memory ratio", "ops changed", "traces (base · new)"],
                            rows, left=2))
        for p in chosen:
            changed = p["ops_diff"] + [dict(d, name=f"[kernel] {d['name']}") for d in p["kernels_diff"]]
            if changed:
                parts.append(f"<details><summary>{escape(p['base_job'])} → {escape(p['new_job'])}: "
                             f"{len(changed)} ops/kernels changed</summary>" + _table(
                                 ["name", "change", "base per step", "new per step"],
                                 ([escape(str(d["name"])[:110]), escape(d["change"]), escape(_fmt(d["base_per_step"])),
                                   escape(_fmt(d["new_per_step"]))] for d in changed)) + "</details>")
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
