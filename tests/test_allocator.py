"""run.allocator=fixed holds glibc's thresholds in the job's process: checked by the kernel's own
count of minor page faults, not by a timing."""

import subprocess
import sys

import pytest

from experiments import allocator
from experiments.config import ConfigError, RunConfig

# A 64 MiB block malloc'ed, written and freed, 20 times: above glibc's default mmap threshold
# (128 KiB, raised at most to 32 MiB) it is mapped and unmapped every time, 16,384 pages faulted in
# again each; held in the heap, none.
LOOP = r"""
import ctypes, resource, sys
from experiments import allocator
warning = allocator.hold(sys.argv[1])
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
size = 64 << 20
def once():
    p = libc.malloc(size)
    libc.memset(p, 1, size)
    libc.free(p)
once()
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    once()
print(warning, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 20)
"""


def _faults_per_loop(choice: str) -> tuple[str, float]:
    done = subprocess.run([sys.executable, "-c", LOOP, choice], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."})
    warning, faults = done.stdout.split()
    return warning, float(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux") or allocator._mallopt() is None,
                    reason="glibc's mallopt (Linux)")
def test_fixed_keeps_a_freed_block_in_the_heap_where_the_system_unmaps_it():
    warning, faults = _faults_per_loop("fixed")
    assert warning == "None" and faults < 100  # reused: no page of it faulted again
    warning, faults = _faults_per_loop("system")
    assert warning == "None" and faults >= 16_000  # 64 MiB / 4 KiB pages = 16,384, faulted in each time


def test_the_choice_is_checked():
    assert RunConfig().allocator == "fixed"
    with pytest.raises(ConfigError, match=r"run.allocator='glibc' is not allowed.*fixed.*system"):
        RunConfig(allocator="glibc")
