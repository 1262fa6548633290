"""One profiling job per device at a time, across every process of every sweep on this machine.

Each job holds an exclusive lock on a device slot while it runs: one slot per visible GPU, or a
single CPU slot. With the sequential launcher a slot is always free; with parallel launchers
(joblib, submitit_local) jobs spread over the GPUs and wait when all are taken, so profiling
jobs never share a device. Locks are flock()s on files in the machine's temp folder: the OS
drops them when a process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

from experiments.records import gpu_inventory

CPU_SLOT = "cpu"


def lock_folder() -> Path:
    return Path(tempfile.gettempdir()) / "profsweep-device-locks"


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
              on_wait: Callable[[list[str]], None] | None = None) -> Iterator[tuple[str, int]]:
    """As device_slot, yielding (name, fd of the locked file). A job process that inherits the
    fd holds the slot too: the lock is released only once every holder has closed it or died.
    `on_wait(slots)` is called once when every slot is taken."""
    folder = folder or lock_folder()
    folder.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    told = False
    while True:
        for slot in slots:
            handle = open(folder / f"{slot}.lock", "a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield slot, handle.fileno()
            finally:
                handle.close()  # not LOCK_UN: that would free the slot of a job still holding it
            return
        if on_wait is not None and not told:
            on_wait(slots)
            told = True
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no free device among {', '.join(slots)} after {timeout_s} s")
        time.sleep(poll_s)
