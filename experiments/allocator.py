"""glibc's allocator held to one way for the job's process (run.allocator=fixed, the default).

By default glibc returns a freed block of 128 KiB or more to the system (munmap), and raises that
threshold as it sees such blocks freed; whether a step's buffers then stay in the heap or are
faulted in again every step depends on the heap's layout, which anything the process did first
can change. matmul_add 1024 eager, bf16, 2 threads, this project's 2-core machine: a process takes
5.0-5.2 ms a step at ~250 minor faults, or 6.1-6.5 ms at ~990, by chance (2026-12-05,
docs/numbers.md); attention 256 (math), 1 thread: 18-23 ms at 2,761-6,624 faults a step in 6 of 6
fresh processes, 11.9-12.3 ms at 0-137 in 4 of 4 with the thresholds fixed.

Fixed: blocks below 256 MiB come from the heap, and the heap keeps up to 512 MiB free at its top,
so a step that frees and allocates the same buffers reuses them in every process. It is what
MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=536870912 in the environment does (the
same glibc setters, mallopt's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, which also stop the dynamic
threshold), set by the job before anything is measured and before its twin is forked, so the
twin and a forked job's own process are held alike. The cost: a process keeps up to 512 MiB
freed memory instead of returning it. `system` leaves glibc as it is; a C library without
mallopt (musl, macOS) is left as it is, and the job says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

FIXED = "fixed"  # one of experiments.config.ALLOCATORS
M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 << 20
TRIM_THRESHOLD = 512 << 20


@functools.lru_cache(maxsize=1)
def _mallopt():
    """glibc's mallopt, or None where this process's C library has none."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def hold(choice: str) -> str | None:
    """Set this process's allocator as `choice` says (a run.allocator value). Returns None when it
    holds, else why not, in words for the job's warnings."""
    if choice != FIXED:
        return None
    mallopt = _mallopt()
    if mallopt is None:
        return ("run.allocator=fixed: this process's C library has no mallopt (not glibc), so its "
                "allocator ran as the system's")
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return ("run.allocator=fixed: glibc refused mallopt's thresholds (256 MiB mmap, 512 MiB trim), "
                "so its allocator ran as the system's")
    return None
