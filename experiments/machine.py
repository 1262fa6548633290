"""What else the machine did while a job measured: CPU time used by other processes (from
/proc/stat, less this process's own), the share of time runnable tasks waited for a CPU (Linux's
pressure stall information), the load average. Light (no torch): Linux files, read where they
exist; None where the machine does not say.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
PRESSURE = Path("/proc/pressure/cpu")
LOADAVG = Path("/proc/loadavg")


@dataclass(frozen=True)
class Reading:
    wall_s: float  # monotonic clock
    busy_s: float | None  # CPU time of every process on every CPU since boot (/proc/stat)
    own_s: float  # this process's CPU time, all its threads
    stalled_us: int | None  # PSI cpu "some" total: time in which a runnable task waited for a CPU


def cpu_busy_s(text: str | None = None) -> float | None:
    """Busy CPU seconds of the whole machine from /proc/stat's first line (user, nice, system,
    irq, softirq, steal; guest time is already counted in user)."""
    try:
        text = PROC_STAT.read_text(encoding="ascii") if text is None else text
        fields = text.split("\n", 1)[0].split()
        if fields[0] != "cpu":
            return None
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    except (OSError, ValueError, IndexError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def stalled_us(text: str | None = None) -> int | None:
    """The `some` total of /proc/pressure/cpu, in µs."""
    try:
        text = PRESSURE.read_text(encoding="ascii") if text is None else text
        for line in text.splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def read() -> Reading:
    return Reading(time.monotonic(), cpu_busy_s(), time.process_time(), stalled_us())


def between(start: Reading, end: Reading) -> dict[str, float | None]:
    """What the machine did between two readings: `other_cpus`, the CPUs (on average) that other
    processes kept busy; `cpu_pressure`, the share of the time some runnable task waited for a
    CPU; `measured_s`, the window's length."""
    wall = end.wall_s - start.wall_s
    other = pressure = None
    if wall > 0 and start.busy_s is not None and end.busy_s is not None:
        other = max(0.0, (end.busy_s - start.busy_s - (end.own_s - start.own_s)) / wall)
    if wall > 0 and start.stalled_us is not None and end.stalled_us is not None:
        pressure = min(1.0, max(0.0, (end.stalled_us - start.stalled_us) / 1e6 / wall))
    return {"other_cpus": other, "cpu_pressure": pressure, "measured_s": wall}


def loadavg() -> float | None:
    """The one-minute load average."""
    try:
        return float(LOADAVG.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
