"""analysis/trace.py against an earlier copy of itself: same results, time and memory side by side.

    cp analysis/trace.py /tmp/trace_before.py      # before changing it (or: git show HEAD:analysis/trace.py > ...)
    ...edit analysis/trace.py...
    .venv/bin/python benchmarks/trace_refactor.py [--before /tmp/trace_before.py] [--rounds 5] [TRACE ...]

For each trace (default: the recorded fixtures in ../shared/fixtures), each round runs one fresh
process per version (before, after, in alternation) that times one `analyse_trace` (wall and
CPU time: on a shared machine the CPU time is the steadier of the two), reads its own peak RSS,
then runs it again under tracemalloc for the peak of Python allocations. Reported: medians over
the rounds, and whether the two versions' result dicts are identical, keys in the same order
(compared after a JSON round trip; `files` aside, since it names the path given).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT.parent / "shared" / "fixtures"


def _module(source: str):
    """Both versions loaded the same way, from their file alone (trace.py imports only the
    standard library), so that neither carries the package's imports."""
    path = ROOT / "analysis" / "trace.py" if source == "after" else Path(source)
    name = f"trace_{'after' if source == 'after' else 'before'}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def worker(source: str, trace: Path, out: Path | None) -> None:
    """One version on one trace, in this process: time, peak RSS, tracemalloc peak, the result."""
    module = _module(source)
    start, cpu = time.perf_counter(), time.process_time()
    result = module.analyse_trace(trace)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    module.analyse_trace(trace)
    traced_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    if out is not None:
        out.write_text(json.dumps(result))
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss_mb, "tracemalloc_peak_mb": traced_mb}))


def _run(source: str, trace: Path, out: Path | None) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", source, str(trace)] + (["--out", str(out)] if out else [])
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{source} on {trace.name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differences(a: object, b: object, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: only in {'before' if k in a else 'after'}" for k in set(a) ^ set(b)]
        for k in sorted(set(a) & set(b)):
            out += _differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {str(a)[:80]} != {str(b)[:80]}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--before", default="/tmp/trace_before.py", help="the earlier copy of analysis/trace.py")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.traces[0], args.out)
        return 0
    if not Path(args.before).is_file():
        parser.error(f"--before {args.before}: no such file (copy analysis/trace.py there before changing it)")
    traces = args.traces or sorted((FIXTURES / "cuda-traces").glob("*.json.gz")) + sorted((FIXTURES / "big").glob("*"))
    print(f"load before: {open('/proc/loadavg').read().strip()}  ({os.cpu_count()} CPUs)")
    print(f"{'trace':<32} {'version':<7} {'wall ms':>9} {'CPU ms':>9} {'peak RSS MB':>12} {'tracemalloc MB':>15}")
    identical = True
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    for trace in traces:
        outs = {v: tmp / f"trace_refactor_{v}.json" for v in ("before", "after")}
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for r in range(args.rounds):
            for version, source in (("before", args.before), ("after", "after")):
                runs[version].append(_run(source, trace, outs[version] if r == 0 else None))
        for version, rs in runs.items():
            med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
            print(f"{trace.name:<32} {version:<7} {med['wall_s'] * 1e3:9.1f} {med['cpu_s'] * 1e3:9.1f} "
                  f"{med['peak_rss_mb']:12.1f} {med['tracemalloc_peak_mb']:15.1f}")
        ratios = [a["cpu_s"] / b["cpu_s"] for a, b in zip(runs["after"], runs["before"])]
        print(f"{trace.name:<32} after/before CPU time, round by round: {', '.join(f'{r:.2f}' for r in ratios)}")
        before, after = (json.loads(outs[v].read_text()) for v in ("before", "after"))
        before.pop("files", None), after.pop("files", None)
        diffs = _differences(before, after)
        same_order = json.dumps(before) == json.dumps(after)  # key order too: summary.csv's columns
        identical &= not diffs and same_order
        print(f"{trace.name:<32} results {'identical' if not diffs else 'DIFFER'}"
              f"{', same key order' if same_order else ', KEY ORDER DIFFERS'}")
        for d in diffs[:20]:
            print(f"    {d}")
    print(f"load after: {open('/proc/loadavg').read().strip()}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
