"""What else the machine did while a job measured: CPU time used by other processes on the CPUs
this job may run on (from /proc/stat's per-CPU lines, less this process's own), the share of time
runnable tasks of this job's cgroup waited for a CPU (Linux's pressure stall information:
cgroup v2 cpu.pressure, else /proc/pressure/cpu for the whole machine), the load average. Light
(no torch): Linux files, read where they exist; None where the machine does not say (so off
Linux no load is ever flagged).
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
    own_s: float  # this process's CPU time, all its threads, and its children's that ended (a twin)
    stalled_us: int | None  # PSI cpu "some" total: time in which a runnable task waited for a CPU


def cpu_busy_s(text: str | None = None, cpus: set[int] | None = None) -> float | None:
    """Busy CPU seconds since boot (user, nice, system, irq, softirq, steal; guest time is
    already counted in user) of the CPUs in `cpus` (their `cpuN` lines), or of all of them (the
    first line) when `cpus` is None."""
    try:
        text = PROC_STAT.read_text(encoding="ascii") if text is None else text
        total = 0
        found = False
        for line in text.splitlines():
            fields = line.split()
            if not fields or not fields[0].startswith("cpu"):
                continue
            name = fields[0]
            if (cpus is None and name != "cpu") or (cpus is not None and (name == "cpu" or int(name[3:]) not in cpus)):
                continue
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
            total += user + nice + system + irq + softirq + steal
            found = True
    except (OSError, ValueError, IndexError):
        return None
    return total / os.sysconf("SC_CLK_TCK") if found else None


def stalled_us(text: str | None = None) -> int | None:
    """The `some` total of a cpu.pressure file, in µs: this process's cgroup's where cgroup v2
    has one, else the machine's /proc/pressure/cpu."""
    try:
        text = _pressure_file().read_text(encoding="ascii") if text is None else text
        for line in text.splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_dirs(controller: str = "", root: Path = Path("/sys/fs/cgroup"),
                cgroups: Path = Path("/proc/self/cgroup")) -> list[Path]:
    """The folders that may hold this process's cgroup files: cgroup v2's (`controller` "") or a
    v1 controller's (`memory`, under root/memory), the path /proc says and each of its tails (in a
    container the cgroup mount shows only a tail of it)."""
    try:
        lines = cgroups.read_text(encoding="ascii").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            _, controllers, path = line.split(":", 2)
        except ValueError:
            continue
        if controllers == controller:
            parts = [p for p in path.split("/") if p]
            base = root / controller if controller else root
            return [base.joinpath(*parts[i:]) for i in range(len(parts) + 1)]
    return []


def _pressure_file() -> Path:
    return next((d / "cpu.pressure" for d in cgroup_dirs() if (d / "cpu.pressure").is_file()), PRESSURE)


def read() -> Reading:
    return Reading(time.monotonic(), cpu_busy_s(cpus=_allowed()), time.process_time() + _children_s(), stalled_us())


def _children_s() -> float:
    """CPU time of this process's children that ended and were waited for (0 where unknown)."""
    try:
        import resource
    except ImportError:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _allowed() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


MIN_BUSY_WINDOW_S = 0.1  # other_cpus over a shorter window is not measured (ticks of 10 ms)


def between(start: Reading, end: Reading) -> dict[str, float | None]:
    """What the machine did between two readings: `other_cpus`, the CPUs (on average, of those
    this process may use) that other processes kept busy (None over less than MIN_BUSY_WINDOW_S);
    `cpu_pressure`, the share of the time some runnable task waited for a CPU; `measured_s`, the
    window's length."""
    wall = end.wall_s - start.wall_s
    other = pressure = None
    # /proc/stat counts in clock ticks (10 ms): over a shorter window one tick reads as CPUs' worth
    if wall >= MIN_BUSY_WINDOW_S and start.busy_s is not None and end.busy_s is not None:
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
