"""The profiling session of a job, apart from what it profiles (as torchtitan's profiler wrapper):

    with ProfilingSession(config, job_dir, device, sync) as session:
        for _ in range(config.profiler.total_steps):
            run_one_step()
            session.step()

It runs torch.profiler with the configured schedule, exports each cycle's Chrome trace and
key_averages() table atomically, and notes what the first recorded step starts from (the device
synchronised, CUDA's peak memory reset, the machine's counters read). Imported by the job only:
it imports torch.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from experiments import machine, records
from experiments.config import JobConfig
from experiments.records import JobError

DISK_FULL_BELOW = 64 * 2**20  # a trace cut short with less free space than this: the disk filled


class ProfilingSession:
    """torch.profiler over a job's steps. The loop calls `step()` after each step and never sees
    the profiler; `cycles` holds each exported cycle's files and footer totals, `window_start` the
    machine's reading at the first recorded step (None until then)."""

    def __init__(self, config: JobConfig, job_dir: Path, device: str, sync: Callable[[], None]) -> None:
        p = config.profiler
        self.device, self.sync = device, sync
        self.cycles: list[dict[str, Any]] = []
        self.window_start: machine.Reading | None = None
        self._first_active = p.wait + p.warmup  # the first recorded step of each cycle
        self._index = 0
        activities = [ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._profile = profile(
            activities=activities,
            schedule=schedule(wait=p.wait, warmup=p.warmup, active=p.active, repeat=p.repeat),
            on_trace_ready=_exporter(config, job_dir, device, self.cycles),
            record_shapes=p.record_shapes,
            with_stack=p.with_stack,
            profile_memory=p.profile_memory,
        )

    def __enter__(self) -> "ProfilingSession":
        self._profile.__enter__()
        self._before_step()
        return self

    def step(self) -> None:
        """One step has ended: the profiler's schedule moves on."""
        self._profile.step()
        self._index += 1
        self._before_step()

    def __exit__(self, *exc: Any) -> Any:
        return self._profile.__exit__(*exc)

    def _before_step(self) -> None:
        """The first recorded step starts from a synchronised device, with CUDA's peak memory
        reset, and the machine's counters are read: the window the load is judged over starts here."""
        if self._index != self._first_active:
            return
        self.sync()
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        if self.window_start is None:
            self.window_start = machine.read()


def _exporter(
    config: JobConfig, job_dir: Path, device: str, cycles: list[dict[str, Any]]
) -> Callable[[Any], None]:
    """on_trace_ready: write one profiler cycle's Chrome trace and table, record its totals."""
    stem = records.artifact_stem(config)
    sort_by = "cuda_time_total" if device == "cuda" else "cpu_time_total"

    def export(prof: Any) -> None:
        suffix = "" if config.profiler.repeat == 1 else f"_cycle{len(cycles) + 1}"
        ext = ".json.gz" if config.profiler.gzip else ".json"  # torch gzips a path ending in .gz
        trace = job_dir / f"{stem}{suffix}{ext}"
        table = job_dir / f"{stem}{suffix}.txt"
        partial = job_dir / f".{stem}{suffix}.partial{ext}"
        try:
            prof.export_chrome_trace(str(partial))
            if not config.profiler.gzip:
                _check_complete(partial)
            os.replace(partial, trace)
        finally:
            partial.unlink(missing_ok=True)
            partial.with_name(f"{partial.name}.tmp").unlink(missing_ok=True)  # the profiler's own, when it failed
        events = prof.key_averages()
        records.atomic_write_text(
            table, events.table(sort_by=sort_by, row_limit=config.profiler.row_limit) + "\n"
        )
        cycles.append(
            {"trace_file": trace.name, "table_file": table.name, **footer_totals(events)}
        )

    return export


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
