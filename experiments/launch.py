"""Run one job from the sweep process: in a fresh interpreter (default) or in this one.

The sweep process never imports torch for an isolated job. It records a job whose process died
(a crash, a kill, an import error) as failed, with the tail of the job's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from experiments import records
from experiments.config import JobConfig, config_to_dict

LOG_TAIL_LINES = 20


def run_task(config: JobConfig, job_dir: Path, index: int, total: int | None) -> dict[str, Any]:
    """Run one grid point, print its progress lines, and return its metrics record."""
    tag = f"[{index}/{total if total else '?'}] {config.label}"
    print(f"{tag} ...", flush=True)
    start = time.perf_counter()
    job_dir.mkdir(parents=True, exist_ok=True)
    # A metrics.json left by an earlier run must not pass for this run's.
    (job_dir / records.METRICS_FILE).unlink(missing_ok=True)
    with _inductor_cache(config) as env:
        if config.run.isolation == "process":
            record = _run_in_child(config, job_dir, env)
        else:
            record = _run_here(config, job_dir, env)
    seconds = time.perf_counter() - start
    if record["status"] == "ok":
        print(f"{tag} ok {seconds:.1f} s", flush=True)
    else:
        print(f"{tag} failed: {record['error']} ({seconds:.1f} s)", flush=True)
    return record


@contextlib.contextmanager
def _inductor_cache(config: JobConfig) -> Iterator[dict[str, str]]:
    """Environment for the job: with compile_cache=fresh, private Inductor and Triton caches."""
    if config.run.compile_cache != "fresh":
        yield {}
        return
    folder = Path(tempfile.mkdtemp(prefix="profsweep-cache-"))
    try:
        yield {
            "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
            "TRITON_CACHE_DIR": str(folder / "triton"),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_in_child(config: JobConfig, job_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    config_path = job_dir / records.CONFIG_FILE
    records.write_json(config_path, config_to_dict(config))
    log_path = job_dir / records.LOG_FILE
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            [sys.executable, "-m", "experiments.job", str(config_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            check=False,
        )
    record = _read_record(job_dir)
    if proc.returncode == 0 and record is not None and record.get("status") == "ok":
        return record
    # The job failed: keep what the child recorded, add how its process ended and its last words.
    if record is None:
        record = records.base_record(config, job_dir)
        record["error"] = f"the job's process ended without a result ({_describe_exit(proc.returncode)})"
    record["status"] = "failed"
    record["exit_code"] = proc.returncode
    record["stderr_tail"] = _tail(log_path)
    records.write_json(job_dir / records.METRICS_FILE, record)
    return record


def _run_here(config: JobConfig, job_dir: Path, env: dict[str, str]) -> dict[str, Any]:
    from experiments.job import run_job  # imports torch: only for isolation=none

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return run_job(config, job_dir)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _read_record(job_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((job_dir / records.METRICS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
