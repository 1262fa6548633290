"""Run one job from the sweep process: its progress lines, resume, its device slot, and the
launcher of run.isolation and run.start (experiments.launchers) that starts its process.

The sweep process never imports torch for an isolated job. The sweep's state (stopped, its clock)
is profsweep.sweep_state's SWEEP, shared with the grid sweeper.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from experiments import records
from experiments.config import AUTO, JobConfig
from experiments.launchers import failure_record, finished_record, launcher_for, read_record, unfinished_record
from experiments.slots import CPU_SLOT, held_slot, say_waiting, slots_for, visible_gpus
from profsweep.contract import alive, one_line, scratch_pid, untouched_for
from profsweep.sweep_state import SWEEP


def warm_start(config: JobConfig) -> None:
    """Start the fork server's template (importing torch: seconds) in the background while the
    sweep still composes and checks its grid, when the jobs will fork from it."""
    launcher_for(config).start_in_background()


def run_task(config: JobConfig, job_dir: Path, index: int, total: int | None,
             skip: str | None = None) -> dict[str, Any] | None:
    """Run one grid point, print its progress lines, and return its metrics record.

    Resume: a job whose folder already holds an `ok` record of the same configuration is
    skipped and its files are left untouched. `skip` (why this machine cannot run the job,
    with run.unavailable=skip) records it as `skipped` without running it. After an interruption, returns None for the
    jobs that were not started (no metrics.json: a rerun redoes them).
    """
    tag = f"[{index}/{total if total else '?'}] {config.label}"
    if SWEEP.stopped:
        print(f"{tag} not started: {SWEEP.why()}", flush=True)
        return None
    previous = finished_record(config, job_dir)
    if previous:
        print(f"{tag} skipped: already ok in {job_dir.name} (resume)", flush=True)
        SWEEP.resumed += 1
        return previous
    job_dir.mkdir(parents=True, exist_ok=True)
    # A metrics.json left by an earlier run must not pass for this run's: each record below replaces
    # it in one step (atomic), so a kill at any moment leaves the old record or the new, never none.
    if skip:
        return _skipped(config, job_dir, tag, skip)
    _quiet_sweep()
    start = time.perf_counter()
    holder = f"pid {os.getpid()}, sweep {job_dir.parent if job_dir.parent != job_dir else job_dir}"
    launched = False
    try:
        try:
            unfinished_record(config, job_dir)
        except OSError:
            (job_dir / records.METRICS_FILE).unlink(missing_ok=True)  # not the earlier run's, then
            raise
        with held_slot(slots_for(config.device, visible_gpus()), on_wait=say_waiting(tag), holder=holder) \
                as (slot, slot_fd), _inductor_cache(config) as env:
            launched = True  # its device held, its "..." line next: a stop from here on stops a job that ran
            env.update(_job_environment(config, lock_wait_s=time.perf_counter() - start))
            where = "" if slot == CPU_SLOT else f" on GPU {slot}"
            print(f"{tag} ...{where}{SWEEP.progress_line(index, total)}", flush=True)
            start = time.perf_counter()
            record = launcher_for(config).launch(config, job_dir, env, slot, slot_fd)
    except KeyboardInterrupt:
        SWEEP.stop()
        if not launched:  # stopped while it waited for its device: it never started, as the jobs after it
            _never_started(job_dir)
            print(f"{tag} not started: {SWEEP.why()}", flush=True)
            return None
        # an ok record written before the stop is final
        record = finished_record(config, job_dir) or failure_record(
            config, job_dir, "interrupted: the sweep was stopped while this job ran")
    except OSError as exc:  # this process's own writes (job_config.json, a failure's record)
        if not records.disk_full(exc):
            raise
        record = failure_record(config, job_dir, f"{records.DISK_FULL}: {exc}")
    if str(record.get("error") or "").startswith(records.DISK_FULL):
        SWEEP.stop(disk_error=record["error"])
    seconds = time.perf_counter() - start
    SWEEP.durations.append(seconds)
    _print_outcome(tag, record, seconds)
    return record


def _never_started(job_dir: Path) -> None:
    """Take away the placeholder of a job stopped before it started (unfinished_record: "killed
    while it ran"), and its folder where that leaves nothing but Hydra's copy of its config: a
    resume runs it, and the sweep's tally counts it among the jobs not started."""
    if (job_dir / records.METRICS_FILE).is_file() and read_record(job_dir) is None:
        (job_dir / records.METRICS_FILE).unlink(missing_ok=True)
    try:
        if {p.name for p in job_dir.iterdir()} <= {".hydra"}:  # Hydra's copy of the config, for this start
            shutil.rmtree(job_dir)
    except OSError:  # gone, or not ours to remove
        pass


def _skipped(config: JobConfig, job_dir: Path, tag: str, why: str) -> dict[str, Any]:
    """The record of a grid point this machine cannot run (run.unavailable=skip), not run."""
    record = records.base_record(config, job_dir)
    record.update(status="skipped", error=why)
    records.write_json(job_dir / records.METRICS_FILE, record)
    print(f"{tag} skipped: {why}", flush=True)
    return record


def _job_environment(config: JobConfig, lock_wait_s: float) -> dict[str, str]:
    """What the job reads from its environment: how long it waited for its device slot, and the
    thread count OpenMP and MKL read when a fresh interpreter loads them (a forked job's template
    loaded them already: the job calls torch.set_num_threads)."""
    env = {records.LOCK_WAIT_ENV: f"{lock_wait_s:.3f}"}
    if config.run.threads != AUTO and config.run.start == "fresh":
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(config.run.threads)
    return env


def _print_outcome(tag: str, record: dict[str, Any], seconds: float) -> None:
    if record["status"] == "ok":
        notes = [f"{what}: {one_line(str(record[key]))}" for key, what in
                 (("not_cold", "not cold"), ("timed_error", "no un-profiled timing")) if record.get(key)]
        print(f"{tag} ok {seconds:.1f} s" + "".join(f" ({n})" for n in notes), flush=True)
    else:
        # one line, as the sweep's closing tally says it (helper-58: a compiler's error spilled 35 lines)
        print(f"{tag} failed: {one_line(record['error'])} ({seconds:.1f} s)", flush=True)


BACKGROUND_THREADS = ("analysis-preload",)  # the sweep's own work that must not run beside a job


def _quiet_sweep(timeout_s: float = 60.0) -> None:
    """Let this process's background work finish before a job measures: the analysis imports
    pandas and seaborn while the template starts (about 1 s of a core), and a job measuring
    beside it would count it as load, and be slowed by it."""
    for thread in threading.enumerate():
        if thread.name in BACKGROUND_THREADS and thread is not threading.current_thread():
            thread.join(timeout_s)


CACHE_PREFIX = "profsweep-cache-"  # + the sweep process's pid: a job's private Inductor and Triton caches
SCRATCH_PREFIXES = (CACHE_PREFIX, "profsweep-provenance-", "profsweep-memory-")  # + the pid of the process that made it


def clear_stale_scratch() -> None:
    """Remove the scratch folders in tempfile's folder that a process killed outright left (its
    pid in the name, no such process now): a sweep or a job killed by SIGKILL runs no cleanup.
    Those of an older profsweep, with no pid in the name, once untouched for OLD_SCRATCH_S."""
    root = Path(tempfile.gettempdir())
    for prefix in SCRATCH_PREFIXES:
        for folder in root.glob(f"{prefix}*"):
            pid = scratch_pid(folder.name, prefix)
            if not alive(pid) if pid is not None else untouched_for(folder, OLD_SCRATCH_S):
                if folder.is_dir():
                    shutil.rmtree(folder, ignore_errors=True)
                else:  # a memory count's trace file
                    folder.unlink(missing_ok=True)


OLD_SCRATCH_S = 7 * 24 * 3600  # an older profsweep's scratch (no pid to ask) untouched this long is no job's


@contextlib.contextmanager
def _inductor_cache(config: JobConfig) -> Iterator[dict[str, str]]:
    """Environment for the job: with compile_cache=fresh, private Inductor and Triton caches."""
    if config.run.compile_cache != "fresh":
        yield {}
        return
    clear_stale_scratch()
    folder = Path(tempfile.mkdtemp(prefix=f"{CACHE_PREFIX}{os.getpid()}-"))
    try:
        yield {
            "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
            "TRITON_CACHE_DIR": str(folder / "triton"),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
