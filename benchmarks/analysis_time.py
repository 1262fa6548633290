"""How long the analysis of a sweep takes: a standalone `python -m analysis FOLDER` (imports
included) of this tree against another revision's, side by side (A B A B), on the same folder.

    .venv/bin/python benchmarks/analysis_time.py [--folder SWEEP] [--against REF] [--compare] [--rounds 5]

Without --folder it first runs the main command's grid (`make sweep`'s: size=64,1024,4096
compile=true,false, 3 repeats) into a temporary folder. --against (a git revision, e.g. HEAD~10)
checks that revision out into a temporary worktree and runs its analysis with this venv. Each
side writes into a folder of its own (--out), never into the sweep. Goal (issue "One contract"):
the standalone analysis of the main command's sweep in 3 s or less. --compare also times
`python -m analysis compare SWEEP SWEEP` in the same rounds (goal, issue "Three products on one
core": at most 0.35x of the analysis); it reads the tables the sweep's own analysis wrote.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, alternate

MAIN_GRID = ("size=64,1024,4096", "compile=true,false")


def main_sweep(folder: Path) -> Path:
    print(f"running the main command's grid into {folder} ...", flush=True)
    subprocess.run([sys.executable, "experiments/run.py", "-m", *MAIN_GRID, f"hydra.sweep.dir={folder}"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return folder


def worktree(ref: str, into: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", str(into), ref], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="a sweep folder (default: run the main command's grid)")
    parser.add_argument("--against", metavar="REF", help="a git revision to time side by side")
    parser.add_argument("--compare", action="store_true", help="also time compare of the sweep with itself")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    tree = None
    try:
        folder = args.folder.resolve() if args.folder else main_sweep(scratch / "sweep")
        contenders = {"this tree": [sys.executable, "-m", "analysis", str(folder), "--out", str(scratch / "now")]}
        if args.against:
            tree = worktree(args.against, scratch / "then")
            contenders[args.against] = [sys.executable, "-c",
                                        f"import sys; sys.path.insert(0, {str(tree)!r}); sys.argv = ['analysis', "
                                        f"{str(folder)!r}, '--out', {str(scratch / 'then-out')!r}]; "
                                        "import runpy; runpy.run_module('analysis', run_name='__main__')"]
        if args.compare:
            from analysis.compare.side import load_side

            contenders["compare A A"] = [sys.executable, "-m", "analysis", "compare", str(folder), str(folder),
                                         "--out", str(scratch / "compare")]
            print(f"compare reads the sweep's {load_side(folder).read_from}")
        with open("/proc/loadavg") as f:
            print(f"load average before: {f.read().split()[:3]}")
        runs = alternate(contenders, args.rounds)
        medians = {name: statistics.median(r.wall_s for r in found) for name, found in runs.items()}
        for name, value in medians.items():
            peak = statistics.median(r.peak_rss_mb for r in runs[name])
            print(f"{name:<12} median {value:.2f} s, peak {peak:.0f} MB over {args.rounds} rounds")
        if args.compare:
            print(f"compare A A / analysis: {medians['compare A A'] / medians['this tree']:.2f}x")
        if args.against:
            print(f"this tree / {args.against}: {medians['this tree'] / medians[args.against]:.2f}x")
        return 0
    finally:
        if tree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
