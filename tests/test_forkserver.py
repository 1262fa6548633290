"""The fork server: a job forked from the template is as cold as a fresh interpreter's, ends as a
subprocess ends (exit codes, signals, timeouts), and never outlives the sweep process."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch

from experiments import forkserver, records
from experiments.config import JobConfig, config_to_dict
from experiments.lifeline import PARENT_ENV
from tests.conftest import ROOT, alive, read_metrics, wait_for

pytestmark = pytest.mark.skipif(forkserver.unavailable_reason() is not None,
                                reason=str(forkserver.unavailable_reason()))


@pytest.fixture(scope="module")
def server():
    s = forkserver.ForkServer()
    yield s
    s.close()


def script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def fresh(argv: list[str], log: Path, env: dict[str, str], timeout: float | None = 60) -> int:
    """The same command as a fresh interpreter, as experiments/launchers.py runs a job today."""
    with open(log, "wb") as out:
        return subprocess.run([sys.executable, *argv], stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT, env={**os.environ, **env}, timeout=timeout).returncode


def job_config(folder: Path, **settings) -> Path:
    folder.mkdir(parents=True)
    path = folder / records.CONFIG_FILE
    records.write_json(path, config_to_dict(JobConfig(device="cpu", **settings)))
    return path


def fresh_caches(under: Path) -> dict[str, str]:
    """Private Inductor and Triton caches, as launch._inductor_cache makes for compile_cache=fresh."""
    folder = Path(tempfile.mkdtemp(prefix="profsweep-cache-", dir=under))
    return {"TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"), "TRITON_CACHE_DIR": str(folder / "triton")}


# --- the child is the process a fresh interpreter would be ---------------------------------------

PORTRAIT = """\
import json, os, sys
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))[:-1]  # the last: listdir's own
print("to stdout"); print("to stderr", file=sys.stderr)
json.dump({"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "fds": fds,
           "stdin": os.readlink("/proc/self/fd/0"), "main": __name__, "path0": sys.path[0]},
          open(sys.argv[1], "w"))
"""


def test_the_child_sees_what_a_fresh_interpreter_sees(server, tmp_path):
    portrait = script(tmp_path, "portrait.py", PORTRAIT)
    env = fresh_caches(tmp_path)
    seen = {}
    for side, run in (("fork", server.run_python), ("fresh", fresh)):
        assert run([str(portrait), str(tmp_path / "seen.json")], tmp_path / f"{side}.log", env, 60) == 0
        seen[side] = json.loads((tmp_path / "seen.json").read_text())
    assert seen["fork"] == seen["fresh"]
    assert (tmp_path / "fork.log").read_text() == (tmp_path / "fresh.log").read_text()
    assert sorted((tmp_path / "fork.log").read_text().splitlines()) == ["to stderr", "to stdout"]
    assert seen["fork"]["fds"] == [0, 1, 2] and seen["fork"]["stdin"] == os.devnull
    assert seen["fork"]["env"]["TORCHINDUCTOR_CACHE_DIR"] == env["TORCHINDUCTOR_CACHE_DIR"]


def test_the_child_owns_the_pages_the_template_wrote_as_a_fresh_process_does(server, tmp_path):
    # Left shared copy-on-write, each would be copied inside the job's first calls (timed).
    held = ", ".join(("torch", "torch.profiler") + (forkserver.COMPILER_MODULES if forkserver._cpu_only_torch() else ()))
    job = script(tmp_path, "memory.py", f"""\
        import {held}
        for line in open("/proc/self/smaps_rollup"):
            if line.startswith(("Shared_Dirty:", "Private_Dirty:")):
                print(line.split()[1])
        """)
    seen = {}
    for side, run in (("fork", server.run_python), ("fresh", fresh)):
        assert run([str(job)], tmp_path / f"{side}.log", {}, 60) == 0
        seen[side] = [int(kb) for kb in (tmp_path / f"{side}.log").read_text().split()]  # shared, private KiB
    assert seen["fork"][0] < 0.1 * seen["fork"][1]
    assert seen["fork"][1] == pytest.approx(seen["fresh"][1], rel=0.25)


def test_the_template_imports_torch_and_initialises_nothing(server, tmp_path):
    ok = script(tmp_path, "ok.py", "pass\n")
    assert server.run_python([str(ok)], tmp_path / "log", {}, 60) == 0
    state = server.state()
    assert state["pid"] == server.pid != os.getpid()
    assert state["cuda_initialized"] is False
    assert state["imported"] == []  # no Dynamo, Inductor or Triton, nor the job's own module
    assert state["python_threads"] == 1 and state["threads"] == 1
    assert state["pdeathsig"] is True


@pytest.mark.parametrize("body,expected", [
    ("pass\n", 0),
    ("import sys; sys.exit(3)\n", 3),
    ("raise ValueError('no')\n", 1),
    ("import sys; sys.exit('a message')\n", 1),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)\n", -signal.SIGTERM),
    ("import os; os.abort()\n", -signal.SIGABRT),
])
def test_exit_codes_and_signals_are_reported_as_subprocess_reports_them(server, tmp_path, body, expected):
    job = script(tmp_path, "job.py", body)
    assert fresh([str(job)], tmp_path / "fresh.log", {}) == expected
    assert server.run_python([str(job)], tmp_path / "fork.log", {}, 60) == expected
    assert (tmp_path / "fork.log").read_text() == (tmp_path / "fresh.log").read_text()


def test_a_job_that_fails_returns_1(server, tmp_path):
    config = job_config(tmp_path / "job", size=16, dtype="fp32")
    records.write_json(config, {**json.loads(config.read_text()), "size": -1})
    assert server.run(config, tmp_path / "job" / "job.log", {}, 60) == 1
    assert "size=-1" in (tmp_path / "job" / "job.log").read_text()


def test_a_timeout_raises_and_kills_the_job_and_what_it_started(server, tmp_path):
    pids = tmp_path / "pids"
    job = script(tmp_path, "sleeper.py", f"""\
        import os, subprocess, time
        helper = subprocess.Popen(["sleep", "600"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{helper.pid}}")
        time.sleep(600)
        """)
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        server.run_python([str(job)], tmp_path / "log", {}, timeout=3)
    assert caught.value.timeout == 3 and caught.value.cmd[-1] == str(job)
    job_pid, helper_pid = map(int, pids.read_text().split())
    assert not alive(job_pid)  # reaped before run() returned
    assert wait_for(lambda: not alive(helper_pid))
    assert server.run_python([str(script(tmp_path, "ok.py", "pass\n"))], tmp_path / "log", {}, 60) == 0


def test_the_job_holds_the_file_descriptors_it_is_given(server, tmp_path):
    lock_path, started, go = tmp_path / "cpu.lock", tmp_path / "started", tmp_path / "go"
    job = script(tmp_path, "holder.py", f"""\
        import os, time
        open({str(started)!r}, "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.02)
        """)
    handle = open(lock_path, "a+")
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    result = []
    runner = threading.Thread(target=lambda: result.append(
        server.run_python([str(job)], tmp_path / "log", {}, 60, keep_fds=[handle.fileno()])))
    runner.start()
    assert wait_for(started.exists)
    handle.close()  # the sweep lets go: the job's copy of the descriptor still holds the lock
    with open(lock_path, "a+") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    go.touch()
    runner.join(60)
    assert result == [0]
    with open(lock_path, "a+") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the job has ended: free


def test_a_job_that_dies_with_its_parent_follows_the_template(server, tmp_path):
    job = script(tmp_path, "lifeline.py", f"""\
        import os
        from experiments.lifeline import PARENT_ENV, die_with_parent
        assert die_with_parent()
        print(os.environ[PARENT_ENV], os.getppid())
        """)
    assert server.run_python([str(job)], tmp_path / "log", {PARENT_ENV: str(os.getpid())}, 60) == 0
    assert (tmp_path / "log").read_text().split() == [str(server.pid)] * 2


@pytest.mark.parametrize("ending, code", [("", 0), ("sys.exit(3)", 3), ("raise KeyboardInterrupt", -signal.SIGINT),
                                          ("raise ValueError('x')", 1)])
def test_a_forked_command_ends_as_a_fresh_interpreter_does(server, tmp_path, ending, code):
    """Threads left running are joined, then the atexit handlers run (last registered first),
    then the exit code or, after an uncaught Ctrl-C, death by SIGINT: as `python SCRIPT`."""
    job = script(tmp_path, "ends.py", f"""\
        import atexit, sys, threading, time
        atexit.register(print, "atexit first registered", flush=True)
        atexit.register(print, "atexit last registered", flush=True)
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True))).start()
        print("main done", flush=True)
        {ending}
        """)
    assert fresh([str(job)], tmp_path / "fresh.log", {}) == code
    assert server.run_python([str(job)], tmp_path / "fork.log", {}, 60) == code
    said = [line for line in (tmp_path / "fork.log").read_text().splitlines() if not line.startswith(("Traceback", " "))]
    expected = [line for line in (tmp_path / "fresh.log").read_text().splitlines()
                if not line.startswith(("Traceback", " "))]
    assert said == expected
    ours = [line for line in said if line in ("main done", "thread done", "atexit last registered",
                                              "atexit first registered")]
    assert ours == ["main done", "thread done", "atexit last registered", "atexit first registered"], said


def test_an_environment_read_while_importing_torch_restarts_the_template(server, tmp_path):
    job = script(tmp_path, "threads.py", "import torch; print(torch.get_num_threads())\n")
    assert server.run_python([str(job)], tmp_path / "log", {}, 60) == 0
    first = server.pid
    assert server.run_python([str(job)], tmp_path / "log", fresh_caches(tmp_path), 60) == 0
    assert server.pid == first  # the lazily read keys keep the template
    # The OpenMP runtime reads OMP_NUM_THREADS when torch loads it: a template started without it
    # would give the job every core.
    assert fresh([str(job)], tmp_path / "fresh.log", {"OMP_NUM_THREADS": "1"}) == 0
    assert server.run_python([str(job)], tmp_path / "fork.log", {"OMP_NUM_THREADS": "1"}, 60) == 0
    assert (tmp_path / "fork.log").read_text() == (tmp_path / "fresh.log").read_text() == "1\n"
    assert server.pid != first


# --- a killed sweep takes its template and jobs along ---------------------------------------------

DRIVER = """\
import signal
import sys
from pathlib import Path
from experiments import forkserver

# Ctrl-C raises here even when this process started with SIGINT ignored (a background job of a
# non-interactive shell, as CI may run the tests).
signal.signal(signal.SIGINT, signal.default_int_handler)

server = forkserver.shared()
print(server.pid, flush=True)
try:
    server.run_python([sys.argv[1]], Path(sys.argv[2]), {}, None)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def start_driver(tmp_path: Path) -> tuple[subprocess.Popen, int, int]:
    """A sweep process running a job that sleeps: it, its template's pid, and the job's pid."""
    pid_file = tmp_path / "job.pid"
    job = script(tmp_path, "sleeper.py", f"""\
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
        """)
    driver = subprocess.Popen([sys.executable, str(script(tmp_path, "driver.py", DRIVER)), str(job),
                               str(tmp_path / "log")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    template = int(driver.stdout.readline())
    assert wait_for(pid_file.exists, 60)
    job_pid = int(pid_file.read_text())
    assert alive(template) and alive(job_pid)
    return driver, template, job_pid


def test_kill_9_of_the_sweep_process_ends_the_template_and_the_job(tmp_path):
    driver, template, job_pid = start_driver(tmp_path)
    try:
        driver.kill()
        driver.wait()
        assert wait_for(lambda: not alive(template) and not alive(job_pid), 10)
    finally:
        driver.kill()
        driver.wait()


def test_ctrl_c_in_the_sweep_process_kills_the_job_before_it_propagates(tmp_path):
    driver, template, job_pid = start_driver(tmp_path)
    try:
        driver.send_signal(signal.SIGINT)
        assert driver.stdout.readline() == "interrupted\n"
        assert not alive(job_pid)  # already reaped when KeyboardInterrupt left run()
        assert driver.wait(60) == 130
    finally:
        driver.kill()
        driver.wait()


def test_the_template_outlives_the_thread_that_started_it(tmp_path, monkeypatch):
    monkeypatch.setattr(forkserver, "_SHARED", forkserver.ForkServer())
    try:
        box = []
        starter = threading.Thread(target=lambda: box.append(forkserver.shared()))
        starter.start()
        starter.join()
        server = box[0]
        # the kernel sends PR_SET_PDEATHSIG's signal as the thread exits: once its task is gone
        # from /proc, the signal has been sent, and the round trip below needs a live template
        assert wait_for(lambda: not Path(f"/proc/self/task/{starter.native_id}").exists(), 10)
        assert alive(server.pid)
        assert server.run_python([str(script(tmp_path, "ok.py", "pass\n"))], tmp_path / "log", {}, 60) == 0
    finally:
        forkserver._SHARED.close()


# --- where there is no fork server ---------------------------------------------------------------


def test_no_fork_server_off_linux_said_once(monkeypatch, capsys):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(forkserver, "_SAID", set())
    assert forkserver.shared() is None and forkserver.shared() is None
    err = capsys.readouterr().err
    assert err == ("fork server unavailable (fork server is for Linux, this is darwin): "
                   "every job starts a fresh interpreter\n")
    assert forkserver.how_jobs_start(None) == forkserver.FRESH


def test_a_template_that_cannot_start_is_refused_once(tmp_path, monkeypatch, capsys):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(hook))
    monkeypatch.setattr(forkserver, "_SHARED", forkserver.ForkServer())
    monkeypatch.setattr(forkserver, "_SAID", set())
    assert forkserver.shared() is None
    assert forkserver.shared() is None  # not tried again for the same environment
    err = capsys.readouterr().err.splitlines()
    assert err == ["fork server unavailable (the template process ended (its exit code: 3)): "
                   "every job starts a fresh interpreter"]


# --- jobs: as cold as a fresh interpreter, the same artifacts -------------------------------------


def test_a_forked_job_writes_what_a_fresh_one_writes(server, tmp_path):
    jobs = {}
    for side in ("fork", "fresh"):
        config = job_config(tmp_path / side, size=16, dtype="fp32")
        run = server.run if side == "fork" else lambda c, log, env, t: fresh(["-m", "experiments.job", str(c)], log, env, t)
        env = {**fresh_caches(tmp_path), PARENT_ENV: str(os.getpid())}  # as launchers.py starts a job
        assert run(config, config.parent / records.LOG_FILE, env, 120) == 0
        jobs[side] = config.parent
    fork, new = read_metrics(jobs["fork"]), read_metrics(jobs["fresh"])
    assert sorted(p.name for p in jobs["fork"].iterdir()) == sorted(p.name for p in jobs["fresh"].iterdir())
    assert fork.keys() == new.keys() and fork["status"] == new["status"] == "ok"
    timed = {"job", "started_at", "finished_at", "first_call_ms", "self_cpu_total_us", "memory_available_bytes",
             "peak_memory_bytes", "timed_us_per_step", "timed_steps", "timed_samples_us", "timed_slow_steps",
             "timed_minor_faults_per_step", "speed_probe_us", "speed_probe_before_us", "speed_probe_after_us", "overhead_probe_us",
             "cache_probe_us", "other_cpus", "cpu_pressure", "measured_s", "loadavg_1m", "lock_wait_s",
             "trace_sizes"}  # the traces' bytes: their times and ids, written as text, differ in length
    assert {k: v for k, v in fork.items() if k not in timed} == {k: v for k, v in new.items() if k not in timed}

    def events(job_dir: Path) -> Counter:
        trace = json.loads((job_dir / read_metrics(job_dir)["trace_file"]).read_text())
        return Counter(e.get("name") for e in trace["traceEvents"] if e.get("ph") == "X")

    def ops(job_dir: Path) -> list[tuple[str, str]]:  # each row's name and call count
        table = (job_dir / read_metrics(job_dir)["table_file"]).read_text().splitlines()
        return sorted((line.split()[0], line.split()[-1]) for line in table[3:] if line.strip()
                      and not line.startswith(("-", "Self")))

    assert events(jobs["fork"]) == events(jobs["fresh"])
    assert ops(jobs["fork"]) == ops(jobs["fresh"])


@pytest.mark.slow
def test_compiled_jobs_through_the_server_both_compile_cold(server, tmp_path):
    for n in (1, 2):
        config = job_config(tmp_path / f"job{n}", size=16, compile=True)
        caches = fresh_caches(tmp_path)
        assert server.run(config, config.parent / records.LOG_FILE, caches, 300) == 0
        m = read_metrics(config.parent)
        assert m["status"] == "ok" and m["inductor_cache_misses"] >= 1 and m["inductor_cache_hits"] == 0
        # The job's own Inductor cache got the compiled graph: the environment was honoured.
        written = [p for p in Path(caches["TORCHINDUCTOR_CACHE_DIR"]).rglob("*") if p.is_file()]
        assert written, "nothing written into the job's TORCHINDUCTOR_CACHE_DIR"
    state = server.state()
    assert state["imported"] == [] and state["cuda_initialized"] is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_visible_devices_reaches_the_child_and_the_template_has_no_context(server, tmp_path):
    job = script(tmp_path, "cuda.py", """\
        import os, torch
        torch.ones(1, device="cuda")
        print(os.environ["CUDA_VISIBLE_DEVICES"], torch.cuda.device_count(), torch.cuda.is_initialized())
        """)
    assert server.run_python([str(job)], tmp_path / "log", {"CUDA_VISIBLE_DEVICES": "0"}, 120) == 0
    assert (tmp_path / "log").read_text().split()[-3:] == ["0", "1", "True"]
    hidden = script(tmp_path, "hidden.py", "import torch; print(torch.cuda.device_count())\n")
    assert server.run_python([str(hidden)], tmp_path / "log", {"CUDA_VISIBLE_DEVICES": ""}, 120) == 0
    assert (tmp_path / "log").read_text().split()[-1] == "0"
    assert server.state()["cuda_initialized"] is False
