"""Benchmark: can compare's verdicts be trusted? A/A, a real change, and a loaded machine.

    .venv/bin/python benchmarks/aa_compare.py [--trials 3] [--grid 'size=64,1024,4096 compile=true,false']
                                              [--skip-load] [--keep DIR] [extra overrides for every sweep ...]

1. A/A: two identical sweeps of the grid with the defaults, one after the other, compared:
   every `slower` or `faster` is a false verdict of change (goal: 0 in every trial), and
   `--fail-if-slower 1.10` must exit 0.
2. A real change: `size=256` against `size=512` (8x the FLOPs of matmul_add), compared with
   `--ignore size`: goal `slower` in every trial.
3. Load: one more sweep of the grid while two busy loops keep both CPUs busy, compared with the
   first quiet sweep: goal every grid point of the loaded sweep `noisy` (with a reason) and no
   `slower` / `faster` verdict.

Run it alone on the machine: anything else running is load. Prints each trial's figures, and
each sweep's conclusion on compile against eager (the main command's: decided at every size, and
never opposite between sweeps). `--keep DIR` keeps the sweeps there (else they are deleted).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from profsweep.contract import SUMMARY_FILE

from common import ROOT

PY = sys.executable


def sweep(folder: Path, overrides: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([PY, "experiments/run.py", "-m", *overrides, f"hydra.sweep.dir={folder}"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"sweep {' '.join(overrides)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    noise = [line for line in done.stdout.splitlines() if "noisy" in line or "one process" in line]
    print(f"    sweep {' '.join(overrides)}: {time.perf_counter() - start:.1f} s" + (f" | {noise[0]}" if noise else ""),
          flush=True)
    for line in compile_against_eager(folder):
        print(f"      {line}", flush=True)
    return time.perf_counter() - start


def compile_against_eager(folder: Path) -> list[str]:
    """The sweep's conclusions on compile against eager (conclusions.json), as written."""
    try:
        found = json.loads((folder / "conclusions.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [c["text"] for c in found if isinstance(c, dict) and str(c.get("text", "")).startswith("compile against eager")]


def compare(base: Path, new: Path, out: Path, *extra: str) -> tuple[int, pd.DataFrame]:
    done = subprocess.run([PY, "-m", "analysis", "compare", str(base), str(new), "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"compare exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    for line in done.stdout.splitlines():  # every pair moved one way by one factor: drift between the sweeps?
        if "moved the same way" in line:
            print(f"  {line.strip().split(': a shift')[0]}", flush=True)
    return done.returncode, pd.read_csv(out / "compare.csv")


def counts(frame: pd.DataFrame) -> str:
    found = frame["verdict"].value_counts()
    return ", ".join(f"{int(found.get(v, 0))} {v}" for v in ("slower", "faster", "same", "inconclusive"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--grid", default="size=64,1024,4096 compile=true,false")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the sweeps in this folder (new or empty)")
    parser.add_argument("extra", nargs="*", help="overrides for every sweep, e.g. run.repeats=2")
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        parser.error(f"--keep {args.keep}: not empty")
    root = args.keep if args.keep is not None else Path(tempfile.mkdtemp(prefix="bench-aa-"))
    root.mkdir(parents=True, exist_ok=True)
    grid = args.grid.split() + args.extra
    ok = True
    false_verdicts, change_found, times = [], [], []
    first: Path | None = None
    try:
        for trial in range(1, args.trials + 1):
            print(f"trial {trial}/{args.trials}", flush=True)
            a, b = root / f"a{trial}", root / f"b{trial}"
            times += [sweep(a, grid), sweep(b, grid)]
            first = first or a
            code, frame = compare(a, b, root / f"aa{trial}", "--fail-if-slower", "1.10")
            wrong = int(frame["verdict"].isin(["slower", "faster"]).sum())
            false_verdicts.append(wrong)
            widths = (frame["interval_high"] / frame["interval_low"]).dropna()
            vetoed = int(frame["verdict_why"].fillna("").str.contains("the machine's [a-z]+ probe", regex=True).sum())
            print(f"  A/A: {len(frame)} pairs: {counts(frame)} ({vetoed} of the inconclusive for one of the machine's "
                  f"probes); false verdicts of change {wrong} of {len(frame)}; "
                  f"--fail-if-slower 1.10 exit {code}; interval high/low: median {widths.median():.2f} "
                  f"({widths.min():.2f}-{widths.max():.2f})", flush=True)
            for _, pair in frame.iterrows():  # each pair: what its verdict rests on
                print(f"    {pair.get('base_job', '')}: {pair['verdict']} {pair['step_ratio']:.3f}x "
                      f"[{pair['interval_low']:.3f}, {pair['interval_high']:.3f}] "
                      f"repeats {pair.get('repeats_base', '?')}/{pair.get('repeats_new', '?')}"
                      + (f"; {pair['verdict_why']}" if isinstance(pair.get("verdict_why"), str) else ""), flush=True)
            ok &= wrong == 0 and code == 0
            small, big = root / f"s256_{trial}", root / f"s512_{trial}"
            sweep(small, ["size=256", *args.extra])
            sweep(big, ["size=512", *args.extra])
            code, frame = compare(small, big, root / f"change{trial}", "--ignore", "size")
            verdicts = frame["verdict"].tolist()
            change_found.append(verdicts == ["slower"])
            print(f"  size 256 -> 512 (8x the work): {verdicts[0]} {frame['step_ratio'].iloc[0]:.2f}x "
                  f"[{frame['interval_low'].iloc[0]:.2f}, {frame['interval_high'].iloc[0]:.2f}]"
                  + ("" if verdicts == ["slower"] else f" ({frame['verdict_why'].iloc[0]})"), flush=True)
            ok &= verdicts == ["slower"]
        if not args.skip_load and first is not None:
            print("load: two busy loops beside one sweep", flush=True)
            loops = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(2)]
            try:
                loaded = root / "loaded"
                sweep(loaded, grid)
            finally:
                for p in loops:
                    p.kill()
                    p.wait()
            summary = pd.read_csv(loaded / SUMMARY_FILE)
            flagged = summary["noisy"].fillna(False).astype(bool)
            code, frame = compare(first, loaded, root / "load", "--fail-if-slower", "1.10")
            wrong = int(frame["verdict"].isin(["slower", "faster"]).sum())
            print(f"  loaded sweep: {int(flagged.sum())} of {len(summary)} grid points noisy; reasons: "
                  + " | ".join(sorted(set(summary["noise_reason"].dropna().astype(str))))[:600], flush=True)
            print(f"  quiet vs loaded: {counts(frame)}; confident verdicts of change {wrong}; "
                  f"--fail-if-slower 1.10 exit {code}", flush=True)
            ok &= bool(flagged.all()) and wrong == 0
        print(f"\nA/A false verdicts of change per trial: {false_verdicts} (goal: 0 each)")
        print(f"8x change found slower: {change_found} (goal: all)")
        print(f"main grid sweep: median {sorted(times)[len(times) // 2]:.1f} s over {len(times)} sweeps")
        print("goals " + ("met" if ok else "NOT MET"))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
