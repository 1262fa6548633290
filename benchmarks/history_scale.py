"""Benchmark: `python -m analysis history` over 1,000 synthetic sweeps of 100 grid points (3 repeats
each, so 300,000 jobs, summary and repeats rows as wide as a real sweep's), then once more with one
new sweep (incremental ingest); the wall time and peak memory (RSS) of each command, measured
around its process, and where the time goes (ingest, analysis, page) measured in this process.
Five grid points get a 1.5x step at sweep 700 (torch 2.12 -> 2.13): the run says what it found.

    .venv/bin/python benchmarks/history_scale.py [--sweeps 1000] [--points 100] [--columns 150]
    .venv/bin/python benchmarks/history_scale.py --calibrate   # the change-point method's error rates

--calibrate simulates histories whose answer is known (seeded; log-normal noise between the
repeats of a sweep and between sweeps): how often a grid of A/A histories shows a change anywhere
(false alarms, after the control of false discoveries), and how often a known step is found at
its place.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from common import measure


STEPPED = 5  # grid points with a step
STEP_AT, STEP = 700, 1.5


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def write_sweeps(root: Path, first: int, last: int, points: int, columns: int, total: int) -> None:
    """Sweeps first..last-1 of a history of `total` (the step at STEP_AT scales with it)."""
    rng = np.random.default_rng(first)
    filler = [f"metric_{k}_us" for k in range(columns)]
    at = STEP_AT * total // 1000
    for n in range(first, last):
        folder = root / f"sweep{n:04d}"
        folder.mkdir(parents=True)
        created = (pd.Timestamp("2026-01-01T00:00:00Z") + pd.Timedelta(hours=n)).isoformat()
        torch = "2.13.0" if n >= at else "2.12.0"
        (folder / "sweep.json").write_text(json.dumps({"created_at": created}))
        (folder / "environment.json").write_text(json.dumps({"created_at": created, "torch_version": torch,
                                                             "git_commit": f"{n:040x}", "hostname": "bench"}))
        day = rng.normal(0, 0.05)
        size = np.repeat(np.arange(1, points + 1) * 16, 3)
        repeat = np.tile([1, 2, 3], points)
        level = size * 1.0 * np.exp(day + rng.normal(0, 0.1, len(size)))
        level[(size <= STEPPED * 16) & (n >= at)] *= STEP
        jobs = [f"{k}_matmul_add_{s}_bf16_warm_eager" + (f"_r{r}" if r > 1 else "")
                for k, (s, r) in enumerate(zip(size, repeat))]
        base = {"workload": "matmul_add", "dtype": "bf16", "compile": False, "warmup": True, "train": False,
                "device": "cpu", "status": "ok"}
        repeats = pd.DataFrame({"job": jobs, "config_hash": [f"h{s}" for s in size], "repeat": repeat, **base,
                                "size": size, "trace_error": None, "timed_us_per_step": level,
                                "host_us_per_step": level * 1.3, "steps": 3, "platform": "cpu", "trace_file": "t.json",
                                **{c: rng.random(len(size)) for c in filler}})
        repeats.to_csv(folder / "repeats.csv", index=False)
        grouped = repeats.groupby("size", sort=False)
        summary = pd.concat([grouped.agg(job=("job", "first"), jobs=("job", ";".join), config_hash=("config_hash", "first")),
                             grouped[["timed_us_per_step", *filler]].median()], axis=1).reset_index()
        summary = pd.concat([summary, pd.DataFrame({**base, "variant": "matmul_add", "repeats": 3, "noise_load": False,
                                                    "noise_reason": ""}, index=summary.index)], axis=1)
        summary["trace_error"] = pd.Series(pd.NA, index=summary.index, dtype="string")
        summary.astype({c: "string" for c in summary.columns if summary[c].dtype == object}).to_parquet(
            folder / "summary.parquet", index=False)
        ops = pd.DataFrame({"job": np.repeat(jobs, 2), "name": np.tile(["aten::mm", "aten::add"], len(jobs)),
                            "calls": 3, "self_host_us": np.repeat(level, 2) * np.tile([1.8, 0.3], len(jobs)),
                            "self_device_us": 0.0, "compute_calls": 3, "category": "cpu_op"})
        ops.to_csv(folder / "ops.csv", index=False)


def phases(root: Path, out: Path) -> dict[str, float]:
    """The command's steps, timed in this process on a fresh store."""
    from analysis.history import engine as history
    from analysis.store import STORE_FILE, Store, find_sweeps

    times = {}
    start = time.perf_counter()
    sweeps = find_sweeps([root], print)
    times["find sweeps"] = time.perf_counter() - start
    with Store(out / STORE_FILE) as store:
        start = time.perf_counter()
        ids, _ = store.ingest(sweeps)
        times["ingest"] = time.perf_counter() - start
        start = time.perf_counter()
        found = history.load(store, [ids[s] for s in history.order(sweeps, False)], [])
        times["load and pair"] = time.perf_counter() - start
        start = time.perf_counter()
        history.analyse(found)
        history.describe_changes(store, found)
        times["find changes"] = time.perf_counter() - start
    start = time.perf_counter()
    history.write(found, out)
    times["write csv, plots, page"] = time.perf_counter() - start
    placed = sorted({(r["point"], Path(r["change_at"]).name, r["status"]) for r in found.changes})
    print(f"  found {len(found.changes)} changes: " + "; ".join(f"{p} at {w} ({s})" for p, w, s in placed[:8]))
    return times


def scale(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-history-"))
    print(f"load before: {loadavg()}  (2-core machine shared with others)")
    for total in (args.sweeps // 10, args.sweeps):
        root = work / f"h{total}"
        start = time.perf_counter()
        write_sweeps(root, 0, total, args.points, args.columns, total)
        print(f"{total} sweeps x {args.points} grid points x 3 repeats written in {time.perf_counter() - start:.1f} s "
              f"({sum(f.stat().st_size for f in root.rglob('*') if f.is_file()) / 1e6:.0f} MB)")
        run = measure([sys.executable, "-m", "analysis", "history", str(root), "--out", str(work / f"o{total}")])
        print(f"  history, fresh store:     {run.wall_s:6.2f} s  peak RSS {run.peak_rss_mb:6.0f} MB")
        write_sweeps(root, total, total + 1, args.points, args.columns, total)
        run = measure([sys.executable, "-m", "analysis", "history", str(root), "--out", str(work / f"o{total}")])
        print(f"  history, one new sweep:   {run.wall_s:6.2f} s  peak RSS {run.peak_rss_mb:6.0f} MB")
        store = work / f"o{total}" / "history.duckdb"
        print(f"  store: {store.stat().st_size / 1e6:.0f} MB")
        print("  in this process, on a fresh store:")
        for name, seconds in phases(root, work / f"p{total}").items():
            print(f"    {name:<24} {seconds:6.2f} s")
    print(f"load after: {loadavg()}")
    print(f"(files left in {work})")


def calibrate() -> None:
    from analysis.history import changes
    from analysis.history.engine import judge

    def history(rng, n, within, between, step=None, factor=2.0):
        return changes.series([list(100 * (factor if step is not None and i >= step else 1.0)
                                    * math.exp(rng.normal(0, between)) * np.exp(rng.normal(0, within, 3)))
                               for i in range(n)])

    print("A/A: 10 sweeps x 20 grid points x 3 repeats, 300 histories each; a 2x step at sweep 6 of 10 among "
          "20 points, and 4x at sweep 3 of 4 among 2 points, 100 each")
    print(f"{'repeats apart':>14} {'sweeps apart':>13} {'false alarm':>12} {'2x at 6 of 10':>14} {'4x at 3 of 4':>13}")
    for within, between in ((0.05, 0.0), (0.1, 0.05), (0.2, 0.1), (0.1, 0.2), (0.2, 0.2), (0.3, 0.2)):
        rng = np.random.default_rng(1)
        alarms = sum(any(judge([history(rng, 10, within, between) for _ in range(20)])[0]) for _ in range(300))
        found = placed = 0
        for _ in range(100):
            res, _ = judge([history(rng, 10, within, between, 5 if k == 0 else None) for k in range(20)])
            found += [s.at for s in res[0]] == [5] and not any(res[1:])
            res, _ = judge([history(rng, 4, within, between, 2 if k == 0 else None, 4.0) for k in range(2)])
            placed += [s.at for s in res[0]] == [2] and not res[1]
        print(f"{within:>14.0%} {between:>13.0%} {alarms / 300:>12.1%} {found / 100:>14.0%} {placed / 100:>13.0%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=1000)
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--columns", type=int, default=150, help="extra numeric columns per row (a real summary has ~190)")
    parser.add_argument("--calibrate", action="store_true", help="the method's error rates on simulated histories")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
    else:
        scale(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
