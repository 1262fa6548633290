"""Where a job times its un-profiled steps: a cold job in its twin, a process forked before the
job ran anything and that never profiled; a warm job before its profiler starts. Run as the sweep
runs a job: `python -m experiments.job CONFIG` in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.config import JobConfig, RunConfig, WorkloadConfig, config_to_dict
from experiments.job import AFTER_PROFILER, TWIN
from tests.conftest import ROOT

# A factory that notes the process of each build (the job's, then the twin's); with fail_second,
# the second build raises.
FACTORY = '''
import os
import threading
import time
import torch

if os.environ.get("TWINBENCH_THREAD"):  # a module that starts a thread when it is imported
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()


class Unsayable(Exception):
    def __str__(self):
        raise ValueError("no message")


def make(*, size, dtype, device, log: str = "", fail_second: bool = False, fail_with: str = "RuntimeError",
         fail_first: str = "", threads: int = 0, draw: str = ""):
    if threads:
        torch.set_num_threads(threads)
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    if fail_first == "unsayable":
        raise Unsayable()
    if fail_first == "interrupt":  # a model that raises KeyboardInterrupt itself: no signal
        raise KeyboardInterrupt("the model's own")
    if fail_first == "sleep":  # a build that waits for a real Ctrl-C
        time.sleep(60)
    if fail_first == "long":
        raise ValueError("first line\\n" + "x" * 20000)
    if fail_second and len(open(log).read().split()) > 1:
        if fail_with == "torch memory":  # what torch's CPU allocator raises: a RuntimeError
            torch.empty(2**50, dtype=torch.uint8)
        raise {"RuntimeError": RuntimeError, "MemoryError": MemoryError}[fail_with]("the second build fails")
    if draw == "set":  # modules kept in a set: another order in each process, the same workload
        mods = {torch.nn.Linear(size, size), torch.nn.Linear(size, 2 * size), torch.nn.Linear(size, 3 * size)}
        return (lambda x: [m(x) for m in mods]), (torch.ones(4, size),)
    if draw == "nested":  # a strided nested tensor has no sizes to read
        x = torch.nested.nested_tensor([torch.ones(2, size), torch.ones(4, size)])
        return (lambda t: t * 2), (x,)
    if draw:  # a ragged batch's length drawn from Python's generator, or from what each process has its own
        import random
        rows = random.randint(1, 1000) if draw == "random" else os.getpid() % 997 + 1
        x = torch.ones(rows, size, dtype=dtype, device=device)
        return torch.mm, (x, torch.ones(size, size, dtype=dtype, device=device))
    x = torch.ones(size, size, dtype=dtype, device=device)
    return torch.mm, (x, x)
'''


def _run_job(tmp_path: Path, warmup: bool, env_extra: dict | None = None, compile: bool = False,
             **settings) -> tuple[dict, list[int], int]:
    folder = tmp_path / "user"
    folder.mkdir(exist_ok=True)
    (folder / "twinbench.py").write_text(FACTORY)
    log = tmp_path / "builds.log"
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    config = JobConfig(workload=WorkloadConfig(target="twinbench:make", name="twinbench",
                                               settings={"log": str(log), **settings}),
                       size=16, dtype="fp32", device="cpu", warmup=warmup, compile=compile, run=RunConfig(threads=1))
    config.compiler.backend = "eager"  # Dynamo's graph run eagerly: compiled in no time
    path = job_dir / "job_config.json"
    path.write_text(json.dumps(config_to_dict(config)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)]), **(env_extra or {})}
    done = subprocess.run([sys.executable, "-m", "experiments.job", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    record = json.loads((job_dir / "metrics.json").read_text())
    builds = [int(p) for p in log.read_text().split()] if log.exists() else []
    return record, builds, done.returncode


def test_a_cold_job_times_its_unprofiled_steps_in_a_twin(tmp_path):
    record, builds, code = _run_job(tmp_path, warmup=False)
    assert code == 0 and record["status"] == "ok", record["error"]
    assert record["timed_in"] == TWIN and record["timed_steps"] >= 20
    assert record["timed_minor_faults_per_step"] is not None
    # the machine's speed probe, before and after the timed steps, in the process that timed them
    probes = record["speed_probe_before_us"], record["speed_probe_after_us"]
    assert all(p > 0 for p in probes) and record["speed_probe_us"] == pytest.approx((probes[0] * probes[1]) ** 0.5)
    # Built twice, in two processes: the job's, then the twin's.
    assert len(builds) == 2 and builds[0] != builds[1]
    assert record["steps"] == 3 and record["trace_file"]  # the job profiled as ever
    assert not any(key.startswith("side_by_side") for key in record)  # eager: nothing to set beside it


@pytest.mark.parametrize("warmup", [False, True], ids=["cold", "warm"])
def test_a_compiled_job_times_its_step_eager_beside_it_in_the_process_that_timed_it(tmp_path, warmup):
    """compile against eager is judged on the two timed in turn in one process (job._side_by_side):
    a cold job's twin, a warm job's own process before its profiler."""
    from experiments.job import SIDE_FLOOR

    record, builds, code = _run_job(tmp_path, warmup=warmup, compile=True)
    assert code == 0 and record["status"] == "ok", record["error"]
    assert record["timed_in"] == (TWIN if not warmup else "this process, before the profiler")
    assert record["side_by_side_eager_us"] > 0 and record["side_by_side_compiled_us"] > 0
    assert record["side_by_side_steps"] >= SIDE_FLOOR and "side_by_side_error" not in record
    assert len(builds) == (1 if warmup else 2)


def test_a_warm_job_times_before_its_profiler_in_its_own_process(tmp_path):
    record, builds, code = _run_job(tmp_path, warmup=True)
    assert code == 0 and record["status"] == "ok", record["error"]
    assert record["timed_in"] == "this process, before the profiler" and len(builds) == 1


@pytest.mark.parametrize("fail_with,said", [("MemoryError", "the second build fails"),
                                            ("torch memory", "can't allocate memory")])
def test_a_twin_that_runs_out_of_memory_leaves_the_job_ok_without_timing(tmp_path, fail_with, said):
    """Beside the job, whose pages it copies as it writes, the twin may run out of memory where the
    job did not: Python's MemoryError, or the RuntimeError torch's CPU allocator raises."""
    record, builds, code = _run_job(tmp_path, warmup=False, fail_second=True, fail_with=fail_with)
    assert code == 0 and record["status"] == "ok", record["error"]
    assert record.get("timed_us_per_step") is None
    assert said in record["timed_error"]
    assert record["trace_file"]


def test_a_factory_that_draws_from_pythons_random_builds_alike_in_its_twin(tmp_path):
    """Python reseeds `random` in a forked child: the twin is given the job's state, so a factory
    that draws a shape from it times the workload it profiled (before: a batch padded to 62 rows
    profiled and counted, one of 43 timed)."""
    record, builds, code = _run_job(tmp_path, warmup=False, draw="random")
    assert code == 0 and record["status"] == "ok", record["error"]
    assert "timed_error" not in record and record["timed_in"] == TWIN and record["timed_us_per_step"] > 0


@pytest.mark.parametrize("draw", ["set", "nested"])
def test_a_workload_built_alike_in_another_order_or_without_sizes_is_timed_in_its_twin(tmp_path, draw):
    """helper-54: modules kept in a set come in another order in the twin (its shapes are compared
    sorted: no false "another workload"); a strided nested tensor input, whose sizes cannot be
    read, failed the job before it measured anything."""
    record, builds, code = _run_job(tmp_path, warmup=False, draw=draw)
    assert code == 0 and record["status"] == "ok", record["error"]
    assert "timed_error" not in record and record["timed_in"] == TWIN and record["timed_us_per_step"] > 0


def test_a_twin_that_built_another_workload_gives_no_unprofiled_timing(tmp_path):
    """A factory that draws from what two processes do not share (here its process id; a fresh
    random.Random(), the time) builds another workload in the twin: its timing would be held against the job's counted FLOPs, so
    the job stays ok without it and says which tensor differed."""
    record, builds, code = _run_job(tmp_path, warmup=False, draw="pid")
    assert code == 0 and record["status"] == "ok", record["error"]
    assert record.get("timed_us_per_step") is None and record["trace_file"]
    assert record["timed_error"].startswith("the twin built another workload than the job (input tensors: (")
    assert " fp32 in the job where the twin has (" in record["timed_error"]
    assert "seed what it draws (docs/numbers.md, the twin)" in record["timed_error"]


def test_a_workload_that_raises_in_its_twin_fails_the_job(tmp_path):
    """The workload's own exception in the twin (a model that raises on its 12th call, a factory
    that fails its second build) is the job's failure, said as such: before, the job was ok
    without un-profiled timing and the report advised a rerun that changed nothing."""
    record, builds, code = _run_job(tmp_path, warmup=False, fail_second=True)
    assert record["status"] == "failed" and record.get("timed_us_per_step") is None
    assert record["error"].startswith("JobError: the workload raised in the job's twin (the process that builds "
                                      "and calls it again to time its un-profiled steps): RuntimeError: the second "
                                      "build fails")


def test_a_job_that_fails_lets_its_twin_go(tmp_path):
    """The workload fails in the job: the twin never builds, and no process is left behind."""
    record, builds, code = _run_job(tmp_path, warmup=False, fail_second=False, size_typo=1)
    assert code == 1 and record["status"] == "failed" and "size_typo" in record["error"]
    assert builds == []
    config = str(tmp_path / "job" / "job_config.json")
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).count(config)]
    assert left == []


def test_a_job_in_a_process_that_is_not_its_own_times_after_the_profiled_steps(tmp_path):
    from experiments.job import run_job

    record = run_job(JobConfig(size=8, device="cpu", run=RunConfig(isolation="none")), tmp_path)
    assert record["status"] == "ok" and record["timed_in"] == AFTER_PROFILER


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_text(errors="replace")
    except OSError:
        return ""


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the twin is forked: Linux")


def test_a_workload_error_that_cannot_say_itself_or_says_too_much_is_recorded(tmp_path):
    """An exception whose str() raises crashed the job's own error handling ("the job's process
    ended without a result"); one of 20,000 characters went whole into the record and onto two
    terminal lines (a reviewer's models)."""
    record, _, _ = _run_job(tmp_path, warmup=True, fail_first="unsayable")
    assert record["status"] == "failed" and record["error"] == "Unsayable: <Unsayable whose message cannot be read>"
    other = tmp_path / "long"
    other.mkdir()
    record, _, _ = _run_job(other, warmup=True, fail_first="long")
    assert record["status"] == "failed" and record["error"].startswith("ValueError: first line\nxxx")
    assert len(record["error"]) < 4100


def test_a_message_is_one_terminal_line():
    from profsweep.contract import LINE, one_line

    assert one_line("RuntimeError: boom") == "RuntimeError: boom"
    assert one_line("TorchRuntimeError: failed\n\nfrom user code:\n  File x") == \
        "TorchRuntimeError: failed (the rest in job.log)"
    long = one_line("ValueError: " + "x" * 20000)
    assert "\n" not in long and len(long) < LINE + 40 and long.endswith("... (the rest in job.log)")


def test_threads_the_workload_sets_are_the_ones_recorded(tmp_path):
    """torch_threads was read before the factory ran: a factory calling torch.set_num_threads left
    the record saying the job's own count (a reviewer's model)."""
    record, _, _ = _run_job(tmp_path, warmup=True, threads=3)  # the job starts on run.threads=1
    assert record["status"] == "ok" and record["torch_threads"] == 3
    assert any("the workload set torch's threads to 3 (the job started with 1" in w for w in record["warnings"])


def test_a_cold_job_without_a_twin_says_why(tmp_path):
    """A thread the workload's module started at import keeps the job from forking its twin: its
    un-profiled steps are then timed after the profiled ones, which the record said only in
    timed_in (a reviewer's module)."""
    record, builds, _ = _run_job(tmp_path, warmup=False, env_extra={"TWINBENCH_THREAD": "1"})
    assert record["status"] == "ok" and record["timed_in"] == AFTER_PROFILER and len(builds) == 1
    assert any(w.startswith("no twin: 2 threads ran in the job's process") for w in record["warnings"]), record


def test_a_keyboard_interrupt_the_workload_raises_itself_fails_its_job(tmp_path):
    """Told from a Ctrl-C: the job is failed with the workload's words and the sweep goes on
    (before, the job's process ended as if by SIGINT, and the sweep said it was killed)."""
    record, builds, code = _run_job(tmp_path, warmup=False, fail_first="interrupt")
    assert code == 1 and record["status"] == "failed"
    assert record["error"] == ("JobError: the workload raised KeyboardInterrupt: the model's own itself (no Ctrl-C "
                               "or SIGTERM reached the job)")


def test_a_real_ctrl_c_still_stops_the_job(tmp_path):
    """SIGINT while the workload builds is the stop it always was: the process ends by the signal,
    with no record of a failure of its own."""
    import signal
    import time

    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "twinbench.py").write_text(FACTORY)
    log, job_dir = tmp_path / "builds.log", tmp_path / "job"
    job_dir.mkdir()
    config = JobConfig(workload=WorkloadConfig(target="twinbench:make", name="twinbench",
                                               settings={"log": str(log), "fail_first": "sleep"}),
                       size=16, dtype="fp32", device="cpu", run=RunConfig(threads=1))
    (job_dir / "job_config.json").write_text(json.dumps(config_to_dict(config)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    # SIGINT as a terminal gives it: a test suite run in the background (`make test &`) starts with
    # it ignored, which the job keeps, as any process does
    proc = subprocess.Popen([sys.executable, "-m", "experiments.job", str(job_dir / "job_config.json")], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not log.exists() and time.monotonic() < deadline:  # the factory has started: it sleeps now
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT, err
    assert not (job_dir / "metrics.json").exists() or json.loads((job_dir / "metrics.json").read_text())["status"] \
        != "failed"
