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
from experiments.slots import CPU_SLOT, device_slot, slots_for, visible_gpus

LOG_TAIL_LINES = 20


class Interrupted:
    """Set once a job was interrupted (Ctrl-C, SIGTERM): the jobs after it are not started."""

    seen = False


def run_task(config: JobConfig, job_dir: Path, index: int, total: int | None,
             skip: str | None = None) -> dict[str, Any] | None:
    """Run one grid point, print its progress lines, and return its metrics record.

    Resume: a job whose folder already holds an `ok` record of the same configuration is
    skipped and its files are left untouched. `skip` (why this machine cannot run the job,
    with run.unavailable=skip) records it as `skipped` without running it. After an interruption, returns None for the
    jobs that were not started (no metrics.json: a rerun redoes them).
    """
    tag = f"[{index}/{total if total else '?'}] {config.label}"
    if Interrupted.seen:
        print(f"{tag} not started: the sweep was interrupted", flush=True)
        return None
    previous = _read_record(job_dir)
    if previous and previous.get("status") == "ok" and previous.get("config_hash") == records.config_hash(config):
        print(f"{tag} skipped: already ok in {job_dir.name} (resume)", flush=True)
        return previous
    job_dir.mkdir(parents=True, exist_ok=True)
    # A metrics.json left by an earlier run must not pass for this run's.
    (job_dir / records.METRICS_FILE).unlink(missing_ok=True)
    if skip:
        record = records.base_record(config, job_dir)
        record.update(status="skipped", error=skip)
        records.write_json(job_dir / records.METRICS_FILE, record)
        print(f"{tag} skipped: {skip}", flush=True)
        return record
    start = time.perf_counter()
    try:
        with device_slot(slots_for(config.device, visible_gpus())) as slot, _inductor_cache(config) as env:
            where = "" if slot == CPU_SLOT else f" on GPU {slot}"
            print(f"{tag} ...{where}", flush=True)
            start = time.perf_counter()
            if config.run.isolation == "process":
                if slot != CPU_SLOT:
                    env["CUDA_VISIBLE_DEVICES"] = slot
                record = _run_in_child(config, job_dir, env)
            else:
                record = _run_here(config, job_dir, env)
    except KeyboardInterrupt:
        Interrupted.seen = True
        record = records.base_record(config, job_dir)
        record["error"] = "interrupted: the sweep was stopped while this job ran"
        records.write_json(job_dir / records.METRICS_FILE, record)
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
    timeout = config.run.job_timeout_s or None
    with open(log_path, "wb") as log:
        try:
            returncode = subprocess.run(
                [sys.executable, "-m", "experiments.job", str(config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                check=False,
                timeout=timeout,
            ).returncode
            timed_out = False
        except subprocess.TimeoutExpired:  # run() has killed the child
            returncode, timed_out = -signal.SIGKILL, True
    record = _read_record(job_dir)
    if timed_out:
        record = records.base_record(config, job_dir)
        record["error"] = f"timeout: still running after run.job_timeout_s={timeout} s, killed"
    elif returncode == 0 and record is not None and record.get("status") == "ok":
        return record
    # The job failed: keep what the child recorded, add how its process ended and its last words.
    if record is None:
        record = records.base_record(config, job_dir)
        record["error"] = f"the job's process ended without a result ({_describe_exit(returncode)})"
    record["status"] = "failed"
    record["exit_code"] = returncode
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
