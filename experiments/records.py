"""The job's record: the flat metrics.json fields of a configuration and of the machine (the
file names and the atomic writes are the contract's, profsweep.contract).

Light on purpose (no torch import): the sweep process uses it to record jobs whose process died.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from experiments import seam
from profsweep.columns import flat_key
# The contract's names and writes, used through this module by the job side.
from profsweep.contract import (  # noqa: F401
    METRICS_FILE, SCHEMA_VERSION, UNFINISHED, atomic_write_text, disk_full, write_json,
)
from experiments.config import SWEEP_ONLY, JobConfig, config_to_dict

CONFIG_FILE = "job_config.json"
LOG_FILE = "job.log"
DISK_FULL = "disk full"  # how a job's error starts when a write failed for lack of space
LOCK_WAIT_ENV = "PROFSWEEP_LOCK_WAIT_S"  # how long the sweep waited for a job's device slot (its record says)
PHASE_MARK = "profsweep: now "  # a job's log line when it starts a part of its work (what a timeout interrupted)
EXIT_DISK_FULL = 28  # (ENOSPC) the job process's exit code then (it may not have written metrics.json)


class JobError(RuntimeError):
    """A job that cannot run as configured; the message is what the user reads (a record's error
    starts with this class's name: `JobError: memory: ...`)."""


class Refusal(JobError):
    """A job refused for what it was given (meta tensors, a setting found wrong inside the job):
    no other process of the grid point can change it (the record's `failure_is_final`)."""




def artifact_stem(config: JobConfig) -> str:
    """`<size>_<dtype>_<cold|warm>_<eager|compile>`, the article's file names (`_train` after
    them for training steps)."""
    return f"{config.size}_{config.dtype}_{config.phase}_{config.mode}{'_train' if config.train else ''}"


def settings_record(config: JobConfig) -> dict[str, Any]:
    """Every grid key and setting as one flat mapping (workload_*, profiler_*, compile_*)."""
    record: dict[str, Any] = {
        "workload": config.workload.name,
        "size": config.size,
        "dtype": config.dtype,
        "compile": config.compile,
        "warmup": config.warmup,
        "device_requested": config.device,
        "train": config.train,
        "optimizer": config.optimizer if config.train else None,
    }
    record["workload_target"] = config.workload.target
    # Every setting the factory was called with, its defaults too (they name series as well).
    for key, value in {**seam.defaults(config.workload.target), **config.workload.settings}.items():
        record[flat_key(f"workload.{key}")] = value
    for name, group in (("profiler", config.profiler), ("compiler", config.compiler)):
        for f in dataclasses.fields(group):
            record[flat_key(f"{name}.{f.name}")] = getattr(group, f.name)
    for f in dataclasses.fields(config.run):
        # run.repeats is how many the sweep planned; summary.csv's `repeats`, how many measured
        record["repeats_planned" if f.name == "repeats" else f.name] = getattr(config.run, f.name)
    return record


def environment_record() -> dict[str, Any]:
    """Where the job ran, without importing torch (its version comes from package metadata)."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    commit, dirty = git_state(Path.cwd())
    return {
        "hostname": socket.gethostname(),
        "python_version": platform.python_version(),
        "torch_version": torch_version,
        "git_commit": commit,
        "git_dirty": dirty,
    }


def git_state(folder: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the repository holding `folder`, or (None, None) outside one."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(folder), *args],
                capture_output=True, text=True, timeout=10, check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, (bool(status) if status is not None else None)


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def config_hash(config: JobConfig) -> str:
    """A fingerprint of everything that configures a job (not its folder name): resume keys on it."""
    data = config_to_dict(config)
    data.pop("expect", None)  # what the person expects does not change what is measured
    for key in SWEEP_ONLY:  # nor which repeat it is, or how many the sweep makes
        data["run"].pop(key, None)
    canonical = json.dumps(data, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def base_record(config: JobConfig, job_dir: Path) -> dict[str, Any]:
    """The fields every metrics.json has, whatever became of the job."""
    return {
        "schema_version": SCHEMA_VERSION,
        "job": job_dir.name,
        "config_hash": config_hash(config),
        **settings_record(config),
        "status": "failed",
        "error": None,
        **environment_record(),
    }


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def gpu_inventory() -> list[dict[str, Any]]:
    """GPUs as nvidia-smi lists them (no CUDA context is created); [] without one. Asked once
    per process: the sweep process needs it for environment.json and for every job's slot."""
    return [dict(gpu) for gpu in _gpu_inventory()]


@functools.lru_cache(maxsize=1)
def _gpu_inventory() -> tuple[dict[str, Any], ...]:
    query = "index,name,memory.total,driver_version"
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    gpus = []
    for line in done.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4:
            gpus.append({"index": fields[0], "name": fields[1], "memory_mib": fields[2], "driver_version": fields[3]})
    return tuple(gpus)


def environment_file(command: list[str]) -> dict[str, Any]:
    """environment.json of a sweep folder: where and how it ran."""
    env = environment_record()
    torch_version = env["torch_version"]
    gpus = gpu_inventory()
    return {
        "created_at": now_iso(),
        "command": command,
        **env,
        "cuda_build": torch_version.split("+", 1)[1] if torch_version and "+" in torch_version else None,
        "driver_version": gpus[0]["driver_version"] if gpus else None,
        "gpus": gpus,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }


def last_phase(log_tail: str) -> str | None:
    """The part of its work a job had last started, by the PHASE_MARK lines of its log's tail."""
    said = [line[len(PHASE_MARK):].strip() for line in log_tail.splitlines() if line.startswith(PHASE_MARK)]
    return said[-1] if said else None
