"""The profiling session of a job, apart from what it profiles (as torchtitan's profiler wrapper):

    with ProfilingSession(config, job_dir, device, sync) as session:
        for _ in range(config.profiler.total_steps):
            run_one_step()
            session.step()
    time_unprofiled_steps()  # the process as the profiled steps left it, nothing exported yet
    session.export()         # each cycle's Chrome trace and key_averages() table, atomically

It runs torch.profiler with the configured schedule, one `profile` per cycle, and prepares each
cycle's first recorded step before the profiler opens it (the device synchronised, CUDA's peak
memory reset, the machine's counters read), so that none of the job's own work lands inside a
recorded step. The export waits for `export()`: writing a trace and building its table change
the process they run in (seen on a 2-core machine: glibc's allocator then hands a matmul_add 1024
step's buffers back to the system and refaults them, ~990 minor page faults and 1.6x the time of
every later step), and the job times its un-profiled steps before that. Imported by the job only:
it imports torch.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from experiments import records
from profsweep import machine
from experiments.config import JobConfig
from experiments.records import JobError

DISK_FULL_BELOW = 64 * 2**20  # a trace cut short with less free space than this: the disk filled
EXPORT_SCRATCH = ".export-scratch"  # in the job folder: where torch's own temporary trace file goes


class ProfilingSession:
    """torch.profiler over a job's steps. The loop calls `step()` after each step and never sees
    the profiler. `window_start` is the machine's reading just before the first recorded step
    (None until then); `cycles` holds each cycle's files and footer totals once `export()` wrote
    them."""

    def __init__(self, config: JobConfig, job_dir: Path, device: str, sync: Callable[[], None]) -> None:
        self.config, self.job_dir, self.device, self.sync = config, job_dir, device, sync
        p = config.profiler
        self.cycles: list[dict[str, Any]] = []
        self.window_start: machine.Reading | None = None
        self._cycle_steps = p.wait + p.warmup + p.active
        self._first_active = p.wait + p.warmup  # a cycle's first recorded step, counted in the cycle
        self._index = 0  # the step about to run, counted over every cycle
        self._open: Any = None  # the running cycle's torch.profiler.profile
        self._ended: list[Any] = []  # the cycles that ended, not yet exported

    def __enter__(self) -> "ProfilingSession":
        self._start_cycle()
        return self

    def step(self) -> None:
        """One step has ended: the profiler's schedule moves on (a cycle's last step ends it)."""
        self._index += 1
        if self._index % self._cycle_steps == 0:
            self._end_cycle()
            if self._index < self.config.profiler.total_steps:
                self._start_cycle()
            return
        self._before_step()
        self._open.step()  # the profiler opens the next step only now

    def __exit__(self, *exc: Any) -> Any:
        if self._open is not None:  # a step raised inside a cycle
            profiler, self._open = self._open, None
            return profiler.__exit__(*exc)
        return None

    def export(self) -> None:
        """Write each ended cycle's Chrome trace and table, and record its footer totals."""
        while self._ended:
            self.cycles.append(self._export_cycle(self._ended.pop(0), len(self.cycles) + 1))

    def _start_cycle(self) -> None:
        self._before_step()
        p = self.config.profiler
        activities = [ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._open = profile(
            activities=activities,
            schedule=schedule(wait=p.wait, warmup=p.warmup, active=p.active, repeat=1),
            record_shapes=p.record_shapes,
            with_stack=p.with_stack,
            profile_memory=p.profile_memory,
        )
        self._open.__enter__()

    def _end_cycle(self) -> None:
        """The cycle's last recorded step has ended: the profiler stops and keeps its events."""
        profiler, self._open = self._open, None
        profiler.__exit__(None, None, None)
        self._ended.append(profiler)

    def _before_step(self) -> None:
        """Before the profiler opens a cycle's first recorded step: synchronise the device; before
        the first cycle's, also reset CUDA's peak memory and read the machine's counters (the
        window the load is judged over starts here)."""
        if self._index % self._cycle_steps != self._first_active:
            return
        self.sync()
        if self.window_start is None:  # once: the peak is over every cycle's recorded steps
            if self.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            self.window_start = machine.read()

    def _export_cycle(self, prof: Any, number: int) -> dict[str, Any]:
        """One cycle's Chrome trace and key_averages() table, each written atomically."""
        config, job_dir = self.config, self.job_dir
        stem = records.artifact_stem(config)
        suffix = "" if config.profiler.repeat == 1 else f"_cycle{number}"
        ext = ".json.gz" if config.profiler.gzip else ".json"  # torch gzips a path ending in .gz
        trace = job_dir / f"{stem}{suffix}{ext}"
        table = job_dir / f"{stem}{suffix}.txt"
        partial = job_dir / f".{stem}{suffix}.partial{ext}"
        # torch writes a .gz trace through a temporary file of its own (tempfile's folder, /tmp): in
        # a folder of the job's, so that a job stopped mid-export leaves nothing outside its folder
        # and its rerun clears it
        scratch = job_dir / EXPORT_SCRATCH
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        before = tempfile.tempdir
        tempfile.tempdir = str(scratch)
        try:
            prof.export_chrome_trace(str(partial))
            if not config.profiler.gzip:
                _check_complete(partial)
            os.replace(partial, trace)
        finally:
            tempfile.tempdir = before
            shutil.rmtree(scratch, ignore_errors=True)
            partial.unlink(missing_ok=True)
            partial.with_name(f"{partial.name}.tmp").unlink(missing_ok=True)  # the profiler's own, when it failed
        events = prof.key_averages()
        sort_by = "cuda_time_total" if self.device == "cuda" else "cpu_time_total"
        records.atomic_write_text(table, events.table(sort_by=sort_by, row_limit=config.profiler.row_limit) + "\n")
        return {"trace_file": trace.name, "trace_sizes": str(trace.stat().st_size), "table_file": table.name,
                **footer_totals(events)}


def _check_complete(trace: Path) -> None:
    """The profiler writes a JSON trace without reporting a failed write: a trace that does not
    end its JSON object was cut short (by a full disk when the disk has next to nothing left)."""
    try:
        with open(trace, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64))
            tail = f.read().rstrip()
    except OSError:
        size, tail = 0, b""
    if tail.endswith(b"}"):
        return
    free = shutil.disk_usage(trace.parent).free
    written = f"the profiler wrote {size:,} bytes of {trace.name[1:].replace('.partial', '')} and stopped"
    if free < DISK_FULL_BELOW:
        raise OSError(errno.ENOSPC, f"{written}; {free:,} bytes free in {trace.parent.parent}")
    raise JobError(f"{written} ({free:,} bytes free on its disk)")


def footer_totals(events: Any) -> dict[str, float]:
    """The two totals of key_averages().table()'s footer, summed exactly as torch sums them."""
    from torch.autograd import DeviceType

    device_types = {DeviceType.CUDA}
    for name in ("PrivateUse1", "MTIA", "XPU"):
        if hasattr(DeviceType, name):
            device_types.add(getattr(DeviceType, name))
    self_cpu = self_device = 0.0
    for e in events:
        self_cpu += e.self_cpu_time_total
        if e.device_type in device_types and not getattr(e, "is_user_annotation", False):
            self_device += getattr(e, "self_device_time_total", 0.0)
    return {"self_cpu_total_us": self_cpu, "self_device_total_us": self_device}
