"""Benchmark: do jobs forked from the template measure what fresh interpreters measure? Shown with
repeats: every timing metric of every grid point, fork against fresh, each with its 95% interval.

    .venv/bin/python benchmarks/fork_vs_fresh.py [--repeats 5] [--grid 'size=64,1024 compile=false,true']

Two sweeps of the same grid, run.start=fork and run.start=fresh, one after the other (run it alone
on the machine). Prints, per grid point and metric, both medians over repeats with their
intervals and whether the intervals overlap; then compare's verdicts (fresh as BASE). Goal: every
interval pair overlaps, and no pair is judged slower or faster.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from profsweep.contract import SUMMARY_FILE

from common import ROOT

PY = sys.executable
METRICS = ("timed_us_per_step", "step_host_us_median", "host_us_per_step", "compute_us_per_step",
           "overhead_us_per_step", "first_call_ms", "dead_window_us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--grid", default="size=64,1024 compile=false,true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-fork-fresh-"))
    try:
        for start in ("fresh", "fork"):
            done = subprocess.run([PY, "experiments/run.py", "-m", *args.grid.split(), f"run.repeats={args.repeats}",
                                   f"run.start={start}", f"hydra.sweep.dir={root / start}"], cwd=ROOT,
                                  capture_output=True, text=True)
            if done.returncode not in (0, 1):
                raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
            print(f"{start}: {done.stdout.strip().splitlines()[-1]}")
        sides = {s: pd.read_csv(root / s / SUMMARY_FILE) for s in ("fresh", "fork")}
        keys = ["size", "compile", "warmup"]
        merged = sides["fresh"].merge(sides["fork"], on=keys, suffixes=("_fresh", "_fork"))
        apart = 0
        print(f"\n{'grid point':<22} {'metric':<22} {'fresh [95% interval]':>30} {'fork [95% interval]':>30}  overlap")
        for _, row in merged.iterrows():
            point = f"{row['size']} {'compile' if row['compile'] else 'eager'} {'warm' if row['warmup'] else 'cold'}"
            for m in METRICS:
                lo_a, hi_a, lo_b, hi_b = (row[f"{m}_low_fresh"], row[f"{m}_high_fresh"], row[f"{m}_low_fork"],
                                          row[f"{m}_high_fork"])
                overlap = lo_a <= hi_b and lo_b <= hi_a
                apart += not overlap
                print(f"{point:<22} {m:<22} {row[m + '_fresh']:>12,.1f} [{lo_a:>7,.1f}, {hi_a:>7,.1f}] "
                      f"{row[m + '_fork']:>12,.1f} [{lo_b:>7,.1f}, {hi_b:>7,.1f}]  {'yes' if overlap else 'NO'}")
        done = subprocess.run([PY, "-m", "analysis", "compare", str(root / "fresh"), str(root / "fork"), "--out",
                               str(root / "cmp")], cwd=ROOT, capture_output=True, text=True)
        print("\n" + done.stdout.strip())
        verdicts = pd.read_csv(root / "cmp" / "compare.csv")["verdict"]
        changed = int(verdicts.isin(["slower", "faster"]).sum())
        print(f"\nintervals apart: {apart} of {len(merged) * len(METRICS)}; verdicts of change: {changed}; goal "
              + ("met" if not apart and not changed else "NOT MET"))
        return 0 if not apart and not changed else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
