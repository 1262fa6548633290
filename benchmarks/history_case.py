"""Benchmark: does history find a 1.4x step in real sweeps, and nothing in identical ones?

    .venv/bin/python benchmarks/history_case.py [--trials 1] [--keep DIR]

The case of the issue "Decided numbers": four sweeps of `workload=bmm size=64,256` (3 processes
a grid point, the defaults), `workload.batch=1` in sweeps 1-2 and `workload.batch=4` in sweeps 3-4
(the un-profiled step about 1.4x at both points on the 2-core machine), then
`python -m analysis history ... --ignore workload.batch`. Goals, in every trial:

1. the step: a confirmed change (`regressions.csv`'s `status` regression or improvement) at
   each grid point, placed at sweep 3 (`change_at`), and no other;
2. four identical sweeps (`workload.batch=1` in all four): no confirmed change at any grid point.

Run it alone on the machine: anything else running is load. Prints history's own lines and each
grid point's smallest findable step (trends.csv); exits 1 where a goal is not met.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from common import ROOT

PY = sys.executable
GRID = ["workload=bmm", "size=64,256"]


def sweep(folder: Path, batch: int) -> None:
    start = time.perf_counter()
    done = subprocess.run([PY, "experiments/run.py", "-m", *GRID, f"workload.batch={batch}",
                           f"hydra.sweep.dir={folder}"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"sweep {folder} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    print(f"    {folder.name}: workload.batch={batch}, {time.perf_counter() - start:.1f} s", flush=True)


def history(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    done = subprocess.run([PY, "-m", "analysis", "history", str(folder), "--ignore", "workload.batch"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"history exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    for line in done.stdout.splitlines():
        print(f"      {line}", flush=True)
    out = folder / "history"
    found = pd.read_csv(out / "regressions.csv")
    return found, pd.read_csv(out / "trends.csv")


def confirmed(found: pd.DataFrame) -> pd.DataFrame:
    return found[found["status"].isin(["regression", "improvement"])] if len(found) else found


def trial(root: Path, batches: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    root.mkdir(parents=True)
    for i, batch in enumerate(batches, 1):
        sweep(root / f"s{i}", batch)
    return history(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="keep the sweeps here (else a temporary folder, deleted)")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="history-case-"))
    met = True
    try:
        for t in range(1, args.trials + 1):
            print(f"trial {t}: batch 1, 1, 4, 4", flush=True)
            found, trends = trial(base / f"step{t}", [1, 1, 4, 4])
            changes = confirmed(found)
            at3 = changes[changes["change_at"].astype(str).str.endswith("s3")] if len(changes) else changes
            points = trends["point"].nunique()
            ok = points > 0 and len(at3) == points and len(changes) == points
            met &= ok
            smallest = ", ".join(f"{s:.2f}x" for s in trends.groupby("point")["smallest_change"].first())
            print(f"  goal: the step found at sweep 3 at each of {points} grid points: "
                  f"{len(at3)} at sweep 3, {len(changes)} in all  {'met' if ok else 'NOT MET'} "
                  f"(smallest findable step: {smallest})", flush=True)
            print(f"trial {t}: batch 1, 1, 1, 1", flush=True)
            found, trends = trial(base / f"same{t}", [1, 1, 1, 1])
            changes = confirmed(found)
            ok = len(changes) == 0
            met &= ok
            print(f"  goal: no change in identical sweeps: {len(changes)}  {'met' if ok else 'NOT MET'}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print("goals met" if met else "goals NOT MET", flush=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
