"""Benchmark: is the un-profiled step (`timed_us_per_step`) what the code costs? Per grid point,
the job run as the sweep runs it (`python -m experiments.job`, a fresh interpreter) against
torch.utils.benchmark's `blocked_autorange` of the same callable in a fresh process that never
profiled (the same factory, its modules in eval() under no_grad, compiled with the same
settings, warmed up), A B A B, with one thread and with torch's default. Also prints the job's
minor page faults per timed step. Goal: every ratio within 10% of 1.

    .venv/bin/python benchmarks/timing_fidelity.py [--rounds 5] [--points matmul_add-1024-eager,...]
        [--allocator steady|fixed|system]

`--allocator` is the jobs' run.allocator, and the benchmark's process holds its allocator the same
way (experiments.allocator): steady (the default) holds glibc's thresholds on both sides where a
plain process's settle, fixed higher; with
`system`, whether a step hands its buffers back to the system depends on the heap's layout, which
anything a process did first can change, so two fresh processes of one workload can differ 1.8x
(attention 256, math) for no reason of profsweep's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL = 0.10
# name -> (workload, its settings, size, compile)
POINTS = {
    **{f"matmul_add-{n}-{mode}": ("matmul_add", {}, n, mode == "compiled")
       for n in (64, 1024, 4096) for mode in ("eager", "compiled")},
    "mlp-512-eager": ("mlp", {}, 512, False),
    "attention-256-math": ("attention", {"backend": "math"}, 256, False),
    "transformer-128-eager": ("examples.transformer:make_block", {}, 128, False),
}

# A fresh process that never profiled, the job's workload built as the job builds it (its modules
# in eval(), gradients off), its allocator and threads held alike: `fn`, `made`, `args`, `kwargs`,
# `threads`, `config`. Each benchmark adds how it times them.
BUILD = r"""
import json, resource, sys
import torch
import torch.utils.benchmark as tb
from experiments import allocator, seam
from experiments.config import config_from_dict
from experiments.job import DTYPES
from experiments.steps import modules_of

config = config_from_dict(json.loads(sys.argv[1]))
_, unheld = allocator.hold(config.run.allocator)
if unheld:
    sys.exit(unheld)
threads = torch.get_num_threads() if config.run.threads == "auto" else int(config.run.threads)
torch.set_num_threads(threads)
torch.set_grad_enabled(False)
w = config.workload
made = seam.build(w.target, w.settings, size=config.size, dtype=getattr(torch, DTYPES[config.dtype]),
                  device=torch.device("cpu"))
for module in modules_of(made.fn):
    module.eval()
fn = made.fn
args, kwargs = made.args, dict(made.kwargs)
"""

REFERENCE = BUILD + r"""
if config.compile:
    fn = torch.compile(fn, mode=config.compiler.mode, backend=config.compiler.backend,
                       dynamic=config.compiler.dynamic)
for _ in range(3):
    fn(*args, **kwargs)
timer = tb.Timer("fn(*args, **kwargs)", globals={"fn": fn, "args": args, "kwargs": kwargs},
                 num_threads=threads)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
m = timer.blocked_autorange(min_run_time=0.5)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / (m.number_per_run * len(m.times))
print(json.dumps({"us": m.median * 1e6, "faults": faults, "threads": threads}))
"""

def config_for(point: str, threads: str, held: str) -> dict:
    from experiments.config import JobConfig, RunConfig, WorkloadConfig, config_to_dict

    workload, settings, size, compiled = POINTS[point]
    w = (WorkloadConfig(target=workload, name="transformer", settings=settings) if ":" in workload
         else WorkloadConfig.builtin(workload, **settings))
    config = JobConfig(workload=w, size=size, dtype="bf16", compile=compiled, device="cpu",
                       run=RunConfig(threads=threads if threads == "auto" else int(threads), allocator=held))
    return config_to_dict(config)


def job_record(config: dict) -> dict:
    """The job's metrics.json, the job run as a sweep runs it (a fresh interpreter); refused unless ok."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job_config.json"
        path.write_text(json.dumps(config))
        subprocess.run([sys.executable, "-m", "experiments.job", str(path)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        m = json.loads((Path(tmp) / "metrics.json").read_text())
    if m["status"] != "ok":
        raise RuntimeError(m.get("error") or "the job failed")
    return m


def reference(config: dict, script: str) -> dict:
    """What `script` (BUILD and its timing) prints as its last line, one JSON object, run in a
    fresh process that never profiled."""
    done = subprocess.run([sys.executable, "-c", script, json.dumps(config)], cwd=ROOT, check=True,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(done.stdout.strip().splitlines()[-1])


def job_us(config: dict) -> tuple[float, float]:
    """timed_us_per_step and the minor faults per timed step of the job."""
    m = job_record(config)
    if m.get("timed_us_per_step") is None:
        raise RuntimeError(m.get("timed_error") or "no un-profiled timing")
    return m["timed_us_per_step"], m.get("timed_minor_faults_per_step") or 0.0


def reference_us(config: dict) -> tuple[float, float]:
    """blocked_autorange's median and the minor page faults per call (the calibration's included)."""
    found = reference(config, REFERENCE)
    return found["us"], found["faults"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--points", default=",".join(POINTS), help=f"of: {', '.join(POINTS)}")
    parser.add_argument("--threads", default="1,auto")
    parser.add_argument("--allocator", choices=("steady", "fixed", "system"), default="steady",
                        help="the jobs' run.allocator, held alike by the benchmark's process (see above)")
    args = parser.parse_args()
    print(f"allocator: {args.allocator}, both sides")
    sys.path.insert(0, str(ROOT))
    load = os.getloadavg()[0]
    print(f"load average at the start: {load:.2f}")
    print(f"{'grid point':<26} {'threads':>7} {'job µs':>11} {'benchmark µs':>13} {'ratio':>6} {'faults/step':>11} {'(benchmark)':>11}"
          "   (ratio: of the medians over the rounds)")
    ok = True
    for point in args.points.split(","):
        for threads in args.threads.split(","):
            config = config_for(point, threads, args.allocator)
            jobs, refs, faults, ref_faults = [], [], [], []
            for _ in range(args.rounds):  # A B A B: a slow minute of the machine slows both sides
                us, flt = job_us(config)
                jobs.append(us)
                faults.append(flt)
                us, flt = reference_us(config)
                refs.append(us)
                ref_faults.append(flt)
            # Processes here differ by up to 1.6x on either side (memory layout, the core they
            # get): the ratio of the two sides' medians over the rounds, each round's own ratio shown.
            paired = [a / b for a, b in zip(jobs, refs)]
            ratio = statistics.median(jobs) / statistics.median(refs)
            ok &= abs(ratio - 1) <= GOAL
            print(f"{point:<26} {threads:>7} {statistics.median(jobs):11.1f} {statistics.median(refs):13.1f} "
                  f"{ratio:6.3f} {statistics.median(faults):11.1f} {statistics.median(ref_faults):11.1f}   (rounds: {', '.join(f'{x:.2f}' for x in paired)})",
                  flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"goal: every ratio within {GOAL:.0%} of 1: {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
