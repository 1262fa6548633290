"""Benchmark 3: does profiling change what it measures? For warm, compute-bound grid points, the
median profiled step (from the job's own trace) vs torch.utils.benchmark.Timer on the same call
(CPU), or CUDA events (GPU), each side a median over about half a second of calls, A B A B.
Goal: within 10%.

    .venv/bin/python benchmarks/fidelity.py [--sizes 512,1024] [--dtypes bf16,fp32]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.utils.benchmark as tb

from analysis.trace import analyse_trace
from experiments.config import JobConfig, ProfilerConfig, RunConfig
from experiments import seam
from experiments.job import DTYPES, run_job

WINDOW_S = 0.5  # seconds of calls behind each side's median
MAX_STEPS = 2000


def reference_us(config: JobConfig, device: str) -> float:
    """Median time of one call without the profiler."""
    w = config.workload
    made = seam.build(w.target, w.settings, size=config.size, dtype=getattr(torch, DTYPES[config.dtype]),
                      device=torch.device(device))
    fn, args, kwargs = made.fn, made.args, made.kwargs
    with torch.no_grad():
        for _ in range(3):
            fn(*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
            times = []
            for _ in range(20):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*args, **kwargs)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3)
            return statistics.median(times)
        timer = tb.Timer(stmt="fn(*args, **kwargs)", globals={"fn": fn, "args": args, "kwargs": kwargs},
                         num_threads=torch.get_num_threads())
        return timer.blocked_autorange(min_run_time=WINDOW_S).median * 1e6


def profiled_us(config: JobConfig, device: str) -> float:
    """Median profiled step of the job, read from its trace."""
    with tempfile.TemporaryDirectory() as tmp:
        record = run_job(config, Path(tmp))
        assert record["status"] == "ok", record["error"]
        m = analyse_trace(Path(tmp) / record["trace_file"])
    # On a GPU the step time is the device's; on the CPU the host step is the work.
    return m["per_step"]["device_us" if device == "cuda" else "host_us"]["median"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="512,1024")
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ok = True
    print(f"{'grid point':<28} {'profiled µs':>12} {'reference µs':>13} {'ratio':>7}   (median of the rounds' ratios)")
    for dtype in args.dtypes.split(","):
        for size in map(int, args.sizes.split(",")):
            # As many profiled steps as fill about WINDOW_S, like the reference's run time: a
            # median over a few milliseconds of steps is at the mercy of one noisy moment.
            probe = JobConfig(size=size, dtype=dtype, warmup=True, device=device)
            steps = min(MAX_STEPS, max(20, math.ceil(WINDOW_S * 1e6 / reference_us(probe, device))))
            config = JobConfig(size=size, dtype=dtype, warmup=True, device=device,
                               profiler=ProfilerConfig(active=steps),
                               run=RunConfig(isolation="none", compile_cache="shared"))
            profiled_runs, reference_runs = [], []
            for _ in range(args.rounds):  # A B A B: the machine's noise hits both alike
                profiled_runs.append(profiled_us(config, device))
                reference_runs.append(reference_us(config, device))
            profiled = statistics.median(profiled_runs)
            reference = statistics.median(reference_runs)
            # The median of the rounds' own ratios: each pair ran back to back, so a slow minute
            # of this shared machine slows both sides of a pair rather than one side's median.
            paired = [p / r for p, r in zip(profiled_runs, reference_runs)]
            ratio = statistics.median(paired)
            ok &= abs(ratio - 1) <= 0.10
            print(f"{config.label:<28} {profiled:12.1f} {reference:13.1f} {ratio:7.3f}"
                  f"   ({steps} steps; rounds: {', '.join(f'{x:.2f}' for x in paired)})")
    print(f"goal: every ratio within 10% of 1: {'met' if ok else 'NOT MET'} "
          "(ratio - 1 = the profiler's overhead on a step)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
