"""Helpers shared by the tests: run the CLI the way a person does, read torch's table footer."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT.parent / "shared" / "fixtures"  # real CUDA traces (../shared/fixtures/README.md)
CUDA_TRACES = FIXTURES / "cuda-traces"  # the small ones, one workload each


@pytest.fixture(autouse=True, scope="session")
def _own_cache_and_locks(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The test session's own cache of measured ceilings (each device x dtype x threads measured
    by the first sweep that needs it, never the user's cache) and its own device locks (both shared
    by its xdist workers): a test's sweep never waits for another user's sweep on this machine (test_slots checks the
    machine-wide folder itself)."""
    shared = _run_folder(tmp_path_factory)
    for env, name in (("PROFSWEEP_CACHE_DIR", "ceilings-cache"), ("PROFSWEEP_LOCK_DIR", "device-locks")):
        (shared / name).mkdir(exist_ok=True)
        os.environ[env] = str(shared / name)


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's own folder. Under pytest-xdist (`make test` runs `-n 2`) every worker shares
    it: their jobs take turns on the device as two users' jobs do, and the ceilings one worker
    measured serve the other."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


# Under pytest-xdist, a folder of the run's own (made by the controller, inherited by its workers)
# for the quiet lock: every test holds it shared while its fixtures are set up, it runs and they are
# torn down, and `alone` takes it exclusively.
QUIET = "PROFSWEEP_TESTS_QUIET"
_holding: list = []  # this worker's quiet lock file, open and held shared while a test runs


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no":
        os.environ[QUIET] = tempfile.mkdtemp(prefix="profsweep-tests-quiet-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and QUIET in os.environ:
        shutil.rmtree(os.environ.pop(QUIET), ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """A test, its fixtures' set-up (a module's sweeps) and tear-down included, runs holding the
    quiet lock shared: never inside another worker's `alone`."""
    folder = os.environ.get(QUIET)
    if not folder or not hasattr(item.config, "workerinput"):
        return (yield)
    with open(Path(folder, "quiet.lock"), "a") as quiet:
        with _flock(Path(folder, "quiet-gate.lock"), fcntl.LOCK_SH):  # not past a worker waiting to be alone
            fcntl.flock(quiet, fcntl.LOCK_SH)
        _holding.append(quiet)
        try:
            return (yield)
        finally:
            _holding.pop()


@pytest.fixture(scope="session")
def alone() -> Callable[[], AbstractContextManager[None]]:
    """`with alone():` no other xdist worker's test runs inside: for sweeps whose verdicts need a
    quiet machine (a change measured on a loaded one is never confirmed). A fixture, not an import:
    pytest loads this file as `conftest`, and `tests.conftest` imported by a test file is another
    module, whose hold is empty."""
    return _alone


@contextmanager
def _alone() -> Iterator[None]:
    """The gate keeps the other worker's next test from starting; this test's shared hold becomes
    exclusive once the other's test has ended."""
    folder = os.environ.get(QUIET)
    if not folder or not _holding:
        yield
        return
    with _flock(Path(folder, "quiet-gate.lock"), fcntl.LOCK_EX):
        fcntl.flock(_holding[-1], fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(_holding[-1], fcntl.LOCK_SH)


@contextmanager
def _flock(path: Path, how: int) -> Iterator[None]:
    with open(path, "a") as held:
        fcntl.flock(held, how)
        yield


# The longest test files, longest first (seconds in a two-worker run on 2 cores, 2026-12-07:
# 552, 356, 167, 156, 154, 152, 97), so that the two workers, each handed the next file in
# collection order (make test passes --no-loadscope-reorder: xdist otherwise orders files by
# their count of tests, which put the README's one test last), finish together. test_history.py
# stays in its place among the rest: its sweeps run alone (`alone`), which waits for the other
# worker's test, and by then the README's has ended.
LONGEST_FIRST = ("test_readme_runs.py", "test_faults.py", "test_sweep_cli.py", "test_custom_workload.py",
                 "test_api.py", "test_ceilings.py", "test_claims.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """LONGEST_FIRST's files first, in its order; the rest keep theirs."""
    first = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))


_FOOTER = re.compile(r"^Self (CPU|CUDA) time total: ([0-9.]+)(us|ms|s)$", re.MULTILINE)
_UNIT_US = {"us": 1.0, "ms": 1e3, "s": 1e6}


def table_footer(text: str) -> dict[str, float]:
    """{"CPU": µs, "CUDA": µs} as printed under key_averages().table()."""
    return {kind: float(value) * _UNIT_US[unit] for kind, value, unit in _FOOTER.findall(text)}


def run_cli(*args: str, env: dict | None = None, timeout: float = 600,
            repeats: int | None = 1) -> subprocess.CompletedProcess:
    """`python experiments/run.py ARGS` from the project root, as a person runs it. Every grid
    point in `repeats` processes (one by default: a test about something else need not pay three;
    tests of repeats pass run.repeats themselves or repeats=None for the default)."""
    if repeats is not None and "-m" in args and not any(a.startswith("run.repeats=") for a in args):
        args = (*args, f"run.repeats={repeats}")
    return subprocess.run(
        [sys.executable, "experiments/run.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def read_metrics(job_dir: Path) -> dict:
    return json.loads((job_dir / "metrics.json").read_text())


def job_dirs(sweep_dir: Path) -> list[Path]:
    """Job folders in job order (their names start with the job number)."""
    dirs = [p for p in sweep_dir.iterdir() if p.is_dir() and p.name.split("_", 1)[0].isdigit()]
    return sorted(dirs, key=lambda p: int(p.name.split("_", 1)[0]))


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    return tmp_path / "sweep"


SLOW_FACTORY = """
import time

import torch


def make(size, dtype, device, seconds: float = 0.0):
    time.sleep(seconds)  # the job is running (its process is up) while this sleeps
    x = torch.ones(size, size, dtype=dtype, device=device)
    return torch.mm, (x, x)
"""


@pytest.fixture
def slow_workload(tmp_path: Path) -> dict[str, str]:
    """The environment in which `workload=custom workload._target_=slowbench:make
    workload.seconds=N` is a job that sleeps N s inside its own process before its first step."""
    folder = tmp_path / "slowbench_module"
    folder.mkdir()
    (folder / "slowbench.py").write_text(SLOW_FACTORY)
    return {"PYTHONPATH": str(folder)}


def alive(pid: int) -> bool:
    """A process that runs (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_for(predicate, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# --- hand-made job folders (compare, conclusions, history, serve, analysis) ----------------------


def hand_made_job(folder: Path, num: int, step_us: list[float], *, size: int = 8,
                  ops: tuple[str | tuple[str, float], ...] = ("aten::mm",), repeat: int = 1, **settings) -> Path:
    """One finished CPU job whose trace has one ProfilerStep# of each duration, each running `ops`
    one after another (a name takes 0.5 µs, a (name, µs) pair as long as it says); the `repeat`-th
    of its grid point (the jobs of one point share a config_hash)."""
    job = folder / f"{num}_matmul_add_{size}_bf16_cold_eager{f'_r{repeat}' if repeat > 1 else ''}"
    job.mkdir(parents=True)
    events, ts = [], 0.0
    for i, dur in enumerate(step_us, 1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": ts, "dur": dur})
        offset = 1.0
        for op in ops:
            name, op_us = (op, 0.5) if isinstance(op, str) else op
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts + offset,
                           "dur": op_us})
            offset += op_us + 0.5
        ts += dur + 10
    (job / "t.json").write_text(json.dumps({"traceEvents": events}))
    metrics = {
        "job": job.name, "workload": "matmul_add", "size": size, "dtype": "bf16", "compile": False,
        "warmup": False, "device": "cpu", "status": "ok", "error": None, "steps": len(step_us),
        "self_cpu_total_us": float(sum(step_us)), "trace_file": "t.json", "table_file": "t.txt", "repeat": repeat,
        "config_hash": f"size={size} {json.dumps(settings, sort_keys=True)}", "schema_version": 1, **settings,
    }
    (job / "metrics.json").write_text(json.dumps(metrics))
    return job


def hand_made_point(folder: Path, num: int, repeats: list[list[float]], **kwargs) -> list[Path]:
    """One grid point measured in len(repeats) jobs, each with its steps' durations."""
    return [hand_made_job(folder, num + k * 100, steps, repeat=k + 1, **kwargs) for k, steps in enumerate(repeats)]


def processes(center: float, n: int = 3, steps: int = 20, between: float = 0.02,
              within: float = 0.1) -> list[list[float]]:
    """n repeats whose step medians lie at center × (1, 1 - between, 1 + between, ...), their steps
    spread ± within."""
    factors = [1 + between * ((k + 1) // 2) * (-1) ** k for k in range(n)]
    return [jitter(center * f, steps, within) for f in factors]


def jitter(center: float, n: int, spread: float = 0.1) -> list[float]:
    """n samples spread evenly over center ± spread, in a shuffled order."""
    return [center * (1 - spread + 2 * spread * ((i * 7) % n) / max(n - 1, 1)) for i in range(n)]


def job(folder: Path, num: int, *, size: int, compile: bool, step_us: float, mm_us: float, timed_us: float,
        repeat: int = 1, steps: int = 5, add_us: float = 0.0, **settings) -> Path:
    """One finished CPU job: `steps` ProfilerStep# spans of step_us, each with an aten::mm of mm_us
    (compute) and, if add_us, an aten::add; the rest of the step is framework overhead. Its
    un-profiled steps lie around timed_us."""
    name = f"{num}_matmul_add_{size}_bf16_cold_{'compile' if compile else 'eager'}{f'_r{repeat}' if repeat > 1 else ''}"
    path = folder / name
    path.mkdir(parents=True)
    events, ts = [], 0.0
    for i in range(1, steps + 1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": ts, "dur": step_us})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts + 1, "dur": mm_us})
        if add_us:
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                           "ts": ts + 2 + mm_us, "dur": add_us})
        ts += step_us + 10
    (path / "t.json").write_text(json.dumps({"traceEvents": events}))
    samples = jitter(timed_us * (1 + 0.01 * (repeat - 2)), 40, 0.05)
    (path / "metrics.json").write_text(json.dumps({
        "job": name, "workload": "matmul_add", "size": size, "dtype": "bf16", "compile": compile, "warmup": False,
        "train": False, "device": "cpu", "status": "ok", "error": None, "steps": steps, "repeat": repeat,
        "self_cpu_total_us": float(step_us * steps), "trace_file": "t.json", "table_file": "t.txt",
        "config_hash": f"size={size} compile={compile} {settings}", "schema_version": 1, **settings, "first_call_ms": 700.0 if compile else 2.0,
        "timed_samples_us": samples, "timed_us_per_step": sorted(samples)[len(samples) // 2],
        "peak_memory_bytes": size * size * 4, "flops_per_call": 2 * size ** 3, "bytes_per_call": 6 * size * size,
    }))
    return path
