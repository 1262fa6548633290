"""Benchmark: do processes settle in modes by their threads? One grid point's un-profiled step
(`timed_us_per_step`) in N jobs, each a fresh process (`python -m experiments.job`), with one
thread and with torch's default, interleaved. Prints each process's step, sorted, and the largest
gap between neighbours (two modes when it is 1.3x or more, profsweep's rule).

    .venv/bin/python benchmarks/threads_modes.py [--processes 8] [--size 1024] [--workload matmul_add]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def job_us(size: int, workload: str, threads: str) -> float:
    from experiments.config import JobConfig, RunConfig, WorkloadConfig, config_to_dict

    config = JobConfig(workload=WorkloadConfig.builtin(workload), size=size, dtype="bf16", device="cpu", warmup=True,
                       run=RunConfig(threads=threads if threads == "auto" else int(threads)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job_config.json"
        path.write_text(json.dumps(config_to_dict(config)))
        subprocess.run([sys.executable, "-m", "experiments.job", str(path)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        m = json.loads((Path(tmp) / "metrics.json").read_text())
    if m["status"] != "ok":
        raise RuntimeError(m["error"])
    return m["timed_us_per_step"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="at least 2")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--workload", default="matmul_add")
    args = parser.parse_args()
    if args.processes < 2:
        parser.error(f"--processes {args.processes}: give at least 2 (modes are between processes)")
    sys.path.insert(0, str(ROOT))
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    found: dict[str, list[float]] = {"1": [], "auto": []}
    for _ in range(args.processes):
        for threads in found:
            found[threads].append(job_us(args.size, args.workload, threads))
    for threads, values in found.items():
        values.sort()
        gap = max(b / a for a, b in zip(values, values[1:]))
        spread = statistics.stdev([math.log(v) for v in values])
        print(f"threads={threads:<5} {', '.join(f'{v / 1e3:.2f}' for v in values)} ms; largest gap {gap:.2f}x "
              f"({'two modes' if gap >= 1.3 else 'one mode'}); processes {spread:.0%} apart")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
