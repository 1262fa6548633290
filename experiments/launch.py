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
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from experiments import forkserver, records
from experiments.machine import cgroup_dirs
from experiments.records import disk_full
from experiments.config import AUTO, JobConfig, config_to_dict
from experiments.lifeline import PARENT_ENV
from experiments.slots import CPU_SLOT, held_slot, slots_for, visible_gpus

LOG_TAIL_LINES = 20


class Interrupted:
    """Set once a job was interrupted (Ctrl-C, SIGTERM) or the disk filled: the jobs after it
    are not started."""

    seen = False
    disk_error: str | None = None  # the error of the job that found the disk full

    @classmethod
    def why(cls) -> str:
        return "the disk is full" if cls.disk_error else "the sweep was interrupted"


class Progress:
    """The sweep's clock: when it started and how long the jobs it ran took, for the ETA."""

    started: float | None = None
    durations: list[float] = []
    resumed = 0  # jobs skipped because they were already ok (resume)

    @classmethod
    def reset(cls) -> None:
        cls.started, cls.durations, cls.resumed = time.monotonic(), [], 0

    @classmethod
    def line(cls, index: int, total: int | None) -> str:
        """`3 min 10 s elapsed, ~14 min left` before job `index` of `total` starts ('' before
        the first job: nothing to estimate from). Jobs skipped on resume do not count."""
        if cls.started is None:
            cls.reset()
        if index <= 1 or cls.started is None:
            return ""
        elapsed = time.monotonic() - cls.started
        text = f" {duration(elapsed)} elapsed"
        if total and cls.durations:
            per_job = sum(cls.durations) / len(cls.durations)
            text += f", ~{duration(per_job * (total - index + 1), rough=True)} left"
        return text


def duration(seconds: float, rough: bool = False) -> str:
    """`42 s`, `3 min 10 s`, `2 h 5 min`; rough: `~14 min` style (one unit below an hour)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        if rough:
            return f"{round(seconds / 60)} min"
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


@contextlib.contextmanager
def reported_from_disk(sweep_dir: Path, numbers: range, every_s: float = 1.0) -> Iterator[None]:
    """While a launcher runs the jobs `numbers` where their output cannot reach this terminal
    (submitit writes it into .submitit/), print each job's progress line once its record is on
    disk: `[4/12] 3_matmul_add_48_bf16_cold_eager ok 1.4 s`. A record left by an earlier run (a
    job resume skips) is not reported as new."""
    from experiments.sweep import planned_jobs

    total = planned_jobs(sweep_dir)
    before = {name: _mtime(sweep_dir / name / records.METRICS_FILE) for name in _job_folders(sweep_dir, numbers)}
    reported: set[str] = set()
    stop = threading.Event()

    def scan() -> None:
        for name in _job_folders(sweep_dir, numbers):
            path = sweep_dir / name / records.METRICS_FILE
            stamp = _mtime(path)
            if name in reported or stamp is None or stamp == before.get(name):
                continue
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # not there yet, or not whole: the next look
            reported.add(name)
            print(f"[{int(name.split('_', 1)[0]) + 1}/{total or '?'}] {name} {_outcome(record)}", flush=True)

    def watch() -> None:
        while not stop.wait(every_s):
            scan()

    watcher = threading.Thread(target=watch, name="progress-from-disk", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        scan()


def _job_folders(sweep_dir: Path, numbers: range) -> list[str]:
    try:
        names = os.listdir(sweep_dir)
    except OSError:
        return []
    found = []
    for name in names:
        number = name.split("_", 1)[0]
        if number.isdigit() and int(number) in numbers:
            found.append(name)
    return sorted(found, key=lambda n: int(n.split("_", 1)[0]))


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _outcome(record: Any) -> str:
    """`ok 1.4 s`, `failed: why`, `skipped: why`, from a record as found on disk."""
    if not isinstance(record, dict):
        return "failed: its metrics.json is not a record"
    seconds = ""
    try:
        import datetime

        took = (datetime.datetime.fromisoformat(str(record["finished_at"]))
                - datetime.datetime.fromisoformat(str(record["started_at"]))).total_seconds()
        seconds = f" {took:.1f} s"
    except (KeyError, ValueError, TypeError):
        pass
    status = record.get("status")
    if status == "ok":
        return f"ok{seconds}"
    return f"{status if status == 'skipped' else 'failed'}: {record.get('error') or 'no reason recorded'}"


def warm_start(config: JobConfig) -> None:
    """Start the fork server's template (importing torch: seconds) in the background while the
    sweep still composes and checks its grid, when the jobs will fork from it."""
    if config.run.isolation == "process" and config.run.start == "fork":
        threading.Thread(target=forkserver.shared, name="fork-server-start", daemon=True).start()


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
        print(f"{tag} not started: {Interrupted.why()}", flush=True)
        return None
    previous = _finished(config, job_dir)
    if previous:
        print(f"{tag} skipped: already ok in {job_dir.name} (resume)", flush=True)
        Progress.resumed += 1
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
    _quiet_sweep()
    start = time.perf_counter()

    def waiting(slots: list[str], holders: list[str], waited: float) -> None:
        device = "the CPU" if slots == [CPU_SLOT] else "GPU " + ", ".join(slots)
        who = "; ".join(h for h in holders if h) or "another profiling job on this machine"
        print(f"{tag} waiting for {device} (one job per device), held by {who}"
              + (f": {duration(waited)} so far" if waited >= 1 else ""), flush=True)

    holder = f"pid {os.getpid()}, sweep {job_dir.parent if job_dir.parent != job_dir else job_dir}"
    try:
        with held_slot(slots_for(config.device, visible_gpus()), on_wait=waiting, holder=holder) as (slot, slot_fd), \
                _inductor_cache(config) as env:
            env[records.LOCK_WAIT_ENV] = f"{time.perf_counter() - start:.3f}"
            if config.run.threads != AUTO and config.run.start == "fresh":
                # read by OpenMP and MKL when a fresh interpreter loads them (a forked job's
                # template loaded them already: the job calls torch.set_num_threads)
                env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(config.run.threads)
            where = "" if slot == CPU_SLOT else f" on GPU {slot}"
            print(f"{tag} ...{where}{Progress.line(index, total)}", flush=True)
            start = time.perf_counter()
            if config.run.isolation == "process":
                if slot != CPU_SLOT:
                    env["CUDA_VISIBLE_DEVICES"] = slot
                record = _run_in_child(config, job_dir, env, slot_fd)
            else:
                record = _run_here(config, job_dir, env)
    except KeyboardInterrupt:
        Interrupted.seen = True
        record = _finished(config, job_dir)  # an ok record written before the stop is final
        if record is None:
            record = records.base_record(config, job_dir)
            record["error"] = "interrupted: the sweep was stopped while this job ran"
            _save(job_dir, record)
    except OSError as exc:  # this process's own writes (job_config.json, a failure's record)
        if not disk_full(exc):
            raise
        record = records.base_record(config, job_dir)
        record["error"] = f"{records.DISK_FULL}: {exc}"
        _save(job_dir, record)
    if str(record.get("error") or "").startswith(records.DISK_FULL):
        Interrupted.seen, Interrupted.disk_error = True, record["error"]
    seconds = time.perf_counter() - start
    Progress.durations.append(seconds)
    if record["status"] == "ok":
        print(f"{tag} ok {seconds:.1f} s" + (f" (not cold: {record['not_cold']})" if record.get("not_cold") else ""),
              flush=True)
    else:
        print(f"{tag} failed: {record['error']} ({seconds:.1f} s)", flush=True)
    return record


BACKGROUND_THREADS = ("analysis-preload",)  # the sweep's own work that must not run beside a job


def _quiet_sweep(timeout_s: float = 60.0) -> None:
    """Let this process's background work finish before a job measures: the analysis imports
    pandas and seaborn while the template starts (about 1 s of a core), and a job measuring
    beside it would count it as load, and be slowed by it."""
    for thread in threading.enumerate():
        if thread.name in BACKGROUND_THREADS and thread is not threading.current_thread():
            thread.join(timeout_s)


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


def _run_in_child(config: JobConfig, job_dir: Path, env: dict[str, str], slot_fd: int) -> dict[str, Any]:
    """The job in its own process, which holds the device slot with this one (it inherits the
    lock's fd) and dies with this one (experiments.lifeline)."""
    config_path = job_dir / records.CONFIG_FILE
    records.write_json(config_path, config_to_dict(config))
    log_path = job_dir / records.LOG_FILE
    timeout = config.run.job_timeout_s or None
    ooms_before = oom_kills()
    job_env = {**os.environ, **env, PARENT_ENV: str(os.getpid())}
    server = forkserver.shared() if config.run.start == "fork" else None
    try:
        if server is not None:
            try:
                returncode = server.run(config_path, log_path, job_env, timeout, keep_fds=[slot_fd])
            except forkserver.ForkServerError as exc:  # the template died under the job
                record = records.base_record(config, job_dir)
                ooms = oom_kills()
                record["error"] = (
                    f"out of memory: the kernel's OOM killer killed the job or its fork server's "
                    f"template (cgroup oom_kill count {ooms_before} -> {ooms}): {exc}"
                    if ooms is not None and ooms_before is not None and ooms > ooms_before else
                    f"the fork server failed while the job ran: {exc}")
                record["stderr_tail"] = _tail(log_path)
                _save(job_dir, record)
                return record
        else:
            with open(log_path, "wb") as log:
                returncode = subprocess.run(
                    [sys.executable, "-m", "experiments.job", str(config_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=job_env,
                    pass_fds=(slot_fd,),
                    check=False,
                    timeout=timeout,
                ).returncode
        timed_out = False
    except subprocess.TimeoutExpired:  # the job has been killed
        returncode, timed_out = -signal.SIGKILL, True
    cap_log(log_path)
    record = _read_record(job_dir)
    if timed_out and _finished(config, job_dir) is not None:
        return record  # it had written its ok record: the kill ended only what it left running
    if timed_out:
        record = records.base_record(config, job_dir)
        record["error"] = f"timeout: still running after run.job_timeout_s={timeout} s, killed"
    elif returncode == 0 and record is not None and record.get("status") == "ok":
        return record
    # The job failed: keep what the child recorded, add how its process ended and its last words.
    if record is None:
        record = records.base_record(config, job_dir)
        record["error"] = (f"{records.DISK_FULL}: the job could not write its results into {job_dir}"
                           if returncode == records.EXIT_DISK_FULL else
                           f"the job's process ended without a result ({_describe_exit(returncode)})")
    if returncode == -signal.SIGKILL and not timed_out:
        ooms = oom_kills()
        record["error"] = (
            "out of memory: the kernel's OOM killer killed the job's process (SIGKILL; "
            f"cgroup oom_kill count {ooms_before} -> {ooms})"
            if ooms is not None and ooms_before is not None and ooms > ooms_before else
            "killed by SIGKILL: the kernel's out-of-memory killer or a kill -9 "
            f"(this machine does not say which); {record['error']}")
    record["status"] = "failed"
    record["exit_code"] = returncode
    record["stderr_tail"] = _tail(log_path)
    _save(job_dir, record)
    return record


def _save(job_dir: Path, record: dict[str, Any]) -> None:
    """The sweep's record of a job that failed; on a full disk, said instead of written."""
    try:
        records.write_json(job_dir / records.METRICS_FILE, record)
    except OSError as exc:
        if not disk_full(exc):
            raise
        print(f"  {records.METRICS_FILE} of {job_dir.name} not written: {records.DISK_FULL} ({exc})", flush=True)


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


def oom_kills(root: Path = Path("/sys/fs/cgroup"), cgroups: Path = Path("/proc/self/cgroup")) -> int | None:
    """How many processes the OOM killer has killed in this process's memory cgroup (cgroup v2
    memory.events, or v1 memory.oom_control), or None where the machine does not say."""
    candidates = ([d / "memory.events" for d in cgroup_dirs("", root, cgroups)]
                  + [d / "memory.oom_control" for d in cgroup_dirs("memory", root, cgroups)])
    for events in candidates:
        try:
            lines = events.read_text(encoding="ascii").splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def _finished(config: JobConfig, job_dir: Path) -> dict[str, Any] | None:
    """The job's own ok record of this configuration, once it has written it (final)."""
    record = _read_record(job_dir)
    if (record and record.get("status") == "ok" and record.get("config_hash") == records.config_hash(config)
            and record.get("finished_at")):
        return record
    return None


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
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


LOG_KEEP_BYTES = 1 << 20  # a job's log keeps its first and last MiB


def cap_log(path: Path, keep: int = LOG_KEEP_BYTES) -> int:
    """Cut the middle out of a job's log longer than 2 * keep bytes (a chatty workload wrote 52 MB
    in one job), saying so in the log; returns the bytes cut."""
    try:
        size = path.stat().st_size
        if size <= 2 * keep + 4096:  # (the slack: a log cut once, note included, stays as it is)
            return 0
        with open(path, "rb") as f:
            head = f.read(keep)
            f.seek(size - keep)
            tail = f.read(keep)
        cut = size - 2 * keep
        note = (f"\n[... {cut:,} bytes of this log cut by profsweep: a job's log keeps its first and last "
                f"{keep / 2**20:g} MiB ...]\n").encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(head + note + tail)
        os.replace(tmp, path)
        return cut
    except OSError:  # a log it cannot cut stays as it is
        return 0
