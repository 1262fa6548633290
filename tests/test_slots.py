"""Device slots: jobs never share a GPU (or the CPU), whatever launcher runs them."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from experiments.slots import CPU_SLOT, device_slot, slots_for, visible_gpus


@pytest.mark.parametrize("value,expected", [
    ("0,1,2", ["0", "1", "2"]),
    ("3", ["3"]),
    ("", []),
    ("-1", []),
    ("2,-1,3", ["2"]),
    ("GPU-5f2c,GPU-77aa", ["GPU-5f2c", "GPU-77aa"]),
])
def test_visible_gpus_follow_cuda_visible_devices(value, expected):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": value}) == expected


def test_cpu_jobs_and_gpu_less_machines_use_the_single_cpu_slot():
    assert slots_for("cpu", ["0", "1"]) == [CPU_SLOT]
    assert slots_for("auto", []) == [CPU_SLOT]
    assert slots_for("auto", ["0", "1"]) == ["0", "1"]
    assert slots_for("cuda", ["4"]) == ["4"]


def test_concurrent_jobs_get_distinct_gpus(tmp_path):
    with device_slot(["0", "1"], tmp_path) as first:
        with device_slot(["0", "1"], tmp_path) as second:
            assert {first, second} == {"0", "1"}
            with pytest.raises(TimeoutError, match="no free device among 0, 1"):
                with device_slot(["0", "1"], tmp_path, timeout_s=0.3):
                    pass


def test_a_waiting_job_gets_the_gpu_once_it_is_freed(tmp_path):
    got = []
    holding = threading.Event()
    release = threading.Event()

    def first_job():
        with device_slot(["0"], tmp_path):
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=first_job)
    thread.start()
    holding.wait(5)

    def second_job():
        with device_slot(["0"], tmp_path, poll_s=0.05) as slot:
            got.append((slot, time.monotonic()))

    waiter = threading.Thread(target=second_job)
    waiter.start()
    waiter.join(0.3)  # however long this takes, the waiter cannot have the slot before the release
    freed = time.monotonic()
    release.set()
    thread.join(5)
    waiter.join(5)
    assert got and got[0][0] == "0" and got[0][1] >= freed


def test_sequential_jobs_reuse_the_same_gpu(tmp_path):
    names = []
    for _ in range(3):
        with device_slot(["0", "1"], tmp_path) as slot:
            names.append(slot)
    assert names == ["0", "0", "0"]


def test_a_job_process_that_inherits_the_slot_holds_it_after_the_sweep_lets_go(tmp_path):
    import subprocess
    import sys

    from experiments.slots import held_slot

    with held_slot(["0"], tmp_path) as (slot, fd):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], pass_fds=(fd,))
    try:
        with pytest.raises(TimeoutError):  # the sweep closed its handle; the job still holds it
            with device_slot(["0"], tmp_path, poll_s=0.05, timeout_s=0.3):
                pass
    finally:
        child.kill()
        child.wait()
    with device_slot(["0"], tmp_path, timeout_s=5) as again:
        assert again == slot


@pytest.mark.slow
def test_two_sweeps_with_different_temp_folders_never_profile_at_once(tmp_path):
    """The lock folder is machine-wide: TMPDIR (per-user temp folders, PrivateTmp) does not move it,
    and the sweep that waits says who holds the device."""
    import datetime
    import subprocess
    import sys

    from tests.conftest import ROOT, job_dirs, read_metrics

    sweeps = []
    for name in ("a", "b"):
        (tmp_path / f"tmp_{name}").mkdir()
        env = {**os.environ, "TMPDIR": str(tmp_path / f"tmp_{name}")}
        env.pop("PROFSWEEP_LOCK_DIR", None)
        sweeps.append(subprocess.Popen(
            [sys.executable, "experiments/run.py", "-m", "size=8,16,24", "device=cpu", "run.repeats=1",
             f"hydra.sweep.dir={tmp_path / name}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL))
    outputs = [p.communicate(timeout=300)[0] for p in sweeps]
    assert [p.returncode for p in sweeps] == [0, 0], outputs

    def windows(name):
        return [(datetime.datetime.fromisoformat(m["started_at"]), datetime.datetime.fromisoformat(m["finished_at"]))
                for m in (read_metrics(d) for d in job_dirs(tmp_path / name))]

    for a0, a1 in windows("a"):
        for b0, b1 in windows("b"):
            assert a1 <= b0 or b1 <= a0, "two jobs profiled on the CPU at the same time"
    said = "\n".join(outputs)
    assert re.search(r"waiting for the CPU \(one job per device\), held by pid \d+, sweep \S+", said), said


def test_the_holder_named_is_one_that_can_hold_the_slot(tmp_path):
    """A waiting sweep named itself as the holder for 30 s: its own earlier job's name stayed in
    the lock file after it let go, and the slot's holder then (a `flock` of the file by another
    program) wrote none (a reviewer's finding). A holder's name goes with it, and a name whose pid
    is this process or a dead one is not said."""
    import subprocess
    import sys

    from experiments.slots import held_slot, holder_of

    with held_slot(["cpu"], tmp_path, holder="pid 1, sweep here"):
        assert (tmp_path / "cpu.lock").read_text() == "pid 1, sweep here\n"
        assert holder_of(tmp_path, "cpu") == "pid 1, sweep here"  # pid 1 lives
    assert (tmp_path / "cpu.lock").read_text() == ""  # let go: no name left behind
    (tmp_path / "cpu.lock").write_text(f"pid {os.getpid()}, sweep mine\n")
    assert holder_of(tmp_path, "cpu") == ""  # this process waits: it holds nothing
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "cpu.lock").write_text(f"pid {gone.stdout.strip()}, sweep dead\n")
    assert holder_of(tmp_path, "cpu") == ""
    (tmp_path / "cpu.lock").write_text("some other program's words\n")
    assert holder_of(tmp_path, "cpu") == ""
