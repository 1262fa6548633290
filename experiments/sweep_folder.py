"""The sweep folder: where a run or sweep writes, held for its life, and what it says at the end.

    start_in(folder)   the folder made and locked (one sweep at a time), Ctrl-C's and SIGTERM's
                       handling, environment.json and expect.json written
    record_ceilings    the machine's measured ceilings (or the cache's) into environment.json
    write_plan         sweep.json: the jobs, the grid as its axes, the command
    warn_if_short_of_space   the disk estimate, before any job
    tally              the counts and failed jobs at the end, and the exit status
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments import records
from experiments.config import SWEEP_ONLY, JobConfig
from experiments.preflight import Planned, cuda_visible
from experiments.refusals import refuse
from hydra_plugins.profsweep_grid import grid
from hydra_plugins.profsweep_grid.grid import Axis
from profsweep.contract import (ENVIRONMENT_FILE, MISSING, PLAN_FILE, SWEEP_LOCK_FILE, amount, foreign, one_line,
                                read_json, read_plan)
from profsweep.sweep_state import SWEEP

EXIT_FAILED_JOBS = 1
EXIT_INTERRUPTED = 130


def start_in(folder: Path, key: str, expect: list[str]) -> None:
    """Start a run or sweep in `folder`, held by this process (`_claim`). SIGTERM stops the sweep
    like Ctrl-C (the running job is recorded, the analysis still runs); environment.json says
    where and how the sweep ran, expect.json what was expected of it."""
    from profsweep.expectations import EXPECT_FILE

    if folder.exists() and not folder.is_dir():
        refuse(f"{key}={folder} is a file, not a folder: choose another {key}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        refuse(f"{key}={folder}: cannot create this folder ({exc.strerror or exc}): "
               f"choose a {key} you can write to")
    _claim(folder, key)
    # Ctrl-C too: Python's own KeyboardInterrupt, with the stop noted first (one that lands in
    # Hydra's composition of the next job comes out as a composition error, and is a stop)
    signal.signal(signal.SIGINT, _terminate_as_interrupt)
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    signal.signal(signal.SIGHUP, _terminate_as_interrupt)  # the terminal closed
    try:
        records.write_json(folder / ENVIRONMENT_FILE, records.environment_file(sys.argv))
    except OSError as exc:
        refuse(f"{key}={folder}: cannot write into this folder ({exc.strerror or exc}): "
               f"choose a {key} you can write to")
    if expect:
        records.write_json(folder / EXPECT_FILE, {"expect": expect})


def record_ceilings(folder: Path, configs: list[JobConfig], axes: list[Axis] | None = None) -> None:
    """Before the first job: this machine's matmul and memory ceilings for each device x dtype x
    threads the sweep runs (profsweep.ceilings: the planned jobs' and every value the grid's axes
    give those keys), read from the user's cache or measured now while holding the device as a
    job would, recorded in environment.json (`ceilings`, `ceilings_mode`) for the analysis's
    roofline. Measuring is never a reason to fail a sweep: a ceiling that cannot be measured is
    said and left out (the analysis falls back to datasheet peaks). A stop while measuring stops
    the sweep before its first job, as a stop anywhere does."""
    from experiments.slots import held_slot, say_waiting, slots_for, visible_gpus
    from profsweep import ceilings

    mode = configs[0].run.ceilings if configs else "off"
    found: list[dict[str, Any]] = []
    try:
        for device, dtype, threads in _ceilings_wanted(configs, axes or []) if mode == "measure" else []:
            count: Any = threads if threads == "auto" else int(threads)
            version = ceilings.torch_version()
            ceiling = ceilings.cached(device, dtype, count, version)
            if ceiling is None:
                try:
                    slots = slots_for(device, visible_gpus() if device == "cuda" else [])
                    with held_slot(slots, holder=f"pid {os.getpid()}, sweep {folder} (ceilings)",
                                   on_wait=say_waiting(f"this machine's {device} {dtype} ceilings (measured before "
                                                       "the first job):")) as (slot, fd):
                        ceiling = ceilings.cached(device, dtype, count, version)  # another sweep's, while we waited
                        if ceiling is None:
                            ceiling = ceilings.measure(device, dtype, count, visible=None if slot == "cpu" else slot,
                                                       hold=fd, progress=lambda line: print(line, flush=True))
                            ceilings.remember(ceiling, count)
                            print(f"  {ceiling.line()} in {ceiling.seconds:.1f} s", flush=True)
                except ceilings.CeilingError as exc:
                    print(f"warning: {exc}; the roofline leaves this ceiling out", flush=True)
                    continue
            elif stale := ceiling.stale():
                print(f"note: this machine's cached {device} {dtype} ceiling (threads {threads}) was "
                      f"{stale}; python -m analysis calibrate --device {device} --dtype {dtype} "
                      f"--threads {threads} measures it again", flush=True)
            found.append({**asdict(ceiling), "threads_setting": threads})
    except KeyboardInterrupt:
        SWEEP.stop()  # the measuring processes are gone (profsweep.ceilings.measure); no job starts
    path = folder / ENVIRONMENT_FILE
    try:
        environment = read_json(path)
        records.write_json(path, {**environment, "ceilings_mode": mode, "ceilings": found})
    except (OSError, ValueError) as exc:
        print(f"warning: the ceilings were not recorded in {path}: {exc}", flush=True)


def _ceilings_wanted(configs: list[JobConfig], axes: list[Axis]) -> list[tuple[str, str, str]]:
    """(device, dtype, threads) of every job: the planned ones' values (preflight plans each
    grid point by the first value of a plain key) and every value the axes give those keys."""
    values: dict[str, set[str]] = {
        "device": {str(c.device) for c in configs}, "dtype": {str(c.dtype) for c in configs},
        "run.threads": {str(c.run.threads) for c in configs},
    }
    for axis in axes:
        key = axis.key.lstrip("+~")
        if key in values:
            values[key] |= {str(v) for v in axis.values}
    cuda = any(d in ("cuda", "auto") for d in values["device"]) and cuda_visible()
    devices = {"cuda" if d == "cuda" or (d == "auto" and cuda) else "cpu" for d in values["device"]}
    if not cuda:
        devices.discard("cuda")  # grid points this machine skips (run.unavailable=skip)
    return sorted((d, t, n) for d in devices for t in values["dtype"] for n in values["run.threads"])


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    """Ctrl-C, SIGTERM or SIGHUP stops the sweep as Python's Ctrl-C does. The stop is noted first: a signal that
    lands while Python runs a finalizer (a weakref callback during garbage collection) has its
    KeyboardInterrupt printed and dropped there, and the sweeper must still start no more jobs."""
    SWEEP.stop()
    raise KeyboardInterrupt(f"signal {signum}")


def defer_stops() -> None:
    """Once the jobs are done (or stopped), a stop must not cost the analysis of what finished: from
    here Ctrl-C, SIGTERM and SIGHUP are noted (the tally then says `interrupted` and exits 130)
    and the analysis goes on; a second one abandons it."""
    def note(signum: int, frame: Any) -> None:
        if SWEEP.stop_noted:
            raise KeyboardInterrupt(f"signal {signum}")
        SWEEP.stop()
        SWEEP.stop_noted = True
        print("stopping: analysing what finished first (stop again to abandon the analysis)",
              file=sys.stderr, flush=True)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(signum, note)
        except ValueError:  # not the main thread (a sweep run from a thread): nothing to defer
            return


LOCK_FILE = SWEEP_LOCK_FILE
_claimed: list[Any] = []  # the open lock files of this process's sweep folders


def _claim(folder: Path, key: str) -> None:
    """Hold the folder for the life of this process (a flock the OS drops when it dies, however
    it dies), so that two sweeps never write into one folder at once; the lock file names the
    holder's pid for the refusal."""
    try:
        handle = open(folder / LOCK_FILE, "a+", encoding="ascii")
    except OSError as exc:
        refuse(f"{key}={folder}: cannot write into this folder ({exc.strerror or exc}): "
               f"choose a {key} you can write to")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        refuse(f"{key}={folder} is in use by another sweep that is still running (pid {holder}): "
               f"wait for it to end or stop it, or choose another {key}")
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _claimed.append(handle)


# The keys a job's folder is named by (conf/config.yaml: hydra.sweep.subdir), and the preset that sets them.
FOLDER_KEYS = ("workload", "size", "dtype", "warmup", "compile", "train", "experiment")


def refuse_what_is_no_sweep(sweep_dir: Path) -> None:
    """A job's own folder, or a folder of another tool's records, is refused as a sweep's: the new
    jobs would nest inside the old one, whose record the analysis then reported as the new
    sweep's (exit 0); another tool's runs would be tallied as failed jobs of it."""
    if (sweep_dir / records.METRICS_FILE).is_file():
        refuse(f"hydra.sweep.dir={sweep_dir} is one job's or run's folder (it holds {records.METRICS_FILE}), not a "
               "sweep's: choose a new folder, or the sweep folder above it to resume that sweep")
    wrong = foreign(sweep_dir)
    if wrong is not None:
        refuse(f"hydra.sweep.dir={sweep_dir} {wrong}: choose another hydra.sweep.dir")


def refuse_another_grid(sweep_dir: Path, axes: list[Axis]) -> None:
    """A folder that holds a sweep of another grid is refused: its jobs and the new ones would
    share job numbers and one sweep.json, the analysis would read them as one sweep. The same
    grid is a resume (jobs already ok are skipped)."""
    shown = read_plan(sweep_dir).get("axes")
    if not isinstance(shown, list):
        return

    def grid_keys(found: list[Any]) -> tuple[list[Any], set[str]]:
        """The swept keys in order (they number the jobs) and, as a set, the one-value overrides of the
        keys that name the job folders (conf/config.yaml's subdir): another value of any other key
        (profiler.active=2, run.threads=1) is the same grid in the same folders, its jobs redone;
        how the sweep runs (Hydra's, run.repeats, expect, ...) may change too."""
        kept = [a for a in found if isinstance(a, dict) and not str(a.get("key")).lstrip("+").startswith(
            ("hydra.", "hydra/", "expect", *(f"run.{k}" for k in (*SWEEP_ONLY, "job_timeout_s"))))]
        swept = [a for a in kept if len(a.get("overrides") or []) > 1]
        named = {str(o) for a in kept if len(a.get("overrides") or []) <= 1
                 and str(a.get("key")).lstrip("+") in FOLDER_KEYS for o in a.get("overrides") or []}
        return swept, named

    def said(found: list[Any]) -> str:  # size=16,64 dtype=fp32
        return " ".join(f"{a.get('key')}=" + ",".join(str(o).partition("=")[2] for o in a.get("overrides") or [])
                        for a in found if isinstance(a, dict)) or "(no swept key)"

    now = _axes_json(axes)
    if grid_keys(shown) != grid_keys(now):
        refuse(f"hydra.sweep.dir={sweep_dir} holds a sweep of another grid ({said(shown)}), not of this one "
               f"({said(now)}): rerun its own command to finish it, or choose another hydra.sweep.dir")


def _axes_json(axes: list[Axis]) -> list[dict[str, Any]]:
    """The grid's axes as sweep.json holds them."""
    return [{"key": axis.key, "overrides": list(axis.strings)} for axis in axes]


def _dir_key(folder: Path) -> str:
    """The override that names this folder on a command line: a sweep's (it has sweep.json) or a
    single run's."""
    return "hydra.sweep.dir" if (folder / PLAN_FILE).is_file() else "hydra.run.dir"


def write_plan(sweep_dir: Path, axes: list[Axis], run: Any, compiles: bool = False) -> None:
    """sweep.json, the grid as its axes (job i is the i-th of their product, the last axis fastest),
    and the sweep's first progress line: how many jobs, into which folder; where jobs compile, each
    in a cache of its own, what that costs and the setting that shares one."""
    points = grid.size(axes)
    repeats = run.repeats
    total = points * grid.first_rounds(repeats)
    now = records.now_iso()
    first = read_plan(sweep_dir).get("created_at")  # a resumed sweep keeps its first start (history's key)
    records.write_json(
        sweep_dir / PLAN_FILE,
        {"jobs": total, "grid_points": points, "repeats": repeats,
         "axes": _axes_json(axes),
         "command": sys.argv, "created_at": first if isinstance(first, str) and first else now,
         **({"resumed_at": now} if isinstance(first, str) and first else {})},
    )
    each = ("" if repeats == 1 else f" ({amount(points, 'grid point')} × {repeats} repeats)" if repeats != "auto"
            else f" ({amount(points, 'grid point')} × {grid.AUTO_ROUNDS} rounds, then more where the interval "
                 f"is wider than ±{run.precision * 100:g}%"
                 f"{' or compile against eager is undecided' if grid.Pairs(axes) else ''}, up to {run.max_repeats})")
    print(f"sweep of {amount(total, 'job')}{each} -> {sweep_dir}", flush=True)
    if run.isolation == "none" and repeats != 1:
        print(f"warning: run.isolation=none runs every repeat in this one process (run.repeats={repeats}): they are "
              "not independent processes, so intervals over them are too narrow; run.repeats=1 with run=fast, or "
              "run=isolated for repeats", flush=True)
    if compiles and run.compile_cache == "fresh" and run.isolation == "process":
        print("compiled jobs compile cold, each in a fresh Inductor cache as a new process would: their first "
              "call takes a second (one matmul) to tens of seconds (a model); run.compile_cache=shared reuses "
              "one cache when only the steady state matters", flush=True)


# What a job writes, measured with du -sk on job folders of size=64 jobs on the CPU (torch 2.x):
#                         profiler.active=3   active=20
#   matmul_add eager            44 kB           80 kB
#   matmul_add compiled         48 kB          100 kB
#   mlp eager                   60 kB          176 kB
#   mlp compiled                52 kB          124 kB
#   mlp eager, profiler=detailed   176 kB          892 kB   (record_shapes, with_stack, profile_memory)
#   the same, profiler.gzip=true     44 kB           88 kB   (traces: 143 kB -> 11 kB, 880 kB -> 54 kB)
# So about 40 kB a job (.hydra, metrics, table, logs) and up to 7 kB a profiled step; with_stack
# and record_shapes make a step about 6 times bigger (42 kB); gzip makes the trace 12-16 times
# smaller. A CUDA trace adds a launch and a kernel event per op (not measured here: counted as
# twice the events).
JOB_FIXED_BYTES = 40_000
STEP_BYTES = 7_000
STACK_FACTOR = 6
GZIP_FACTOR = 10  # rounded down: a rough estimate that errs on the large side


def estimated_job_bytes(config: JobConfig, cuda: bool) -> int:
    p = config.profiler
    step = STEP_BYTES * (2 if cuda else 1) * (STACK_FACTOR if p.with_stack or p.record_shapes else 1)
    return int(JOB_FIXED_BYTES + p.active * p.repeat * step / (GZIP_FACTOR if p.gzip else 1))


def warn_if_short_of_space(folder: Path, key: str, planned: list[Planned]) -> None:
    """A warning (not a refusal: the estimate is rough) when the sweep folder's disk has less
    free space than the jobs may write: every process of every grid point (run.repeats, or
    run.repeats=auto's first rounds)."""
    if not planned:
        return
    processes = grid.first_rounds(planned[0].config.run.repeats)
    jobs = sum(p.jobs for p in planned) * processes
    if not jobs:
        return
    cuda = any(p.config.device == "cuda" for p in planned) or (
        any(p.config.device == "auto" for p in planned) and cuda_visible())
    total = processes * sum(p.jobs * estimated_job_bytes(p.config, cuda and p.config.device != "cpu") for p in planned)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return
    if free >= total:
        return
    gzip = "" if all(p.config.profiler.gzip for p in planned) else (
        "; profiler.gzip=true writes traces several times smaller")
    print(f"warning: {key}={folder} has {_bytes(free)} free; this sweep of {amount(jobs, 'job')} "
          f"may write about {_bytes(total)} "
          f"(about {_bytes(total // jobs)} a job{gzip})", file=sys.stderr, flush=True)


def _bytes(n: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "bytes" or n >= 10 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"

def _not_run(folder: Path) -> list[str]:
    """The errors of the grid points whose later repeats the sweeper did not run (sweep.json)."""
    found = read_plan(folder).get("not_run")
    return [str(item.get("error")) for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def tally(job_dirs: list[Path], folder: Path, expected: int | None) -> None:
    """Print counts and failed jobs from the metrics.json files; exit 1 when any job failed or lost its
    un-profiled timing (`timed_error`: the analysis names it a problem too, and a rerun redoes it)."""
    failed: list[tuple[str, str]] = []
    untimed: list[tuple[str, str]] = []  # ok, without the un-profiled timing (analysis names it a problem too)
    unstarted: list[Path] = []  # a folder without a record after a stop (a single run's folder stays)
    ok = skipped = 0
    for job_dir in job_dirs:
        try:
            record = read_json(job_dir / records.METRICS_FILE)
        except FileNotFoundError:
            if SWEEP.stopped and not SWEEP.disk_error:  # a stop caught it waiting for its device: never started
                unstarted.append(job_dir)
                continue
            failed.append((job_dir.name, f"no {records.METRICS_FILE}: " + (
                f"it could not be written ({SWEEP.disk_error})" if SWEEP.disk_error else "the job wrote none")))
            continue
        except (OSError, ValueError) as exc:
            failed.append((job_dir.name, f"unreadable {records.METRICS_FILE}: {exc}"))
            continue
        if not isinstance(record, dict):
            failed.append((job_dir.name, f"unreadable {records.METRICS_FILE}: not a JSON object"))
            continue
        if record.get("status") == "ok":
            ok += 1
            if record.get("timed_error"):
                untimed.append((job_dir.name, str(record["timed_error"])))
        elif record.get("status") == "skipped":
            skipped += 1
        else:
            failed.append((job_dir.name, str(record.get("error"))))
    missing = max(0, (expected or 0) - len(job_dirs))
    job_dirs = [d for d in job_dirs if d not in unstarted]
    counts = (f"{ok} ok, {len(failed)} failed" + (f", {skipped} skipped" if skipped else "")
              + (f", {len(unstarted)} not started" if unstarted else "")
              + (f", {missing} missing" if missing else "")
              + (f"; {SWEEP.resumed} of them already ok, not run again (resume)" if SWEEP.resumed else ""))
    print(f"done: {amount(len(job_dirs), 'job')} ({counts}) in {folder}", flush=True)
    for name, error in failed:
        print(f"  failed: {name}: {one_line(error)}", flush=True)
    for name, error in untimed:
        print(f"  no un-profiled timing: {name}: {one_line(error)}", flush=True)
    if untimed:
        print(f"  a grid point's step time then comes from its other processes, where it has any, else from its "
              f"profiled steps; rerun the same command into the same folder to redo {'it' if len(untimed) == 1 else 'them'} "
              f"({_dir_key(folder)}={folder}; a timing process that ran out of memory will again)", flush=True)
    settled = _not_run(folder)
    if settled:
        more = f"; and {len(settled) - 1} more" if len(settled) > 1 else ""
        print(f"  not run: the later repeats of {amount(len(settled), 'grid point')} whose "
              "first process failed for a reason no other process can change (the factory's return value, a "
              f"refused setting, more memory than the device has): {settled[0]}{more}", flush=True)
    # what the analysis found beyond the records (a trace cut short or unreadable, a record it could
    # not use): named as `python -m analysis` names it, and the sweep fails as it does
    said = {name for name, _ in failed + untimed}
    found = [(job, what) for job, what in SWEEP.analysis_problems if job not in said and job != "sweep"]
    for job, what in found:
        print(f"  problem: {job}: {one_line(what)}", flush=True)
    # a job folder without a record (stopped before it wrote one) is redone by a rerun as it is
    kept = [(job, what) for job, what in found if not what.startswith(f"{MISSING}: ")]
    if kept:
        print(f"  to redo {'it' if len(kept) == 1 else 'them'}: remove {'its folder' if len(kept) == 1 else 'their folders'} "
              f"and rerun the same command into the same folder ({_dir_key(folder)}={folder})", flush=True)
    for why in SWEEP.analysis_failed:
        print(f"not analysed: {why}", flush=True)
    if SWEEP.disk_error:
        print(f"stopped: {SWEEP.disk_error}\n  free some space in {folder}'s disk, then rerun the "
              f"same command into the same folder to finish ({_dir_key(folder)}={folder}); jobs already ok "
              "are skipped", flush=True)
        raise SystemExit(EXIT_FAILED_JOBS)
    if SWEEP.compose_error:
        print(f"stopped: {SWEEP.compose_error}", flush=True)
        raise SystemExit(EXIT_FAILED_JOBS)
    if SWEEP.stopped or SWEEP.analysis_interrupted:
        print("interrupted: rerun the same command into the same folder to finish "
              f"({_dir_key(folder)}={folder}); jobs already ok are skipped", flush=True)
        raise SystemExit(EXIT_INTERRUPTED)
    if skipped and not ok and not failed:  # run.unavailable=skip left out the whole grid
        print(f"nothing measured: every job was skipped on this machine (run.unavailable=skip; "
              f"{_skip_reason(job_dirs)}): run the sweep where its settings can run, or change them", flush=True)
    if failed or untimed or missing or found or SWEEP.analysis_failed or (skipped and not ok):
        raise SystemExit(EXIT_FAILED_JOBS)


def _skip_reason(job_dirs: list[Path]) -> str:
    """The first skipped job's reason, as its record gives it."""
    for job_dir in job_dirs:
        try:
            record = read_json(job_dir / records.METRICS_FILE)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("status") == "skipped" and record.get("error"):
            return one_line(str(record["error"]))
    return "no reason recorded"
