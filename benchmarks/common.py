"""Side-by-side measurement: run commands in alternation (A B A B ...), report medians and ratios.

Wall time is measured around each process; peak memory is that process's own maximum RSS
(os.wait4), so concurrent noise on a shared machine hits every contender alike.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    wall_s: float
    peak_rss_mb: float
    returncode: int


def measure(cmd: Sequence[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> Run:
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr and proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}:\n{stderr[-2000:]}")
    return Run(wall, usage.ru_maxrss / 1024, code)


def alternate(contenders: dict[str, Sequence[str]], rounds: int, warmup_rounds: int = 1,
              **kwargs) -> dict[str, list[Run]]:
    """Every contender once per round, in the same order, `rounds` times, after `warmup_rounds`
    unrecorded rounds (page cache, .pyc files, compiler caches of the system)."""
    for r in range(warmup_rounds):
        for name, cmd in contenders.items():
            run = measure(cmd, **kwargs)
            print(f"  warm-up {r + 1}/{warmup_rounds} {name:<12} {run.wall_s:7.3f} s (not counted)", flush=True)
    runs: dict[str, list[Run]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name, cmd in contenders.items():
            runs[name].append(measure(cmd, **kwargs))
            print(f"  round {r + 1}/{rounds} {name:<12} {runs[name][-1].wall_s:7.3f} s "
                  f"{runs[name][-1].peak_rss_mb:8.1f} MB", flush=True)
    return runs


def median_wall(runs: list[Run]) -> float:
    return statistics.median(r.wall_s for r in runs)


def median_rss(runs: list[Run]) -> float:
    return statistics.median(r.peak_rss_mb for r in runs)


def report(runs: dict[str, list[Run]], goals: Sequence[tuple[str, str, str, float]]) -> bool:
    """Print each contender's medians, then check goals (name, baseline, "time"|"memory", max ratio)."""
    print(f"\n{'':<12} {'wall s':>8} {'peak MB':>9}   (medians of {len(next(iter(runs.values())))} rounds)")
    for name, rs in runs.items():
        print(f"{name:<12} {median_wall(rs):8.3f} {median_rss(rs):9.1f}")
    ok = True
    for name, baseline, metric, limit in goals:
        pick = median_wall if metric == "time" else median_rss
        ratio = pick(runs[name]) / pick(runs[baseline])
        attr = "wall_s" if metric == "time" else "peak_rss_mb"
        paired = [getattr(a, attr) / getattr(b, attr) for a, b in zip(runs[name], runs[baseline])]
        met = ratio <= limit
        ok &= met
        print(f"goal: {name} {metric} <= {limit}x {baseline}: {ratio:.2f}x  {'met' if met else 'NOT MET'}"
              f"  (round by round: {', '.join(f'{p:.2f}' for p in paired)})")
    return ok
