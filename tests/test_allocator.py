"""run.allocator=steady (and fixed) hold glibc's thresholds in the job's process: checked by the
kernel's own count of minor page faults, not by a timing; and the record says what the process ran
with."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import allocator
from experiments.config import ConfigError, RunConfig

ROOT = Path(__file__).resolve().parent.parent
# A 64 MiB block malloc'ed, written and freed, 20 times, transparent huge pages off for the process
# (prctl PR_SET_THP_DISABLE): above glibc's default mmap threshold (128 KiB, raised at most to 32
# MiB) it is mapped and unmapped every time, each of its pages faulted in again; held in the heap,
# none. Each job `hold`s in turn, as jobs of one process (run.isolation=none) would.
LOOP = r"""
import ctypes, json, resource, sys
from experiments import allocator
libc = ctypes.CDLL(None)
libc.prctl(41, 1, 0, 0, 0)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
size = int(sys.argv[1]) << 20
def once():
    p = libc.malloc(size)
    libc.memset(p, 1, size)
    libc.free(p)
found = []
for choice in sys.argv[2:]:
    held, why = allocator.hold(choice)
    once()
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        once()
    found.append([held, why, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 20])
print(json.dumps({"page": resource.getpagesize(), "jobs": found}))
"""


def _jobs(*choices: str, mib: int = 64) -> tuple[int, list]:
    done = subprocess.run([sys.executable, "-c", LOOP, str(mib), *choices], capture_output=True, text=True, check=True,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    found = json.loads(done.stdout)
    return found["page"], found["jobs"]


glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or allocator._mallopt()[0] is None,
                           reason="glibc's mallopt (Linux, glibc's own malloc)")


@glibc
def test_fixed_keeps_a_freed_block_in_the_heap_where_the_system_unmaps_it():
    page, [(held, why, faults)] = _jobs("system")
    pages = (64 << 20) // page
    assert (held, why) == ("system", None) and faults >= 0.9 * pages  # faulted in again each time
    page, [(held, why, faults)] = _jobs("fixed")
    assert (held, why) == ("fixed", None) and faults < 0.01 * pages  # reused: none faulted again


@glibc
def test_steady_keeps_what_a_plain_process_keeps_and_maps_what_it_maps():
    """steady holds glibc's thresholds where a plain process's settle (32 MiB, 64 MiB): a 64 MiB
    block is mapped and faulted in every time, as glibc's own settings do for ever (its dynamic
    threshold never passes 32 MiB); a 16 MiB one stays in the heap from the first time."""
    page, [(held, why, faults)] = _jobs("steady")
    assert (held, why) == ("steady", None) and faults >= 0.9 * (64 << 20) // page
    page, [(held, why, faults)] = _jobs("steady", mib=16)
    assert (held, why) == ("steady", None) and faults < 0.01 * (16 << 20) // page
    assert allocator.THRESHOLDS[allocator.STEADY] == (32 << 20, 64 << 20)


@glibc
def test_jobs_of_one_process_record_the_allocator_they_ran_with():
    """run.isolation=none: a `system` job after a `fixed` one runs held (nothing undoes mallopt),
    and says so; its record says fixed."""
    page, jobs = _jobs("system", "fixed", "system", "fixed", "steady")
    pages = (64 << 20) // page
    assert [j[0] for j in jobs] == ["system", "fixed", "fixed", "fixed", "steady"]
    assert jobs[2][1] and "an earlier job in this process" in jobs[2][1] and jobs[3][1] is None
    assert jobs[0][2] >= 0.9 * pages and all(j[2] < 0.01 * pages for j in jobs[1:4])
    assert jobs[4][1] is None and jobs[4][2] >= 0.9 * pages  # steady after fixed: its own thresholds again


def test_the_choice_is_checked():
    assert RunConfig().allocator == "steady"
    with pytest.raises(ConfigError, match=r"run.allocator='glibc' is not allowed.*steady.*fixed.*system"):
        RunConfig(allocator="glibc")


def test_a_job_whose_thresholds_could_not_be_held_records_system_and_says_why(tmp_path, monkeypatch):
    from experiments.config import JobConfig
    from experiments.job import run_job

    monkeypatch.setattr(allocator, "_held", None)
    monkeypatch.setattr(allocator, "_mallopt", lambda: (None, "its malloc is not glibc's (an allocator loaded by LD_PRELOAD?)"))
    config = JobConfig(size=8, device="cpu", run=RunConfig(isolation="none", compile_cache="shared"))
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["allocator"] == "system" and json.loads((tmp_path / "metrics.json").read_text())["allocator"] == "system"
    assert any("run.allocator=steady: its malloc is not glibc's" in w for w in record["warnings"]), record["warnings"]
    # the job's folder config still asks for steady: a rerun resumes it, and compare pairs it as what ran
    assert config.run.allocator == "steady"


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None, reason="a C compiler, Linux")
def test_a_malloc_loaded_before_glibcs_is_not_held(tmp_path):
    """A malloc loaded by LD_PRELOAD (tcmalloc, jemalloc; here one that calls glibc's underneath)
    is not glibc's: mallopt would say 1 and set nothing that malloc reads."""
    source = tmp_path / "other_malloc.c"
    source.write_text("#include <stddef.h>\nextern void *__libc_malloc(size_t);\n"
                      "void *malloc(size_t n) { return __libc_malloc(n); }\n")
    library = tmp_path / "other_malloc.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, capture_output=True)
    done = subprocess.run([sys.executable, "-c", "from experiments import allocator; print(allocator.hold('fixed'))"],
                          capture_output=True, text=True, check=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LD_PRELOAD": str(library)})
    assert "('system', \"run.allocator=fixed: its malloc is not glibc's" in done.stdout, done.stdout


def test_the_report_says_the_steps_were_timed_with_the_thresholds_held():
    from analysis.report.page import _allocator_note

    [note] = _allocator_note([{"allocator": "steady"}, {"allocator": "steady"}, {"allocator": "system"}])
    assert "The un-profiled steps of 2 jobs were timed with glibc's allocator thresholds held" in note
    assert "run.allocator=system</code> times it that way" in note
    [note] = _allocator_note([{"allocator": "fixed"}])  # kept what no plain process keeps: faster here
    assert "of 1 job were timed with <code>run.allocator=fixed</code>" in note and "faster here" in note
    assert _allocator_note([{"allocator": "system"}, {}]) == []  # a sweep from before the setting says nothing


@pytest.mark.parametrize("choice,mib,warned", [("fixed", 40, True), ("fixed", 8, False), ("fixed", 300, False),
                                               ("steady", 40, False)])
def test_fixed_warns_where_it_keeps_a_step_faster_than_a_plain_process(choice, mib, warned):
    """run.allocator=fixed keeps 32-256 MiB buffers in the heap, where a plain process maps them anew
    every step: a step allocating one says its timing is faster than the user's own script; smaller
    buffers (in the heap either way), larger ones (mapped either way) and steady say nothing."""
    from types import SimpleNamespace

    import torch

    from experiments.job import _peak_memory

    def call() -> None:
        torch.empty(mib << 20, dtype=torch.uint8).fill_(1)

    out = {"allocator": choice}
    _peak_memory(SimpleNamespace(device="cpu", step=SimpleNamespace(call=call)), out)  # type: ignore[arg-type]
    said = " ".join(out.get("warnings", []))
    assert ("run.allocator=fixed keeps them there" in said) == warned, said
    assert (f"buffers of up to {mib} MiB" in said) == warned, said
