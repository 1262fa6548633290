"""glibc's allocator held to one way for the job's process (run.allocator=steady, the default).

By default glibc returns a freed block of 128 KiB or more to the system (munmap), and raises that
threshold as it sees such blocks freed, up to 32 MiB (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), its
trim threshold to twice that; whether a step's buffers then stay in the heap or are faulted in
again every step depends on the heap's layout, which anything the process did first can change.
matmul_add 1024 eager, bf16, 2 threads, this project's 2-core machine: a process takes 5.0-5.2 ms
a step at 38-250 minor faults, or 6.1-6.5 ms at 508-992, by chance (2026-12-05, docs/numbers.md);
attention 256 (math), 1 thread: 18-23 ms at 2,761-6,624 faults a step in 6 of 6 fresh processes,
11.9-12.3 ms at 0-137 in 4 of 4 with the thresholds held.

Held, by mallopt's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD (the setters that MALLOC_MMAP_THRESHOLD_
and MALLOC_TRIM_THRESHOLD_ in the environment reach too; either one also stops the dynamic
threshold), set by the job before anything is measured and before its twin is forked, so the twin
and a forked job's own process are held alike:

- `steady` (32 MiB, 64 MiB): where glibc's dynamic thresholds end up in a plain process once it
  has freed a block of 32 MiB or more, held from the first step. A process whose blocks stay
  smaller keeps lower thresholds and may fault a step's memory in every step: a small CNN took
  2.14-2.34 ms at 681-960 faults a step in a plain script, 1.40-1.49 ms held (docs/numbers.md). Blocks below 32 MiB come from the heap and stay there when
  freed, in every process; blocks of 32 MiB or more are mapped and faulted in on every step, as
  in every plain process (glibc never raises its threshold past them). matmul_add 4096 bf16 (two
  32 MiB buffers a step): 64-71 ms at 16,386 faults a step, as a plain process timed by
  torch.utils.benchmark (57-69 ms); at 1024, 1.47-1.63 ms at 4-13 faults in 4 of 4 processes,
  where `system` gave 1.49-1.52 ms in 2 and 2.63-2.87 ms in 2 (2026-12-06).
- `fixed` (256 MiB, 512 MiB): blocks below 256 MiB stay in the heap, those of 32-256 MiB too,
  which no plain process keeps: matmul_add 4096 then takes 47-48 ms, 1.4x faster than a plain
  process. For a steady state no plain process reaches (a job warns where its step allocates such
  blocks); the default before 2026-12-06.
- `system` leaves glibc as it is.

What the job records as its `allocator` is what its process ran with, not what was asked: `system`
where the thresholds could not be set (a C library other than glibc, a malloc that is not
glibc's, e.g. tcmalloc or jemalloc by LD_PRELOAD, or mallopt refusing), and the thresholds an
earlier job in the same process (run.isolation=none) held, since nothing undoes them.
"""

from __future__ import annotations

import ctypes
import functools

FIXED, STEADY, SYSTEM = "fixed", "steady", "system"  # run.allocator's values
M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 << 20  # fixed's
TRIM_THRESHOLD = 512 << 20
GLIBC_MMAP_MAX = 32 << 20  # glibc's largest dynamic mmap threshold (64-bit): steady's
THRESHOLDS = {FIXED: (MMAP_THRESHOLD, TRIM_THRESHOLD), STEADY: (GLIBC_MMAP_MAX, 2 * GLIBC_MMAP_MAX)}

_held: str | None = None  # the thresholds this process holds (set by an earlier job, in run.isolation=none)


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
    Returns what the process runs with now (FIXED, STEADY or SYSTEM) and, where that is not
    `choice`, why (words for the job's warnings)."""
    global _held
    if choice not in THRESHOLDS:
        if _held:
            return _held, (f"run.allocator={choice}: an earlier job in this process (run.isolation=none) held "
                           f"glibc's thresholds, which nothing undoes: this job ran with them (allocator {_held})")
        return SYSTEM, None
    if _held == choice:
        return choice, None
    mallopt, why = _mallopt()
    if mallopt is None:
        return SYSTEM, f"run.allocator={choice}: {why}, so the allocator ran as it was (allocator system)"
    mmap, trim = THRESHOLDS[choice]
    mmap_set = mallopt(M_MMAP_THRESHOLD, mmap) == 1
    trim_set = mallopt(M_TRIM_THRESHOLD, trim) == 1
    if not (mmap_set and trim_set):
        refused = " and ".join(n for n, ok in ((f"the {mmap >> 20} MiB mmap threshold", mmap_set),
                                               (f"the {trim >> 20} MiB trim threshold", trim_set)) if not ok)
        return _held or SYSTEM, f"run.allocator={choice}: glibc refused {refused} (allocator {_held or SYSTEM})"
    _held = choice
    return choice, None
