"""Benchmark 2: the main job vs a shell loop over a standalone article-style script.

    .venv/bin/python benchmarks/sweep_vs_loop.py [--rounds 2] [--sizes 64,1024,4096] [--repeats 3]

A: python experiments/run.py -m size=... compile=true,false   (analysis included; run.repeats=R)
B: a shell loop running benchmarks/article_script.py R times per grid point: like with like, the
   same number of processes per grid point on both sides
C: A with run.isolation=none (the fast mode, not honest for cold starts)
Every compiled job gets a fresh Inductor cache in all three. A's jobs are honestly cold and fork
from a template process that has imported torch (run.start=fork, the default); D is A with
run.start=fresh (a new interpreter per job). Goals: A ≤ 0.6× B, C ≤ 0.6× B.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from common import ROOT, alternate, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sizes", default="64,1024,4096")
    parser.add_argument("--repeats", type=int, default=3, help="processes per grid point on both sides")
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="bench-sweep-")
    py = sys.executable
    loop = (
        f"for r in $(seq {args.repeats}); do for size in {args.sizes.replace(',', ' ')}; do for c in --compile ''; do "
        f"TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) {py} benchmarks/article_script.py --size $size $c "
        f"--out {out}/loop/$r/$size$c || exit 1; done; done; done"
    )
    sweep = [py, "experiments/run.py", "-m", f"size={args.sizes}", "compile=true,false", f"run.repeats={args.repeats}"]
    runs = alternate({
        # A new folder each round (${now:...} with microseconds), or resume would skip every job.
        "sweep": sweep + [f"hydra.sweep.dir={out}/sweep/${{now:%H-%M-%S-%f}}"],
        "loop": ["bash", "-c", loop],
        "fast": sweep + ["run.isolation=none", f"hydra.sweep.dir={out}/fast/${{now:%H-%M-%S-%f}}"],
        "fresh": sweep + ["run.start=fresh", f"hydra.sweep.dir={out}/fresh/${{now:%H-%M-%S-%f}}"],
    }, args.rounds, cwd=ROOT)
    ok = report(runs, [("sweep", "loop", "time", 0.6), ("fast", "loop", "time", 0.6),
                       ("fresh", "loop", "time", 1.15), ("sweep", "fresh", "time", 0.7)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
