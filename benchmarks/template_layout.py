"""Benchmark: does the process a job forks from set its step? One grid point's un-profiled step
(`timed_us_per_step`) in jobs forked from K templates (M children each, interleaved: template 1,
2, ..., K, then again), and in K x M fresh interpreters. Prints each template's children, and the
spread between templates against the spread among one template's children (one-way analysis of
variance on log times). Every repeat of a sweep forks from the sweep's one template
(experiments/forkserver.py): a between-template share above the within one would mean a sweep's
repeats agree more than two sweeps do, and its intervals would miss that share.

    .venv/bin/python benchmarks/template_layout.py [--templates 4] [--children 4] [--size 64]
                                                [--allocator steady] [--compile]
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


def spread(groups: list[list[float]]) -> tuple[float, float]:
    """The standard deviation among one group's members and that of the groups' own means beyond
    it (the between component of a one-way random-effects model), both of log times, as fractions."""
    logs = [[math.log(x) for x in g] for g in groups]
    k, m = len(logs), len(logs[0])
    grand = statistics.fmean(x for g in logs for x in g)
    between = m * sum((statistics.fmean(g) - grand) ** 2 for g in logs) / (k - 1)
    within = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in logs) / (k * (m - 1))
    return math.sqrt(within), math.sqrt(max(0.0, (between - within) / m))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--templates", type=int, default=4, help="at least 2")
    parser.add_argument("--children", type=int, default=4, help="jobs forked from each template, at least 2")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--workload", default="matmul_add")
    parser.add_argument("--allocator", default="steady", help="run.allocator: steady | fixed | system")
    parser.add_argument("--compile", action="store_true", help="compile=true (the step torch.compile'd)")
    args = parser.parse_args()
    if args.templates < 2 or args.children < 2:
        parser.error("give at least 2 templates and 2 children each")
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    from experiments import forkserver, records
    from experiments.config import JobConfig, RunConfig, WorkloadConfig, config_to_dict

    if forkserver.unavailable_reason():
        print(f"no fork server here: {forkserver.unavailable_reason()}")
        return 1
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    config = JobConfig(workload=WorkloadConfig.builtin(args.workload), size=args.size, dtype="bf16", device="cpu",
                       compile=args.compile, run=RunConfig(allocator=args.allocator))
    with tempfile.TemporaryDirectory() as tmp:
        def job(name: str, start) -> float:
            folder = Path(tmp) / name
            folder.mkdir()
            path = folder / records.CONFIG_FILE
            path.write_text(json.dumps(config_to_dict(config)))
            code = start(path, folder / records.LOG_FILE)
            m = json.loads((folder / records.METRICS_FILE).read_text())
            if code != 0 or m["status"] != "ok":
                raise RuntimeError(m.get("error") or f"exit {code}")
            return m["timed_us_per_step"]

        def fresh(path: Path, log: Path) -> int:
            with open(log, "wb") as out:
                return subprocess.run([sys.executable, "-m", "experiments.job", str(path)], stdout=out,
                                      stderr=subprocess.STDOUT).returncode

        servers = [forkserver.ForkServer() for _ in range(args.templates)]
        forked: list[list[float]] = [[] for _ in servers]
        fresh_runs: list[list[float]] = [[] for _ in servers]
        try:
            for child in range(args.children):
                for t, server in enumerate(servers):
                    forked[t].append(job(f"fork-{t}-{child}", lambda p, log: server.run(p, log, {}, 600)))
                    fresh_runs[t].append(job(f"fresh-{t}-{child}", fresh))
        finally:
            for server in servers:
                server.close()
    for name, groups in (("forked", forked), ("fresh", fresh_runs)):
        print(f"{name} ({args.workload} {args.size} bf16 cold{' compile' if args.compile else ''}, run.allocator={args.allocator}, un-profiled step, µs):")
        for t, g in enumerate(groups):
            label = f"template {t + 1}" if name == "forked" else f"group {t + 1}"
            print(f"  {label}: " + ", ".join(f"{x:.1f}" for x in g))
        within, between = spread(groups)
        print(f"  sd among one {'template' if name == 'forked' else 'group'}'s: {within:.1%}; "
              f"between {'templates' if name == 'forked' else 'groups'} beyond it: {between:.1%}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
