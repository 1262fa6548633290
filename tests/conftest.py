"""Helpers shared by the tests: run the CLI the way a person does, read torch's table footer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _ceilings_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One cache of measured ceilings for the whole test session, never the user's: each device x
    dtype x threads is measured by the first sweep that needs it (profsweep.ceilings)."""
    os.environ["PROFSWEEP_CACHE_DIR"] = str(tmp_path_factory.mktemp("ceilings-cache"))

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
