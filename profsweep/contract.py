"""Names both sides of the artifact contract agree on, and what can be read from them alone."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

SWEEP_LOCK_FILE = ".profsweep.lock"  # in a sweep folder: held (flock) by the live sweep, naming its pid
TIMED = "timed_us_per_step"  # a job's un-profiled median step (metrics.json) ...
TIMED_SAMPLES = "timed_samples_us"  # ... and its samples


def timed_samples(record: dict) -> list[float]:
    """A job record's un-profiled steps (its median alone where it keeps no list of them)."""
    from profsweep.stats import clean

    found = record.get(TIMED_SAMPLES)
    return clean(found if isinstance(found, list) else [record.get(TIMED)])


def live_sweep(folder: Path) -> int | None:
    """The pid of another process's sweep that is still writing `folder` (it holds the folder's
    lock), or None: no lock file, nobody holds it, or this process holds it."""
    path = Path(folder) / SWEEP_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).decode("ascii", errors="replace").strip()
        pid = int(text) if text.isdigit() else None
        if pid == os.getpid():
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return pid or -1
        return None
    finally:
        os.close(fd)
