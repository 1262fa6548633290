"""Benchmark 1: `python -m analysis trace F --json` vs Holistic Trace Analysis vs the floor.

    .venv/bin/python benchmarks/trace_vs_hta.py [TRACE] [--rounds 5]

The floor is a Python process that only gunzips and json.loads the file. HTA is installed by
this script into benchmarks/.venv-hta (from PyPI) on first use. Goals: ≤ 0.35× HTA's time,
≤ 0.5× its memory, ≤ 1.5× the floor's time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from common import ROOT, alternate, report

HTA_VENV = ROOT / "benchmarks" / ".venv-hta"
DEFAULT_TRACE = ROOT.parent / "shared" / "fixtures" / "big" / "a100_training_35MB.json.gz"


def hta_python() -> Path:
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing HolisticTraceAnalysis into {HTA_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "HolisticTraceAnalysis"], check=True)
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trace = args.trace.resolve()
    print(f"trace: {trace} ({trace.stat().st_size / 1e6:.1f} MB on disk)")
    floor = ("import gzip, json, sys; raw = open(sys.argv[1], 'rb').read(); "
             "raw = gzip.decompress(raw) if raw[:2] == b'\\x1f\\x8b' else raw; json.loads(raw)")
    runs = alternate({
        "analysis": [sys.executable, "-m", "analysis", "trace", str(trace), "--json"],
        "hta": [str(hta_python()), str(ROOT / "benchmarks" / "hta_breakdown.py"), str(trace)],
        "floor": [sys.executable, "-c", floor, str(trace)],
    }, args.rounds)
    ok = report(runs, [("analysis", "hta", "time", 0.35), ("analysis", "hta", "memory", 0.5),
                       ("analysis", "floor", "time", 1.5)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
