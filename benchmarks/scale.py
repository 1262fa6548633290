"""Benchmark 4: analysis of a 200-job sweep folder, built by copying the job folders of a small
real sweep. Goal: within 10 s on 2 cores, memory not growing with the number of jobs beyond
the table (compare 50 and 200 jobs).

    .venv/bin/python benchmarks/scale.py [--jobs 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from profsweep.contract import METRICS_FILE, PLAN_FILE

from common import ROOT, alternate, median_rss, median_wall


def seed_sweep(folder: Path) -> list[Path]:
    done = subprocess.run(
        [sys.executable, "experiments/run.py", "-m", "size=16,64", "compile=false,true", f"hydra.sweep.dir={folder}"],
        cwd=ROOT, capture_output=True, text=True,
    )
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    return sorted(p.parent for p in folder.glob("*/metrics.json"))


def replicate(seeds: list[Path], folder: Path, jobs: int) -> Path:
    folder.mkdir(parents=True)
    for i in range(jobs):
        seed = seeds[i % len(seeds)]
        target = folder / f"{i}_{seed.name.split('_', 1)[1]}"
        shutil.copytree(seed, target)
        record = json.loads((target / METRICS_FILE).read_text())
        record["size"] = record["size"] * (1 + i // len(seeds))  # distinct sizes: long series
        # each copy of the seed sweep measures other grid points (repeats of a point share a hash)
        record["config_hash"] = f"{record.get('config_hash')}-{i // len(seeds)}"
        record["job"] = target.name
        (target / METRICS_FILE).write_text(json.dumps(record))
    (folder / PLAN_FILE).write_text(json.dumps({"jobs": jobs, "command": ["benchmarks/scale.py"]}))
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    seeds = seed_sweep(work / "seed")
    small = replicate(seeds, work / "small", args.jobs // 4)
    big = replicate(seeds, work / "big", args.jobs)
    runs = alternate({
        f"{args.jobs // 4} jobs": [sys.executable, "-m", "analysis", str(small)],
        f"{args.jobs} jobs": [sys.executable, "-m", "analysis", str(big)],
    }, args.rounds)
    small_runs, big_runs = runs[f"{args.jobs // 4} jobs"], runs[f"{args.jobs} jobs"]
    wall, growth = median_wall(big_runs), median_rss(big_runs) / median_rss(small_runs)
    print(f"\n{args.jobs} jobs: {wall:.2f} s, {median_rss(big_runs):.0f} MB; {args.jobs // 4} jobs: "
          f"{median_wall(small_runs):.2f} s, {median_rss(small_runs):.0f} MB")
    ok = wall <= 10 and growth <= 1.5
    print(f"goal: {args.jobs} jobs within 10 s: {wall:.2f} s; memory x{growth:.2f} for 4x the jobs "
          f"(<= 1.5): {'met' if ok else 'NOT MET'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
