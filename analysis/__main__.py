"""python -m analysis SWEEP_DIR          (re)write a sweep's tables, plots and report
python -m analysis trace FILE [--json]  the metrics of one Chrome trace (.json or .json.gz), or a job folder's
python -m analysis compare BASE NEW [--out DIR] [--ignore KEY ...] [--fail-if-slower R]
                                        two sweeps grid point by grid point (or two traces op by op)
python -m analysis serve FOLDER [--port N] [--no-browser]
                                        serve a report or comparison on localhost (Perfetto buttons)
python -m analysis history SWEEP... [--out DIR] [--ignore KEY ...] [--fail-on-change R] [--order given]
                                        many sweeps over time: the store, the changes found, history.html
python -m analysis sql DB "QUERY" [--csv]
                                        ask the history store anything (DB: history.duckdb or its folder)
python -m analysis calibrate [--device cpu|cuda] [--dtype bf16 ...] [--threads N]
                                        measure this machine's matmul FLOP/s and memory bandwidth (cached)
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

from analysis.points import distinct_keys
from profsweep.contract import amount, not_a_folder, one_line, point_label, read_json
from profsweep.terminal import Terminal, guard_streams
from profsweep.decide import BAND, BAND_ALLOWED, check_band, using_band

PROG = "python -m analysis"  # how the commands name themselves (the `profsweep` command sets its own)
ANALYSE = ""  # the analysis's own subcommand word after PROG (`profsweep analyse`)



def out_folder(text: str) -> Path:
    """--out's folder; an empty one is refused (Path("") is ".": everything would land where the
    command ran)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give a folder to write into, e.g. --out outputs/cmp")
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: give a folder to write into")
    return Path(text)


def band_argument(parser: argparse.ArgumentParser) -> None:
    """`--band B`: the one rule's band for every verdict of the command (profsweep.decide)."""
    def band(text: str) -> float:
        try:
            return check_band(float(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not allowed: {BAND_ALLOWED}") from None

    parser.add_argument("--band", type=band, default=BAND, metavar="B",
                        help=f"what counts as the same: a ratio within ±B by two one-sided tests at 5%%, a change "
                        f"one past it (default {BAND:g}: ±5%%)")


def _us(value: Any) -> str:
    return "-" if value is None else f"{value:,.3f} us"


def _stat(stats: dict[str, Any], unit: str = "") -> str:
    if stats["median"] is None:
        return "-"
    if unit == "%":
        fmt = lambda v: f"{v:.1%}"  # noqa: E731
    elif unit:
        fmt = lambda v: f"{v:,.3f}{unit}"  # noqa: E731
    else:
        fmt = lambda v: f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"  # noqa: E731
    return f"{fmt(stats['median'])} [{fmt(stats['min'])}, {fmt(stats['max'])}]"


def trace_summary(m: dict[str, Any]) -> str:
    """A readable summary of one trace's metrics."""
    window = f"{m['steps']} steps ({', '.join(m['step_names'])})" if m["steps"] else "whole trace (no ProfilerStep#)"
    lines = [
        f"trace: {', '.join(m['files'])}",
        f"window: {window}; platform: {m['platform']}" + (f"; device: {m['device_name']}" if m["device_name"] else ""),
        f"Self CPU total: {_us(m['self_cpu_total_us'])}   Self device total: {_us(m['self_device_total_us'])}",
        f"host compute: {_us(m['compute_us'])}   framework overhead: {_us(m['overhead_us'])}",
        f"kernels: {m['kernels_total']}   launches: {m['launches_total']}   memcpys: {m['memcpys_total']}"
        f"   memsets: {m['memsets_total']}   occupancy queries: {m['occupancy_queries_total']}",
        f"dead window (first step, annotation -> first aten op): {_us(m['dead_window_us'])}",
        f"regime: {m['regime'] or 'not overhead-bound (compute vs memory needs the workload cost)'}",
        *([f"malformed events (a duration no measurement has, not summed): {m['malformed_events']}: "
           + ", ".join(f"{n} ({c})" for n, c in list(m["malformed"].items())[:5])] if m.get("malformed_events") else []),
        "per step: median [min, max]",
    ]
    p = m["per_step"]
    for key, label, unit in (
        ("host_us", "host duration", " us"), ("self_cpu_us", "self CPU", " us"),
        ("device_us", "device time", " us"), ("kernels", "kernels", ""), ("launches", "launches", ""),
        ("memcpys", "memcpys", ""), ("occupancy_queries", "occupancy queries", ""),
        ("gpu_busy", "GPU busy", "%"), ("launch_lag_us", "launch -> kernel lag", " us"),
        ("sync_us", "synchronize", " us"),
    ):
        lines.append(f"  {label:<22} {_stat(p[key], unit)}")
    if m["kernels"]:
        lines.append("top kernels" + (" (CPU: compute ops)" if m["platform"] == "cpu" else "") + ": calls, total, median [min, max] us")
        for k in m["kernels"][:10]:
            cores = {True: "tensor cores", False: "CUDA cores"}.get(k.get("tensor_cores"))
            occupancy = f"occupancy {k['occupancy_pct']:.0f}%" if k.get("occupancy_pct") is not None else None
            facts = ", ".join(f for f in (cores, occupancy) if f)
            lines.append(f"  {k['calls']:>5} {k['total_us']:>12,.3f} {k['median_us']:>10,.3f} "
                         f"[{k['min_us']:,.3f}, {k['max_us']:,.3f}]  {k['name'][:90]}" + (f"  ({facts})" if facts else ""))
    lines.append("top ops: calls, self host us, self device us")
    for o in m["top_ops"][:10]:
        lines.append(f"  {o['calls']:>5} {o['self_host_us']:>12,.3f} {o['self_device_us']:>12,.3f}  {o['name'][:90]}")
    return "\n".join(lines)


def job_traces(folder: Path) -> list[Path]:
    """The traces a job's folder holds, by its metrics.json (one per profiler cycle)."""
    from analysis.trace import TraceError
    from profsweep.contract import METRICS_FILE, leads_out, trace_files

    try:
        record = read_json(folder / METRICS_FILE)
    except (OSError, ValueError) as exc:
        raise TraceError(f"{folder} is not a job's folder (no readable {METRICS_FILE}: {exc}); "
                         "give a trace file, or a job's folder of a sweep") from None
    found = [folder / name for name in trace_files(record if isinstance(record, dict) else {})]
    found = [p for p in found if p.is_file() and not leads_out(p, folder)]
    if not found:
        raise TraceError(f"{folder}: its {METRICS_FILE} names no trace that is there "
                         f"(status {record.get('status') if isinstance(record, dict) else None!r})")
    return found


def _point(pair: dict[str, Any], columns: list[str]) -> str:
    """`matmul_add size=64 bf16 cold eager`: a pair's grid point in words (profsweep.contract.point_label),
    without the keys it was not paired by (--ignore)."""
    return point_label({"job": pair["new_job"], **pair},
                       without=[k for k in ("size", "dtype", "warmup", "compile", "train", "device") if k not in columns])


def live(folder: Path, strict: bool) -> bool:
    """Say when a sweep is still writing `folder`; True when that refuses the command (--strict)."""
    from profsweep.contract import live_sweep

    pid = live_sweep(folder)
    if pid is None:
        return False
    who = f"a sweep that is still running (pid {pid})" if pid > 0 else "a sweep that is still running"
    if strict:
        print(f"error: {folder} is being written by {who}: wait for it to end (--strict)", file=sys.stderr)
        return True
    print(f"warning: {folder} is being written by {who}: this reads the jobs finished so far", file=sys.stderr)
    return False


def compare_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} compare",
        epilog="example: %(prog)s outputs/previous outputs/latest --fail-if-slower 1.10 (the last two sweeps)",
        description="Compare two sweeps (or runs) grid point by grid point, or two traces op by op.")
    parser.add_argument("base", type=Path, help="the sweep (or run) folder, or trace, to compare against")
    parser.add_argument("new", type=Path, help="the sweep (or run) folder, or trace, that changed")
    parser.add_argument("--out", type=out_folder, help="where to write compare.csv, plots/, compare.html "
                        "(default: NEW/compare)")
    parser.add_argument("--ignore", action="append", default=[], metavar="KEY",
                        help="a key not to pair by, e.g. compile (eager vs compiled) or device")
    parser.add_argument("--fail-if-slower", type=float, metavar="R",
                        help="exit 1 when a pair is judged slower by more than R (e.g. 1.10: 10%%)")
    parser.add_argument("--strict", action="store_true", help="refuse a folder a sweep is still writing")
    parser.add_argument("--fdr", type=float, default=0.05, metavar="Q",
                        help="the false discovery rate controlled across the pairs (Benjamini-Hochberg; default 0.05)")
    band_argument(parser)
    args = parser.parse_args(argv)
    args.ignore = distinct_keys(args.ignore)
    from analysis.compare.engine import compare_sides, compare_traces, diff_lines
    from analysis.compare.page import write_compare
    from analysis.compare.side import CompareError, load_side

    from profsweep.contract import live_sweep

    if any([live(folder, args.strict) for folder in (args.base, args.new) if folder.is_dir()]):
        return 2
    new_live = args.new.is_dir() and live_sweep(args.new) is not None
    try:
        if args.fail_if_slower is not None and not 1 <= args.fail_if_slower < math.inf:
            raise CompareError(f"--fail-if-slower {args.fail_if_slower} is not allowed: give a finite ratio >= 1, "
                               "e.g. 1.10")
        if args.base.is_file() and args.new.is_file():
            if args.fail_if_slower is not None:
                raise CompareError("--fail-if-slower judges two sweeps (each grid point over its processes); two "
                                   "traces are one profiled run each, with no interval to judge by: give the "
                                   "sweep (or run) folders")
            diff = compare_traces(args.base, args.new)
            print(f"host per step NEW/BASE: {diff['host_us_per_step_ratio']:.3f} "
                  f"({diff['steps_base']} and {diff['steps_new']} profiled steps)")
            print("\n".join(diff_lines(diff)))
            return 0
        if not 0 < args.fdr < 1:
            raise CompareError(f"--fdr {args.fdr} is not allowed: give a false discovery rate between 0 and 1, e.g. 0.05")
        base, new = load_side(args.base), load_side(args.new)
        result = compare_sides(base, new, args.ignore, fdr=args.fdr, band=args.band)
    except (CompareError, OSError) as exc:  # bad input, or a sweep it could not read: exit 2, not a verdict
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out or args.new / "compare"
    try:
        written = write_compare(result, base, new, out)
    except OSError as exc:  # an output it could not write: exit 2 (1 is the gate's: slower, or failed in NEW)
        print(f"error: cannot write the comparison: {exc}" + ("" if args.out else "; --out DIR writes it elsewhere"),
              file=sys.stderr)
        return 2
    pairs = result["pairs"]
    counts = ", ".join(f"{sum(1 for p in pairs if p['verdict'] == v)} {v}"
                       for v in ("slower", "faster", "same", "inconclusive"))
    print(f"compare: {amount(len(pairs), 'pair')} ({counts}) -> {written[-1]}")
    if not pairs:
        print(f"  every grid point of {args.new} that {args.base} measured failed")
    print(f"  false discoveries controlled: Benjamini-Hochberg at {result['fdr']:g} over {result['tested']} "
          "pairs with an interval")
    if result.get("grid_shift"):
        print(f"  {result['grid_shift']}")
    for p in pairs:
        ratio = f"{p['step_ratio']:.3f}x" if p["step_ratio"] is not None else "no ratio"
        apart = f" ({p['ignored_values']})" if p.get("ignored_values") else ""
        print(f"  {p['verdict']:<12} {_point(p, result['columns'])}{apart}: {ratio} ({p['verdict_on']}; "
              f"{p['verdict_why']})")
    for side, other, key in (("BASE", "NEW", "unmatched_base"), ("NEW", "BASE", "unmatched_new")):
        if result[key]:
            print(f"  measured in {side} only (no such grid point in {other}): {', '.join(result[key])}")
    for side, key in (("BASE", "twice_base"), ("NEW", "twice_new")):
        for twin in result[key]:
            print(f"  not judged, a second grid point in {side} that pairs alike: {twin['job']}: {twin['why']}")
    for side, other, key in (("NEW", "BASE", "failed_new"), ("BASE", "NEW", "failed_base")):
        for f in result[key]:
            print(f"  failed in {side} (measured in {other}, {f['measured_job']}): {f['failed_job']}: {f['error']}")
    for side, key in (("BASE", "lost_base"), ("NEW", "lost_new")):
        for lost in result[key]:  # a repeat that failed where its grid point has others: fewer processes to judge
            print(f"  a repeat failed in {side} (its grid point judged on the others): {lost['job']}: {lost['error']}"
                  if lost["point_known"] else f"  a job in {side} has no readable record, so its grid point is "
                  f"unknown (left out of every verdict): {lost['job']}: {lost['error']}")
    for side, key, folder in (("BASE", "damaged_base", args.base), ("NEW", "damaged_new", args.new)):
        for damaged in result[key][:3]:  # judged without the fields it could not read: maybe on another metric
            print(f"  a record in {side} could not be read whole (judged without those fields): {damaged['job']}: "
                  f"{one_line(damaged['error'])}")
        if len(result[key]) > 3:
            print(f"  and {len(result[key]) - 3} more records in {side} that could not be read whole (python -m analysis "
                  f"{folder} names each)")
    for side, key in (("BASE", "incomplete_base"), ("NEW", "incomplete_new")):
        if result[key]:
            print(f"  {side} is not a whole sweep: {result[key]}")
    for side, key in (("BASE", "edited_base"), ("NEW", "edited_new")):
        if result[key]:
            print(f"  {side}'s {result[key]}")
    for e in result["environment"]:
        print(f"  environment differs: {e['key']}: {e['base']} -> {e['new']}")
    if args.fail_if_slower is not None:
        bad = [p for p in pairs if p["verdict"] == "slower" and (p["step_ratio"] or 0) > args.fail_if_slower]
        for p in bad:
            print(f"slower: {p['base_job']} -> {p['new_job']}: {p['step_ratio']:.3f}x the base "
                  f"({p['verdict_on']}, {p['verdict_why']})")
        for f in result["failed_new"]:  # a grid point that crashed is no faster
            print(f"failed: {f['measured_job']} -> {f['failed_job']}: {f['error']}")
        # what NEW did not measure, stopped or unreadable, may be what got slower
        unread = [lost for lost in result["lost_new"] if not lost["point_known"]]
        for lost in unread:
            print(f"failed: {lost['job']} in NEW has no readable record: {lost['error']}")
        if result["incomplete_new"]:
            print(f"failed: NEW is not a whole sweep: {result['incomplete_new']}")
        if new_live:
            print(f"failed: NEW ({args.new}) is being written by a sweep that is still running: the jobs it has not "
                  "finished may be what got slower; gate it once the sweep has ended")
        for twin in result["twice_new"]:
            print(f"failed: {twin['job']} in NEW was not judged: {twin['why']}")
        if bad or result["failed_new"] or unread or result["incomplete_new"] or new_live or result["twice_new"]:
            return 1
    return 0


def _every(seconds: float):
    """A progress printer (stderr) that says something at most every `seconds`."""
    import time

    last = [time.monotonic()]

    def say(line: str) -> None:
        if time.monotonic() - last[0] >= seconds:
            print(f"history: {line}", file=sys.stderr, flush=True)
            last[0] = time.monotonic()

    return say


def history_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} history", epilog="example: %(prog)s outputs/nightly --fail-on-change 1.10",
        description="Put sweeps into one store (history.duckdb, new ones only), pair their grid points as compare "
        "does, find where each grid point's time per step changed, and write regressions.csv, trends.csv and "
        "history.html.")
    parser.add_argument("sweeps", nargs="+", type=Path, metavar="SWEEP",
                        help="an analysed sweep (or run) folder, or a folder of them (searched 3 levels down)")
    parser.add_argument("--out", type=out_folder, help="where history.duckdb, regressions.csv, trends.csv and history.html "
                        "go (default: history/ in the folder of sweeps given, else in the sweeps' common parent)")
    parser.add_argument("--ignore", action="append", default=[], metavar="KEY",
                        help="a key not to pair by (as compare's), e.g. a workload setting changed between sweeps")
    parser.add_argument("--fail-on-change", type=float, metavar="R",
                        help="exit 1 when a confirmed regression has a ratio above R (e.g. 1.10: 10%%): a nightly gate")
    parser.add_argument("--order", choices=("time", "given"), default="time",
                        help="the sweeps by their start time (default) or as given on the command line")
    band_argument(parser)
    args = parser.parse_args(argv)
    args.ignore = distinct_keys(args.ignore)
    with using_band(args.band):
        return _history(args)


def _made_by_this_run(folder: Path, store: Path) -> Callable[[], None]:
    """What takes away the folder or the store file a run is about to make, if neither was there."""
    import shutil

    folder_new, store_new = not folder.exists(), not store.exists()

    def undo() -> None:
        if folder_new:
            shutil.rmtree(folder, ignore_errors=True)
        elif store_new:
            for made in (store, store.with_name(store.name + ".wal")):
                made.unlink(missing_ok=True)

    return undo


def _history(args: argparse.Namespace) -> int:
    from analysis.history import engine as history
    from analysis.points import PAIR_KEYS, PAIR_PREFIXES, pair_key_of
    from analysis.store import STORE_FILE, Store, StoreError, default_out, find_sweeps

    made: Callable[[], None] = lambda: None
    try:
        if args.fail_on_change is not None and not 1 <= args.fail_on_change < math.inf:
            raise StoreError(f"--fail-on-change {args.fail_on_change} is not allowed: give a finite ratio >= 1, "
                             "e.g. 1.10")
        for key in args.ignore:
            if not (pair_key_of(key) in PAIR_KEYS or pair_key_of(key).startswith(PAIR_PREFIXES)):
                raise StoreError(f"--ignore {key!r} is not a key that pairs jobs: choose from "
                                 f"{', '.join(PAIR_KEYS)} or a workload., profiler. or compiler. setting")
        unanalysed: list = []
        sweeps = find_sweeps(args.sweeps, lambda line: print(line, file=sys.stderr), unanalysed)
        settings = [pair_key_of(k) for k in args.ignore if pair_key_of(k) not in PAIR_KEYS]
        if settings:  # a setting no sweep has: refused before the store is made or written
            from analysis.store import summary_columns

            have = set().union(*(summary_columns(s.summary) for s in sweeps))
            missing = [k for k, c in zip(args.ignore, settings) if c not in have] if have else []
            if missing:
                shown = sorted(c for c in have if c.startswith(PAIR_PREFIXES))
                raise StoreError(f"--ignore {missing[0]!r}: no sweep given has that setting"
                                 + (f" (theirs: {', '.join(shown)})" if shown else ""))
        out = args.out or default_out(args.sweeps, sweeps)
        made = _made_by_this_run(out, out / STORE_FILE)
        with Store(out / STORE_FILE) as store:
            ids, new = store.ingest(sweeps, progress=_every(5.0))
            again = f" ({store.reread} of them again: analysed since)" if store.reread else ""
            print(f"history: ingested {amount(new, 'new sweep')}{again}, {len(sweeps) - new} already in "
                  f"the store -> {store.path}")
            chosen = history.order(sweeps, args.order == "given")
            copies = store.copies([ids[s] for s in chosen])
            named = {ids[s]: s.folder for s in chosen}
            for copy, original in copies.items():  # two of one sweep would confirm any change it shows
                print(f"warning: {named[copy]} and {named[original]} hold the same measurements (the same start and "
                      f"job start times: a folder copied, perhaps resumed since): counted once, as {named[original]}",
                      file=sys.stderr)
            chosen = [s for s in chosen if ids[s] not in copies]
            if len(sweeps) > 1 and len(chosen) == 1:
                raise StoreError(f"the {len(sweeps)} sweeps given are copies of one: nothing to follow over time")
            found = history.load(store, [ids[s] for s in chosen], args.ignore)
            if len(sweeps) > 1 and not any(len(line.points) > 1 for line in found.lines) and not history.broken(found):
                raise StoreError(f"these {len(sweeps)} sweeps have nothing in common: no grid point was measured in "
                                 f"two of them (paired by {', '.join(found.columns)}); --ignore KEY pairs across a key")
            history.analyse(found)
            history.describe_changes(store, found)
        written = history.write(found, out)
    except StoreError as exc:
        made()  # a refused history leaves no store it made
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file it could not read or write: named, no traceback; exit 2 (1 is the gate's)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(history.lines_for_terminal(found)))
    print(f"  -> {', '.join(str(p) for p in written)}")
    if args.fail_on_change is not None:
        newest = found.sweeps[-1]
        # a sweep below the folders given, newer than every one taken, left without its analysis (killed
        # before it: the OOM killer, a reboot): the night's results are missing, as a broken build's
        last = max(s.started_at for s in sweeps)
        later = [folder for folder, started in unanalysed if started is None or started > last]
        if later:
            print(f"failed in the newest sweep: {later[-1]} is not analysed (stopped before its analysis: killed, or "
                  f"the machine went down), so nothing of it was compared; python -m analysis {later[-1]} analyses "
                  "what its jobs recorded")
            return 1
        if history.broken(found):  # a broken build, or a sweep stopped early, is the first regression
            unrun = history.unrun_jobs(newest)[0]
            lost = []
            if newest.get("jobs_failed"):
                lost.append(f"{int(newest['jobs_failed'])} jobs failed")
            if unrun:
                lost.append(f"{unrun} planned jobs never ran")
            missing = len(history.newest_missing(found))
            print(f"failed in the newest sweep: {', '.join(lost)} in {newest['name']}"
                  + (f", {missing} grid points measured before" if missing else
                     ": not a whole sweep, its grid points judged on fewer processes than planned"))
            return 1
        bad = [r for r in found.changes if r["status"] == "regression" and r["ratio"] > args.fail_on_change]
        for r in bad:
            print(f"regression beyond {args.fail_on_change:g}: {r['point']} at {r['change_at']}: {r['ratio']:.3f}x")
        if bad:
            return 1
    return 0


def sql_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} sql",
        epilog='example: %(prog)s outputs/nightly/history "SELECT sweep, size, timed_us_per_step FROM trend '
               'ORDER BY started_at"',
        description="Run one SQL query (DuckDB's dialect) on a history store, read-only, and print the result.")
    parser.add_argument("db", type=Path, help="the store: history.duckdb, or the folder holding it")
    parser.add_argument("query", help='e.g. "SELECT sweep, size, timed_us_per_step FROM trend ORDER BY started_at"')
    parser.add_argument("--csv", action="store_true", help="print CSV (every row, values in full) instead of a table")
    args = parser.parse_args(argv)
    from analysis.store import STORE_FILE, Store, StoreError, duckdb_module, print_result

    path = args.db / STORE_FILE if args.db.is_dir() else args.db
    try:
        duckdb = duckdb_module()
        with Store(path, read_only=True) as store:
            try:
                count = len(duckdb.extract_statements(args.query))
                if count != 1:
                    raise StoreError(f"give one query (SELECT ...); {args.query!r} holds {count} statements")
                # the store's tables are in it: no statement reads or writes a file outside (COPY, read_csv)
                store.con.execute("SET enable_external_access = false")
                cursor = store.con.execute(args.query)
            except duckdb.Error as exc:
                raise StoreError(f"the query failed: {exc}") from None
            print_result(cursor, sys.stdout, as_csv=args.csv)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def calibrate_main(argv: list[str]) -> int:
    from profsweep import ceilings

    parser = argparse.ArgumentParser(
        prog=f"{PROG} calibrate", epilog="example: %(prog)s --device cpu --dtype bf16 fp32",
        description="Measure this machine's ceilings, the roofline's limits: dense matmul FLOP/s (square sizes "
        "up to the one that saturates, the best sustained rate over processes) and memory bandwidth (STREAM copy "
        f"and triad over arrays of at least 4x the last-level cache). Each replaces its entry in "
        f"{ceilings.cache_path()}, which every sweep reads before its first job (run.ceilings=measure).")
    parser.add_argument("--device", choices=("auto", *ceilings.DEVICES), default="auto",
                        help="auto (default): cuda where nvidia-smi lists a GPU, else cpu")
    parser.add_argument("--dtype", nargs="+", choices=ceilings.DTYPES, default=["bf16"], help="default: bf16")
    parser.add_argument("--threads", default="auto", help="torch's intra-op threads: auto (default) or a count, "
                        "as run.threads")
    parser.add_argument("--processes", type=int, default=ceilings.PROCESSES,
                        help=f"processes to take the best of (default {ceilings.PROCESSES})")
    args = parser.parse_args(argv)
    threads: Any = args.threads
    if threads != "auto":
        if not str(threads).isdigit() or int(threads) < 1:
            print(f"error: --threads {threads!r} is not allowed: give a count >= 1, or auto", file=sys.stderr)
            return 2
        threads = int(threads)
    device = args.device if args.device != "auto" else "cuda" if ceilings.gpu_names() else "cpu"
    for dtype in args.dtype:
        try:
            ceiling = ceilings.measure(device, dtype, threads, args.processes, progress=print)
        except ceilings.CeilingError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        ceilings.remember(ceiling, threads)
        print(f"  {ceiling.line()}\n  in {ceiling.seconds:.1f} s: {ceiling.how}")
        if ceiling.busy:
            print("  warning: others kept the machine busy: these ceilings may be low; calibrate again when it "
                  "is quiet")
    print(f"cached in {ceilings.cache_path()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "analyse" and not Path(argv[0]).exists():  # the profsweep command's spelling
        argv = argv[1:]
    if argv and argv[0] == "calibrate":
        return calibrate_main(argv[1:])
    if argv and argv[0] == "history":
        return history_main(argv[1:])
    if argv and argv[0] == "sql":
        return sql_main(argv[1:])
    if argv and argv[0] == "trace":
        parser = argparse.ArgumentParser(prog=f"{PROG} trace", description="Metrics of one Chrome trace.",
                                         epilog="example: %(prog)s outputs/latest/0_*   (a sweep's first job)")
        parser.add_argument("file", type=Path, help="a torch.profiler Chrome trace, .json or .json.gz, or a job's "
                            "folder (the traces its metrics.json names)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        args = parser.parse_args(argv[1:])
        from analysis.trace import TraceError, analyse_trace

        try:
            m = analyse_trace(job_traces(args.file) if args.file.is_dir() else args.file)
        except TraceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if args.json:
            m = {k: v for k, v in m.items() if k != "per_step_values"}
            print(json.dumps(m))
        else:
            print(trace_summary(m))
        return 0

    if argv and argv[0] == "compare":
        return compare_main(argv[1:])
    if argv and argv[0] == "serve":
        parser = argparse.ArgumentParser(
            prog=f"{PROG} serve", epilog="example: %(prog)s outputs/latest",
            description="Serve a sweep's report.html (or a comparison's compare.html) on 127.0.0.1 and open it, "
            "so that its Perfetto buttons can hand traces to ui.perfetto.dev.")
        parser.add_argument("folder", type=Path, help="a sweep, run or comparison folder")
        parser.add_argument("--port", type=int, default=0, help="the port to listen on (default: any free one)")
        parser.add_argument("--no-browser", action="store_true", help="print the URL, open no browser")
        args = parser.parse_args(argv[1:])
        if not 0 <= args.port <= 65535:
            parser.error(f"argument --port: {args.port} is not a port: give 1-65535, or 0 for any free one")
        from analysis.serve import serve

        if args.folder.is_dir():
            live(args.folder, strict=False)
        return serve(args.folder, args.port, browser=not args.no_browser)

    parser = argparse.ArgumentParser(
        prog=f"{PROG}{ANALYSE}", epilog="example: %(prog)s outputs/latest",
        description="Write summary.csv, crossovers.csv, plots/ and report.html into a sweep folder. "
        "For one trace: python -m analysis trace FILE [--json]; two sweeps: python -m analysis compare BASE NEW; "
        "serve a report: python -m analysis serve FOLDER; many sweeps over time: python -m analysis history SWEEP...; "
        "ask their store: python -m analysis sql DB QUERY; measure this machine's ceilings: python -m analysis "
        "calibrate.",
    )
    parser.add_argument("folder", type=Path, help="a sweep folder (outputs/multirun/...) or a single run's folder")
    parser.add_argument("--out", type=out_folder, help="write the tables, plots and report here instead of into FOLDER "
                        "(a folder you cannot write to, or a second analysis beside the first)")
    parser.add_argument("--strict", action="store_true", help="refuse a folder a sweep is still writing")
    parser.add_argument("--fail-on-mismatch", action="store_true",
                        help="exit 1 when an expectation (expect=[...]) does not hold, naming each: a gate "
                        "(an inconclusive one is listed, not failed)")
    band_argument(parser)
    args = parser.parse_args(argv)
    with using_band(args.band):
        return _analyse(args)


def _analyse(args: argparse.Namespace) -> int:
    if not args.folder.is_dir():
        print(f"error: {not_a_folder(args.folder)}", file=sys.stderr)
        return 2
    from analysis import analyse_folder
    from analysis.tables import METRICS_FILE, job_folders, stopped_before_jobs, unreadable

    if unreadable(args.folder):
        print(f"error: {unreadable(args.folder)}", file=sys.stderr)
        return 2
    if not job_folders(args.folder) and not stopped_before_jobs(args.folder):
        print(f"error: {args.folder}: not a sweep or a run: no job folder with a {METRICS_FILE} in it "
              "(give outputs/multirun/<date>/<time> or one job's folder)", file=sys.stderr)
        return 2
    from profsweep.contract import foreign

    wrong = foreign(args.folder)
    out = args.out if args.out is not None and args.out.is_dir() else None
    if wrong is not None:
        wrong = f"{args.folder} {wrong}"
    elif out is not None and foreign(out) is not None:
        wrong = f"--out {out} {foreign(out)}"
    elif out is not None and out.resolve() != args.folder.resolve() and job_folders(out):
        wrong = (f"--out {out} holds a sweep or run of its own, whose tables and report would be replaced by "
                 f"{args.folder}'s (compare and history would then read them as its): give an empty folder, or "
                 "one an earlier --out wrote")
    if wrong is not None:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    if live(args.folder, args.strict):
        return 2
    from analysis import NotWritten

    try:
        problems = analyse_folder(args.folder, out=args.out)
    except (OSError, NotWritten) as exc:  # an output it could not write (or would not): named, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for job, what in problems:
        print(f"  problem: {job}: {what}")
    mismatched = _mismatches(args.out or args.folder) if args.fail_on_mismatch else []
    return 1 if problems or mismatched else 0


def _mismatches(folder: Path) -> list[dict[str, Any]]:
    """The expectations that do not hold, from the analysis's expectations.csv, each printed with
    what was measured (the gate of --fail-on-mismatch); the inconclusive ones printed apart."""
    import pandas as pd

    from profsweep.expectations import EXPECTATIONS_FILE

    path = folder / EXPECTATIONS_FILE
    if not path.is_file():
        print("expectations: none in this sweep (expect=[...]): nothing for --fail-on-mismatch to fail on")
        return []
    rows = pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")
    wrong = [r for r in rows if r.get("holds") == "false"]
    for r in wrong:
        print(f"  mismatch: {r.get('expectation')} at {r.get('job')}: measured {r.get('measured')}, "
              f"expected {r.get('expected')}")
    for r in rows:
        if r.get("holds") == "inconclusive":
            print(f"  inconclusive (not failed): {r.get('expectation')} at {r.get('job')}: measured {r.get('measured')}")
    return wrong


def _exit_code(code: int, out: Terminal | None) -> int:
    """The command's exit code, where writing its output failed: a reader that went away is not
    an error of the command's (its code stands: the gate's verdict); another failure (a full
    disk) is one, said on stderr, exit 2 where the command had nothing else to say (0)."""
    failure = out.failure() if out is not None else None
    if failure is None:
        return code
    print(f"error: cannot write the output: {failure}", file=sys.stderr)
    return 2 if code == 0 else code


def stoppable(argv: list[str] | None = None) -> int:
    """`main`, stopped by Ctrl-C or SIGTERM with one line and exit 130 (143), no traceback: every
    file these commands write is written whole or not at all, so a stop leaves the last whole
    ones (and a half-done analysis says so in its folder: see analysis.analyse_folder). Its
    output is written through `Terminal`: the exit code is the command's, whatever became of
    the stream it prints to."""
    import signal

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signum)

    streams = sys.stdout, sys.stderr
    out = guard_streams()
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        return _exit_code(_main_or_stopped(argv), out)
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.stdout, sys.stderr = streams


def _main_or_stopped(argv: list[str] | None) -> int:
    import signal

    try:
        return main(argv)
    except KeyboardInterrupt as exc:
        by = "SIGTERM" if exc.args and exc.args[0] == signal.SIGTERM else "Ctrl-C"
        what = (argv if argv is not None else sys.argv[1:])[:1]
        command = what[0] if what and what[0] in ("compare", "history", "sql", "calibrate", "trace", "serve") \
            else "the analysis"
        print(f"interrupted ({by}): {command} stopped; no file it writes is left half-written: run the same "
              "command again", file=sys.stderr, flush=True)
        return 143 if by == "SIGTERM" else 130


if __name__ == "__main__":
    code = stoppable()
    gc.freeze()  # all is written: skip the interpreter's last collection over the parsed events
    sys.exit(code)
