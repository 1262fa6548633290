"""Benchmark: what Inductor's provenance tracking (compiler.provenance, experiments.provenance)
adds to a cold compiled job. One sweep of `compiler.provenance=true,false`, every job cold in its
own process with its own fresh Inductor cache, the two settings alternating round by round (the
sweep's own order), then per setting the median over the jobs of:

- first_call_ms: the first call, compilation included (what a cold grid point reports);
- timed_us_per_step: the un-profiled step, timed in the twin (must not change: the generated
  code is the same);
- the job's whole duration (finished_at - started_at), which holds the twin's compile: with the
  tracking level in the twin's cache key it finds the job's graph, without it it compiles again;
- provenance_kernels: how many kernels provenance.json maps.

The ratio true/false of first_call_ms comes with the 95% interval of profsweep.stats.ratio_test
over the jobs (one value each). Run it alone on the machine.

    .venv/bin/python benchmarks/provenance_cost.py [--repeats 6] [--workload mlp] [--size 512]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import pandas as pd

from common import ROOT

from profsweep import stats
from profsweep.contract import METRICS_FILE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--keep", type=Path, help="run the sweep into this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="provenance-cost-") as tmp:
        folder = args.keep or Path(tmp) / "sweep"
        cmd = [sys.executable, "experiments/run.py", "-m", f"workload={args.workload}", f"size={args.size}",
               "compile=true", "compiler.provenance=true,false", f"run.repeats={args.repeats}", "run.ceilings=off",
               f"hydra.sweep.dir={folder}"]
        print(" ".join(cmd[1:]), flush=True)
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
            return 1
        records = [json.loads(path.read_text()) for path in sorted(folder.glob(f"*/{METRICS_FILE}"))]
    jobs = pd.DataFrame([r for r in records if r.get("status") == "ok"])
    jobs["duration_s"] = [(datetime.fromisoformat(f) - datetime.fromisoformat(s)).total_seconds()
                          for s, f in zip(jobs["started_at"], jobs["finished_at"])]
    side = {flag: jobs[jobs["compile_provenance"].astype(str).str.lower() == flag] for flag in ("true", "false")}
    print(f"{'compiler.provenance':<20} {'jobs':>4} {'first call ms':>14} {'timed µs/step':>14} {'job s':>7} "
          f"{'kernels mapped':>15}")
    for flag, rows in side.items():
        kernels = rows["provenance_kernels"].dropna() if "provenance_kernels" in rows else []
        print(f"{flag:<20} {len(rows):>4} {statistics.median(rows['first_call_ms']):>14,.0f} "
              f"{statistics.median(rows['timed_us_per_step']):>14,.1f} {statistics.median(rows['duration_s']):>7.1f} "
              f"{(str(int(statistics.median(kernels))) if len(kernels) else '-'):>15}")
    for column in ("first_call_ms", "timed_us_per_step", "duration_s"):
        test = stats.ratio_test([[v] for v in side["false"][column]], [[v] for v in side["true"][column]])
        interval = f"[{test.low:.3f}, {test.high:.3f}]" if test.low is not None else "(no interval)"
        print(f"{column}: provenance on / off = {test.ratio:.3f} {interval}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
