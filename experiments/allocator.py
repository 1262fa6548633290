"""glibc's allocator held to one way for the job's process (run.allocator=fixed, the default).

By default glibc returns a freed block of 128 KiB or more to the system (munmap), and raises that
threshold as it sees such blocks freed; whether a step's buffers then stay in the heap or are
faulted in again every step depends on the heap's layout, which anything the process did first
can change. matmul_add 1024 eager, bf16, 2 threads, this project's 2-core machine: a process takes
5.0-5.2 ms a step at 38-250 minor faults, or 6.1-6.5 ms at 508-992, by chance (2026-12-05,
docs/numbers.md); attention 256 (math), 1 thread: 18-23 ms at 2,761-6,624 faults a step in 6 of 6
fresh processes, 11.9-12.3 ms at 0-137 in 4 of 4 with the thresholds fixed.

Fixed: mallopt's M_MMAP_THRESHOLD (256 MiB) and M_TRIM_THRESHOLD (512 MiB), the setters that
MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=536870912 in the environment reach too
(either one also stops the dynamic threshold), set by the job before anything is measured and
before its twin is forked, so the twin and a forked job's own process are held alike. Blocks
below 256 MiB then come from the main thread's heap and stay there when freed (another thread's
arena holds blocks of up to its heap's 64 MiB); the heap keeps up to 512 MiB free at its top
instead of returning it. `system` leaves glibc as it is.

What the job records as its `allocator` is what its process ran with, not what was asked: `system`
where the thresholds could not be set (a C library other than glibc, a malloc that is not
glibc's, e.g. tcmalloc or jemalloc by LD_PRELOAD, or mallopt refusing), and `fixed` where an
earlier job in the same process (run.isolation=none) held them, since nothing undoes that.
"""

from __future__ import annotations

import ctypes
import functools

FIXED, SYSTEM = "fixed", "system"  # run.allocator's values
M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 << 20
TRIM_THRESHOLD = 512 << 20

_held = False  # this process's thresholds were set (by an earlier job, in run.isolation=none)


@functools.lru_cache(maxsize=1)
def _mallopt():
    """glibc's mallopt, or why there is none to use: (mallopt, None) or (None, why)."""
    try:
        process, libc = ctypes.CDLL(None), ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # no libc.so.6 (musl, macOS), no dlopen(NULL) (Windows)
        return None, "this process's C library is not glibc"
    address = ctypes.cast(process.malloc, ctypes.c_void_p).value
    if address != ctypes.cast(libc.malloc, ctypes.c_void_p).value:
        return None, "its malloc is not glibc's (an allocator loaded by LD_PRELOAD?)"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt, None


def hold(choice: str) -> tuple[str, str | None]:
    """Set this process's allocator as `choice` (a run.allocator value) says, where it can be.
    Returns what the process runs with now (FIXED or SYSTEM) and, where that is not `choice`, why
    (words for the job's warnings)."""
    global _held
    if choice != FIXED:
        if _held:
            return FIXED, ("run.allocator=system: an earlier job in this process (run.isolation=none) held "
                           "glibc's thresholds, which nothing undoes: this job ran with them (allocator fixed)")
        return SYSTEM, None
    if _held:
        return FIXED, None
    mallopt, why = _mallopt()
    if mallopt is None:
        return SYSTEM, f"run.allocator=fixed: {why}, so the allocator ran as it was (allocator system)"
    mmap_set = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    trim_set = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not (mmap_set and trim_set):
        refused = " and ".join(n for n, ok in (("the 256 MiB mmap threshold", mmap_set),
                                               ("the 512 MiB trim threshold", trim_set)) if not ok)
        return SYSTEM, f"run.allocator=fixed: glibc refused {refused} (allocator system)"
    _held = True
    return FIXED, None
