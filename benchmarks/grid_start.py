"""Time to the first job of a sweep: a 10-job and a 1,000-job grid of size=range(...), started
in alternation (A B A B ...), each stopped as soon as its first job line appears.

    .venv/bin/python benchmarks/grid_start.py [--rounds 3]

Goal: the 1,000-job grid's first job starts within 1.5x the time of the 10-job grid's.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

GOAL = 1.5


def first_job_s(jobs: int, sweep_dir: Path) -> float:
    """Seconds from the command to its `[1/N] ...` line; the sweep is killed there."""
    cmd = [sys.executable, "experiments/run.py", "-m", f"size=range(1,{jobs + 1})", "run.repeats=1",
           f"hydra.sweep.dir={sweep_dir}"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        for line in proc.stdout:
            if line.startswith(f"[1/{jobs}] "):
                return time.perf_counter() - start
        raise RuntimeError(f"{' '.join(cmd)} printed no first job line (exit {proc.wait()}):\n"
                           f"{proc.stderr.read()[-2000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it had ended: the error above says how
            pass
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[int, list[float]] = {10: [], 1000: []}
    with tempfile.TemporaryDirectory(prefix="grid_start_") as tmp:
        first_job_s(10, Path(tmp) / "warm-up")  # page cache, .pyc files: not counted
        for r in range(args.rounds):
            for jobs in times:
                times[jobs].append(first_job_s(jobs, Path(tmp) / f"{jobs}_{r}"))
                print(f"  round {r + 1}/{args.rounds} {jobs:>5} jobs: first job after {times[jobs][-1]:6.2f} s",
                      flush=True)
    small, large = (statistics.median(times[n]) for n in (10, 1000))
    ratio = large / small
    print(f"\nfirst job line (medians of {args.rounds} rounds): 10 jobs {small:.2f} s, 1,000 jobs {large:.2f} s")
    print(f"goal: 1,000 jobs <= {GOAL}x 10 jobs: {ratio:.2f}x  {'met' if ratio <= GOAL else 'NOT MET'}")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
