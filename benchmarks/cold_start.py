"""Benchmark 5: a job as a fresh interpreter vs the same job forked from the fork server, and
whether the forked job is as cold (its first call, dead window and first step the same).

    .venv/bin/python benchmarks/cold_start.py [--rounds 5] [--size 64]

A "fresh": python -m experiments.job CONFIG, as run.isolation=process starts each job today
B "fork":  experiments.forkserver: the same job forked from a template that has imported torch
Eager and compiled matmul_add, every job with its own fresh Inductor and Triton caches, rounds
A B A B (after one unrecorded round, which also starts the template: paid once per sweep).
Goals: fork <= 0.5x fresh eager, <= 0.8x fresh compiled; honesty is printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, Run, measure, report

from analysis.trace import analyse_trace
from experiments import forkserver, records
from experiments.config import JobConfig, config_to_dict

MODES = {"eager": False, "compile": True}
HONESTY = (  # (column, unit) from metrics.json and the trace's analysis
    ("first_call_ms", "ms"), ("dead_window_us", "µs"), ("first_step_host_us", "µs"),
    ("median_step_host_us", "µs"), ("inductor_cache_misses", ""), ("inductor_cache_hits", ""),
)


def new_job(out: Path, size: int, compile: bool) -> tuple[Path, dict[str, str]]:
    """A job folder with its job_config.json, and private caches as launch._inductor_cache makes."""
    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=out))
    records.write_json(job_dir / records.CONFIG_FILE, config_to_dict(JobConfig(size=size, device="cpu", compile=compile)))
    caches = Path(tempfile.mkdtemp(prefix="cache-", dir=out))
    return job_dir, {"TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "TRITON_CACHE_DIR": str(caches / "triton")}


def fresh(job_dir: Path, env: dict[str, str]) -> Run:
    return measure([sys.executable, "-m", "experiments.job", str(job_dir / records.CONFIG_FILE)],
                   env={**os.environ, **env})


def forked(server: forkserver.ForkServer, job_dir: Path, env: dict[str, str]) -> Run:
    start = time.perf_counter()
    code = server.run(job_dir / records.CONFIG_FILE, job_dir / records.LOG_FILE, env, timeout=None)
    wall = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"{job_dir} exited {code}:\n{(job_dir / records.LOG_FILE).read_text()[-2000:]}")
    return Run(wall, server.last_peak_rss_kb / 1024, code)


def honesty(job_dir: Path) -> dict[str, Any]:
    m = json.loads((job_dir / records.METRICS_FILE).read_text())
    if m["status"] != "ok":
        raise RuntimeError(f"{job_dir}: {m['error']}")
    trace = analyse_trace(job_dir / m["trace_file"])
    host = trace["per_step_values"]["host_us"]
    return {"first_call_ms": m["first_call_ms"], "dead_window_us": trace["dead_window_us"],
            "first_step_host_us": host[0], "median_step_host_us": statistics.median(host),
            "inductor_cache_misses": m.get("inductor_cache_misses"), "inductor_cache_hits": m.get("inductor_cache_hits")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    os.chdir(ROOT)  # the jobs' working folder, as a sweep's
    out = Path(tempfile.mkdtemp(prefix="bench-cold-start-"))
    start = time.perf_counter()
    server = forkserver.shared()
    if server is None:
        return 1
    print(f"template started in {time.perf_counter() - start:.2f} s (once per sweep): {forkserver.how_jobs_start(server)}")
    sides = [(f"{side} {mode}", side, compile) for mode, compile in MODES.items() for side in ("fresh", "fork")]
    runs: dict[str, list[Run]] = {name: [] for name, _, _ in sides}
    seen: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sides}
    for r in range(args.rounds + 1):
        for name, side, compile in sides:
            job_dir, env = new_job(out, args.size, compile)
            run = fresh(job_dir, env) if side == "fresh" else forked(server, job_dir, env)
            if r == 0:
                print(f"  warm-up     {name:<14} {run.wall_s:7.3f} s (not counted)", flush=True)
                continue
            runs[name].append(run)
            seen[name].append(honesty(job_dir))
            print(f"  round {r}/{args.rounds} {name:<14} {run.wall_s:7.3f} s {run.peak_rss_mb:8.1f} MB  "
                  f"first call {seen[name][-1]['first_call_ms']:8.1f} ms", flush=True)
    ok = report(runs, [("fork eager", "fresh eager", "time", 0.5), ("fork compile", "fresh compile", "time", 0.8)])
    state = server.state()
    print(f"template after {2 * (args.rounds + 1)} jobs: CUDA initialised {state['cuda_initialized']}, "
          f"imported {state['imported'] or 'none'} of {', '.join(forkserver.FIRST_USE_MODULES)}, "
          f"preloaded {', '.join(state['preloaded']) or 'no compiler module'}, {state['threads']} thread(s)")
    print(f"\nhonesty (medians of {args.rounds} rounds; min-max)")
    print(f"{'':<34} {'fresh':>24} {'fork':>24}  fork/fresh")
    for mode in MODES:
        for column, unit in HONESTY:
            values = {side: [s[column] for s in seen[f"{side} {mode}"]] for side in ("fresh", "fork")}
            if any(v is None for vs in values.values() for v in vs):
                continue
            cells = {side: f"{statistics.median(vs):,.1f} ({min(vs):,.0f}-{max(vs):,.0f})" for side, vs in values.items()}
            base = statistics.median(values["fresh"])
            ratio = f"{statistics.median(values['fork']) / base:.2f}" if base else "-"
            print(f"{mode + ' ' + column + (' ' + unit if unit else ''):<34} {cells['fresh']:>24} {cells['fork']:>24}  {ratio}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
