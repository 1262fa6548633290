"""One profiling job per device at a time, across every process of every sweep on this machine.

Each job holds an exclusive lock on a device slot while it runs: one slot per visible GPU, or a
single CPU slot. With the sequential launcher a slot is always free; with parallel launchers
(joblib, submitit_local) jobs spread over the GPUs and wait when all are taken, so profiling
jobs never share a device. Locks are flock()s on files in one machine-wide folder that no
per-user or per-process temp variable moves (TMPDIR, systemd's PrivateTmp): /dev/shm, else
/run/lock, else /tmp, shared by every user (the folder is world-writable and sticky, the lock
files readable and writable by all); PROFSWEEP_LOCK_DIR names another for those who want
separate locks. The OS drops a lock when its process dies. The holder writes its pid and sweep
folder into the file, so a sweep that waits says who it waits for.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from experiments.records import gpu_inventory
from profsweep.contract import alive
from profsweep.progress import duration

CPU_SLOT = "cpu"
LOCK_DIR_ENV = "PROFSWEEP_LOCK_DIR"
LOCK_BASES = ("/dev/shm", "/run/lock", "/tmp")  # machine-wide, whatever TMPDIR says
TELL_EVERY_S = 30.0


def lock_folder() -> Path:
    chosen = os.environ.get(LOCK_DIR_ENV)
    if chosen:
        return Path(chosen)
    for base in LOCK_BASES:
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return Path(base) / "profsweep-device-locks"
    return Path(tempfile.gettempdir()) / "profsweep-device-locks"


def _shared_folder(folder: Path) -> None:
    """Create the lock folder for every user of the machine (sticky and world-writable, as /tmp)."""
    if folder.is_dir():
        return
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(folder, 0o1777)
    except OSError:  # another user's folder, or a file system without modes: use it as it is
        pass


def _open_lock(path: Path) -> tuple[int, bool]:
    """(fd, writable) of a slot's lock file, created readable and writable by every user; another
    user's file we may not write is opened read-only (flock needs no more)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY), False
    try:
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o666)
    except OSError:
        pass
    return fd, True


def holder_of(folder: Path, slot: str) -> str:
    """What the slot's lock file says of its holder (`pid 123, sweep outputs/...`), or '' where
    it says nothing that can be true: no pid, this process (which waits, so holds nothing), or
    a pid no longer alive (a holder that left its name and died; the lock itself is another's,
    say a `flock` of the file by a program that writes none)."""
    try:
        text = (folder / f"{slot}.lock").read_text(encoding="utf-8", errors="replace").strip()[:300]
    except OSError:
        return ""
    said = re.match(r"pid (\d+)\b", text)
    if said is None or int(said.group(1)) == os.getpid() or not alive(int(said.group(1))):
        return ""
    return text


def say_waiting(tag: str) -> Callable[[list[str], list[str], float], None]:
    """held_slot's `on_wait` that prints `TAG waiting for the CPU (one job per device), held by
    WHO: 30 s so far`: a sweep that waits says so, and for whom."""

    def waiting(slots: list[str], holders: list[str], waited: float) -> None:
        device = "the CPU" if slots == [CPU_SLOT] else "GPU " + ", ".join(slots)
        who = "; ".join(h for h in holders if h) or "another process on this machine"
        print(f"{tag} waiting for {device} (one job per device), held by {who}"
              + (f": {duration(waited)} so far" if waited >= 1 else ""), flush=True)

    return waiting


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi lists."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        # CUDA stops at the first invalid entry ("-1" hides every GPU).
        out = []
        for v in ids:
            if v.startswith("-"):
                break
            out.append(v)
        return out
    return [gpu["index"] for gpu in gpu_inventory()]


def slots_for(device: str, gpus: list[str]) -> list[str]:
    """The slots a job may take: GPUs for a CUDA job (device cuda, or auto with GPUs), else the CPU."""
    if device == "cpu" or not gpus:
        return [CPU_SLOT]
    return gpus


@contextlib.contextmanager
def device_slot(slots: list[str], folder: Path | None = None, poll_s: float = 0.2,
                timeout_s: float | None = None) -> Iterator[str]:
    """Hold the first free slot of `slots` (exclusive across processes) and yield its name."""
    with held_slot(slots, folder, poll_s, timeout_s) as (slot, _):
        yield slot


@contextlib.contextmanager
def held_slot(slots: list[str], folder: Path | None = None, poll_s: float = 0.2,
              timeout_s: float | None = None,
              on_wait: Callable[[list[str], list[str], float], None] | None = None,
              holder: str = "") -> Iterator[tuple[str, int]]:
    """As device_slot, yielding (name, fd of the locked file). A job process that inherits the
    fd holds the slot too: the lock is released only once every holder has closed it or died.
    `holder` (who this is: `pid N, sweep FOLDER`) is written into the file once it is held.
    `on_wait(slots, their holders, seconds waited)` is called when every slot is taken, and
    again every 30 s while they stay taken."""
    folder = folder or lock_folder()
    _shared_folder(folder)
    start = time.monotonic()
    deadline = None if timeout_s is None else start + timeout_s
    next_tell = start
    while True:
        for slot in slots:
            fd, writable = _open_lock(folder / f"{slot}.lock")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if writable and holder:
                try:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{holder}\n".encode(), 0)
                except OSError:
                    pass
            try:
                yield slot, fd
            finally:
                if writable and holder:  # its name goes with it: a next holder that writes none is not this one
                    try:
                        os.ftruncate(fd, 0)
                    except OSError:
                        pass
                os.close(fd)  # not LOCK_UN: that would free the slot of a job still holding it
            return
        now = time.monotonic()
        if on_wait is not None and now >= next_tell:
            on_wait(slots, [holder_of(folder, s) for s in slots], now - start)
            next_tell = now + TELL_EVERY_S
        if deadline is not None and now > deadline:
            raise TimeoutError(f"no free device among {', '.join(slots)} after {timeout_s} s")
        time.sleep(poll_s)
