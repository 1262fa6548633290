"""Scale out and survive: submitit and joblib launchers, resume, timeouts, interruption."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, job_dirs, read_metrics, run_cli

pytestmark = pytest.mark.slow


def _files(job_dir: Path) -> dict[str, tuple[int, bytes]]:
    """Every artifact of a job folder (not Hydra's own .hydra/), with mtime and bytes."""
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in job_dir.iterdir() if p.is_file()}


def test_submitit_local_sweep(sweep_dir):
    done = run_cli("-m", "size=16,32", "hydra/launcher=submitit_local", f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [read_metrics(d)["status"] for d in job_dirs(sweep_dir)] == ["ok", "ok"]
    assert (sweep_dir / ".submitit").is_dir()  # the jobs really went through submitit
    # The analysis ran on the submitting side, through the callback.
    assert len(pd.read_csv(sweep_dir / "summary.csv")) == 2 and (sweep_dir / "report.html").is_file()
    assert "done: 2 jobs (2 ok, 0 failed)" in done.stdout
    # submitit writes the jobs' own output into .submitit/: the sweep prints their progress from disk
    first, second = job_dirs(sweep_dir)
    assert re.search(rf"^\[1/2\] {first.name} ok \d+\.\d s$", done.stdout, re.M), done.stdout
    assert re.search(rf"^\[2/2\] {second.name} ok \d+\.\d s$", done.stdout, re.M), done.stdout


def test_parallel_launcher_never_runs_two_jobs_on_one_device(sweep_dir):
    done = run_cli("-m", "size=16,32,48", "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=3",
                   f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stdout + done.stderr
    spans = sorted((m["started_at"], m["finished_at"]) for m in map(read_metrics, job_dirs(sweep_dir)))
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start  # one after the other on the single CPU slot


def test_resume_redoes_exactly_the_missing_job(sweep_dir):
    args = ("-m", "size=16,32", f"hydra.sweep.dir={sweep_dir}")
    assert run_cli(*args).returncode == 0
    first, second = job_dirs(sweep_dir)
    before = _files(first)
    (second / "metrics.json").unlink()
    started = json.loads((sweep_dir / "sweep.json").read_text())["created_at"]

    # each part of a job's work is said in its log as it starts (a timeout names the last)
    phases = [line for line in (first / "job.log").read_text().splitlines() if line.startswith("profsweep: now ")]
    assert phases == ["profsweep: now building the workload (experiments.workloads.matmul_add)",
                      "profsweep: now the profiled steps (the first call is the first)",
                      "profsweep: now writing the trace",
                      "profsweep: now the extra calls after the profiled steps (peak memory, FLOPs and bytes)",
                      "profsweep: now the un-profiled steps in the twin process, which builds the workload a second "
                      "time (run.job_timeout_s covers both builds)"]

    done = run_cli(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((sweep_dir / "sweep.json").read_text())  # the same sweep: history's key stays
    assert plan["created_at"] == started and plan["resumed_at"] > started
    assert f"[1/2] matmul_add size=16 bf16 cold eager skipped: already ok in {first.name} (resume)" in done.stdout
    assert "[2/2] matmul_add size=32 bf16 cold eager ok " in done.stdout
    assert _files(first) == before  # trace, table, metrics untouched
    assert read_metrics(second)["status"] == "ok"

    # Another configuration in the same folders is not "the same job": both are redone.
    changed = run_cli(*args, "profiler.active=2")
    assert changed.returncode == 0 and "skipped" not in changed.stdout
    assert all(read_metrics(d)["steps"] == 2 for d in job_dirs(sweep_dir))


@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_a_hung_job_is_killed_at_its_timeout(tmp_path, start, slow_workload):
    out = tmp_path / "run"
    done = run_cli("workload=custom", "workload._target_=slowbench:make", "workload.seconds=600", "size=16",
                   "device=cpu", f"run.start={start}", "run.job_timeout_s=2", f"hydra.run.dir={out}",
                   env=slow_workload)
    assert done.returncode == 1
    m = read_metrics(out)
    assert m["status"] == "failed"
    # the part of its work the job was in, from the lines it writes into its log as each starts
    assert m["error"] == "timeout: still running after run.job_timeout_s=2 s, killed during building the workload " \
                         "(slowbench:make)"
    assert "timeout" in done.stdout


def test_sigterm_stops_the_sweep_and_a_rerun_finishes_it(sweep_dir):
    args = [sys.executable, "experiments/run.py", "-m", "size=16,32,48", "run.repeats=1", f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("[2/3]") and " ... " in line:  # the job has started
            proc.send_signal(signal.SIGTERM)
            break
    lines += proc.stdout.read().splitlines()
    assert proc.wait(120) == 130, "\n".join(lines)
    first, second = job_dirs(sweep_dir)  # the third job was never launched
    assert read_metrics(first)["status"] == "ok"
    assert read_metrics(second)["error"].startswith("interrupted")
    assert "not started: 1 job (the sweep was interrupted)" in lines
    summary = pd.read_csv(sweep_dir / "summary.csv")  # the analysis of what finished is written
    assert list(summary["status"]) == ["ok", "failed"]
    assert any(line.startswith("done: 2 jobs (1 ok, 1 failed, 1 missing)") for line in lines)
    assert not [p for p in sweep_dir.rglob("*") if p.name.endswith((".tmp", ".partial"))]

    rerun = run_cli("-m", "size=16,32,48", f"hydra.sweep.dir={sweep_dir}")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "skipped: already ok" in rerun.stdout
    assert [read_metrics(d)["status"] for d in job_dirs(sweep_dir)] == ["ok", "ok", "ok"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_between_two_jobs_ends_like_any_stop(sweep_dir, sig):
    """The signal lands right after a job's `ok` line: while Hydra composes the next job."""
    args = [sys.executable, "experiments/run.py", "-m", "size=range(16,24)", "run.repeats=1", "device=cpu",
            f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("[2/8]") and " ok " in line:
            proc.send_signal(sig)
            break
    lines += proc.stdout.read().splitlines()
    said = "\n".join(lines)
    assert proc.wait(120) == 130, said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said
    assert any(line.startswith("not started: ") for line in lines), said
    assert any(line.startswith("interrupted: rerun the same command") for line in lines), said
    assert (sweep_dir / "report.html").is_file() and len(pd.read_csv(sweep_dir / "summary.csv")) >= 2


def _catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler of its own for `sig` (/proc's SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (sig - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_during_the_imports_is_said_in_words(sweep_dir, sig):
    """A stop as soon as run.py's first lines have run, while it imports Hydra and torch (a second
    or two): Ctrl-C printed a raw KeyboardInterrupt traceback, SIGTERM ended the process by the
    signal (exit 143) with nothing said. Now: exit 130, a line, nothing written."""
    args = [sys.executable, "experiments/run.py", "-m", "size=16", "device=cpu", f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not _catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(sig)
    said = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said
    # the handler is set before the imports, which take far longer than the poll: it lands in them
    assert said == "interrupted before the sweep started: nothing was written\n", said
    assert not (sweep_dir / "environment.json").exists()


def test_environment_file(sweep_dir):
    assert run_cli("-m", "size=16", f"hydra.sweep.dir={sweep_dir}").returncode == 0
    env = json.loads((sweep_dir / "environment.json").read_text())
    for key in ("python_version", "torch_version", "cuda_build", "driver_version", "gpus", "cpu_model",
                "hostname", "git_commit", "git_dirty", "command"):
        assert key in env, key
    assert env["command"][-3:] == ["size=16", f"hydra.sweep.dir={sweep_dir}", "run.repeats=1"]


MISBEHAVING = """
import ctypes
import sys
import threading
import time

import torch


def _workload(size, dtype, device):
    x = torch.ones(size, size, dtype=dtype, device=device)
    return torch.mm, (x, x)


def lingers(size, dtype, device):
    threading.Thread(target=time.sleep, args=(600,), daemon=False).start()  # never joined
    return _workload(size, dtype, device)


def exits(size, dtype, device):
    print("about to leave", flush=True)
    sys.exit(3)


def crashes(size, dtype, device):
    ctypes.string_at(0)  # a segfault in native code


class GaveUp(BaseException):  # not an Exception: some libraries raise their own like this
    pass


def gives_up(size, dtype, device):
    raise GaveUp("no more")
"""


@pytest.fixture
def misbehaving(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "misbehaving_module"
    folder.mkdir()
    (folder / "misbehaving.py").write_text(MISBEHAVING)
    return {"PYTHONPATH": str(folder)}


@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_a_finished_job_is_final_whatever_its_workload_leaves_running(sweep_dir, misbehaving, start):
    done = run_cli("-m", "workload=custom", "workload._target_=misbehaving:lingers", "size=8", "device=cpu",
                   f"run.start={start}", "run.job_timeout_s=30", f"hydra.sweep.dir={sweep_dir}", env=misbehaving,
                   timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (job,) = job_dirs(sweep_dir)
    assert read_metrics(job)["status"] == "ok" and "timeout" not in done.stdout


@pytest.mark.parametrize("factory, said", [
    ("exits", "the workload called sys.exit(3)"),
    ("crashes", "Fatal Python error: Segmentation fault"),
    ("gives_up", "GaveUp: no more"),  # said as the job's error, not "ended without a result"
])
def test_a_workload_that_exits_or_crashes_leaves_its_reason_and_its_last_words(sweep_dir, misbehaving, factory,
                                                                                 said):
    done = run_cli("-m", "workload=custom", f"workload._target_=misbehaving:{factory}", "size=8", "device=cpu",
                   f"hydra.sweep.dir={sweep_dir}", env=misbehaving, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    (job,) = job_dirs(sweep_dir)
    m = read_metrics(job)
    assert m["status"] == "failed"
    assert said in m["error"] + (m.get("stderr_tail") or "")
    if factory == "crashes":  # faulthandler: the Python stack of the crash is in the log
        assert "misbehaving.py" in m["stderr_tail"] and "crashes" in m["stderr_tail"]
    elif factory == "gives_up":
        assert m["error"] == "GaveUp: no more"
    else:
        assert m["exit_code"] == 1 and "about to leave" in (job / "job.log").read_text()


def test_every_command_that_reads_a_live_sweep_says_so(sweep_dir, slow_workload):
    args = [sys.executable, "experiments/run.py", "-m", "workload=custom", "workload._target_=slowbench:make",
            "workload.seconds=0,600", "size=8", "device=cpu", "run.repeats=1", f"hydra.sweep.dir={sweep_dir}"]
    sweep = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **slow_workload}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        for line in sweep.stdout:
            if line.startswith("[2/2]") and " ... " in line:  # the first job is done, the second sleeps
                break

        def analysis(*more: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "analysis", *more], cwd=ROOT, capture_output=True,
                                  text=True, timeout=120)

        warned = analysis(str(sweep_dir), "--out", str(sweep_dir.parent / "now"))
        assert f"warning: {sweep_dir} is being written by a sweep that is still running (pid {sweep.pid})" \
            in warned.stderr, warned.stderr
        assert (sweep_dir.parent / "now" / "summary.csv").is_file()
        refused = analysis(str(sweep_dir), "--strict")
        assert refused.returncode == 2 and "(--strict)" in refused.stderr
        compared = analysis("compare", str(sweep_dir), str(sweep_dir), "--out", str(sweep_dir.parent / "cmp"))
        assert compared.stderr.count("is being written by a sweep that is still running") == 2
    finally:
        sweep.kill()
        sweep.wait()
    quiet = subprocess.run([sys.executable, "-m", "analysis", str(sweep_dir), "--strict"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert "still running" not in quiet.stderr and quiet.returncode in (0, 1)


def test_a_compiled_cold_job_that_hit_a_shared_cache_is_not_called_cold(sweep_dir):
    done = run_cli("-m", "run=fast", "compile=true", "size=16", "device=cpu", f"hydra.sweep.dir={sweep_dir}",
                   repeats=2)
    assert done.returncode == 0, done.stdout + done.stderr
    second = read_metrics(job_dirs(sweep_dir)[1])  # the first compiled this very graph in this process
    assert second["inductor_cache_hits"] >= 1 and "Inductor's cache" in second["not_cold"]
    assert "(not cold: the compiled graph came from Inductor's cache" in done.stdout


@pytest.mark.slow
def test_a_stop_right_after_the_tally_is_never_the_signals_death(tmp_path):
    """SIGTERM as soon as the sweep has printed its tally (`done: ...`): it ends as a stop does
    (the `interrupted` line, 130) where the tally has not yet looked, else as it would have (0);
    never killed by the signal (-15: the interpreter's shutdown puts the default handler back,
    seen in 1 of 20 random stops) and never with a traceback."""
    for trial in range(3):
        proc = subprocess.Popen([sys.executable, "experiments/run.py", "-m", "size=16", "run.repeats=1", "device=cpu",
                                 "run.ceilings=off", f"hydra.sweep.dir={tmp_path / str(trial)}"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        said = []
        for line in proc.stdout:
            said.append(line)
            if line.startswith("done: "):
                proc.send_signal(signal.SIGTERM)
                break
        said.append(proc.stdout.read())
        code = proc.wait(60)
        assert code in (0, 130), "".join(said)
        assert (code == 130) == ("interrupted: rerun the same command" in "".join(said)), "".join(said)
        assert "Traceback" not in "".join(said)


def stop_at_random(sweep_dir: Path, delay: float) -> tuple[int, str]:
    """Start a sweep, wait for its first job's line, then `delay` seconds more, and SIGTERM it
    (nothing if it has ended). Returns its exit code and what it printed."""
    import threading

    proc = subprocess.Popen([sys.executable, "experiments/run.py", "-m", "size=16,17,18", "run.repeats=1",
                             "device=cpu", f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    lines = [next(proc.stdout).rstrip("\n")]
    while not lines[-1].startswith("[1/3]"):
        lines.append(next(proc.stdout).rstrip("\n"))

    def later() -> None:
        time.sleep(delay)
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    sender = threading.Thread(target=later)
    sender.start()
    lines += proc.stdout.read().splitlines()
    code = proc.wait(120)
    sender.join()
    return code, "\n".join(lines)


@pytest.mark.slow
def test_a_stop_at_any_moment_ends_the_same_way(tmp_path):
    """SIGTERM at random moments from the first job to the end, with a busy loop beside the sweep
    (load moves every moment): every outcome is the analysis of what finished, the `interrupted`
    line and exit 130 (or exit 0 where the sweep had ended), never a traceback. Counted; 12 stops
    here, PROFSWEEP_STOP_TRIALS=100 for the record."""
    import random

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        rng = random.Random(7)
        outcomes: dict[str, int] = {}
        trials = int(os.environ.get("PROFSWEEP_STOP_TRIALS", "12"))  # 100 for the record (docs/big-sweeps.md)
        for trial in range(trials):
            folder = tmp_path / f"s{trial}"
            code, said = stop_at_random(folder, rng.uniform(0.0, 12.0))
            assert "Traceback" not in said and "KeyboardInterrupt" not in said, said
            ok = sum(1 for p in folder.glob("*/metrics.json") if json.loads(p.read_text())["status"] == "ok")
            if code == 0:
                outcomes["ended before the stop"] = outcomes.get("ended before the stop", 0) + 1
                continue
            assert code == 130, said
            assert "interrupted: rerun the same command" in said, said
            if ok:
                assert (folder / "summary.csv").is_file() and (folder / "report.html").is_file(), said
            where = "after the last job" if ok == 3 else f"after {ok} of 3 jobs"
            outcomes[where] = outcomes.get(where, 0) + 1
        print(outcomes)
        assert sum(outcomes.values()) == trials
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.parametrize("text", ["[1]", "1", '"ok"', "null", "[" * 100_000])
def test_a_job_record_that_is_not_an_object_is_no_record(tmp_path, text):
    """A resumed sweep reads each job's metrics.json: a list, a number or nesting too deep is a
    job without a record (run again), never an AttributeError (a reviewer's `[1]`)."""
    from experiments.config import JobConfig
    from experiments.launchers import finished_record, read_record

    (tmp_path / "metrics.json").write_text(text)
    assert read_record(tmp_path) is None and finished_record(JobConfig(), tmp_path) is None


def test_a_job_whose_un_profiled_timing_failed_is_redone_on_resume_and_named_by_the_analysis(tmp_path):
    """Its twin killed (kill -9, the OOM killer): the job was ok without its main figure, never
    redone, and nothing said so (a reviewer's finding)."""
    from analysis.tables import analyse_sweep
    from experiments import records
    from experiments.config import JobConfig
    from experiments.launchers import finished_record
    from tests.conftest import hand_made_job, jitter

    config, job = JobConfig(), tmp_path / "job"
    job.mkdir()
    (job / "t.json").write_text('{"traceEvents": []}')
    ok = {**records.base_record(config, job), "status": "ok", "config_hash": records.config_hash(config),
          "finished_at": "2026-12-05T00:00:00", "timed_us_per_step": 21.0, "trace_file": "t.json"}
    (job / "metrics.json").write_text(json.dumps(ok))
    assert finished_record(config, job) == ok
    error = "the process timing the un-profiled steps was killed by signal 9 without a result"
    (job / "metrics.json").write_text(json.dumps({**ok, "timed_error": error}))
    assert finished_record(config, job) is None  # redone

    sweep = tmp_path / "sweep"
    hand_made_job(sweep, 0, jitter(100, 5))
    lost = hand_made_job(sweep, 1, jitter(100, 5), repeat=2)
    record = json.loads((lost / "metrics.json").read_text())
    record.update(timed_error=error, timed_us_per_step=None, timed_samples_us=None)
    (lost / "metrics.json").write_text(json.dumps(record))
    problems = analyse_sweep(sweep).problems
    assert problems == [(lost.name, f"no un-profiled timing ({error}): its grid point's step time comes from its "
                                    "other processes; rerun the same command to redo it")]


def test_a_job_ok_without_its_un_profiled_timing_says_so_on_its_progress_line(capsys):
    """Its twin killed: the line said `ok 0.3 s`, only the tally at the end said more (helper-41)."""
    from experiments.point import _print_outcome

    _print_outcome("[1/2] x", {"status": "ok", "timed_error": "the twin was killed by signal 9"}, 0.31)
    _print_outcome("[2/2] y", {"status": "ok"}, 1.0)
    assert capsys.readouterr().out == ("[1/2] x ok 0.3 s (no un-profiled timing: the twin was killed by signal 9)\n"
                                       "[2/2] y ok 1.0 s\n")


def _as_a_user(command: list[str]) -> list[str] | None:
    """`command` as a user whom permissions bind: root runs it without the capabilities that read
    any file (setpriv); None where neither is possible."""
    import shutil

    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        return None
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", "--", *command]


def test_folders_that_cannot_be_read_are_named_never_a_traceback_or_left_out(tmp_path):
    """A sweep folder this user may not read is refused by name (it read as 'not a sweep', or as a
    traceback in compare); a job folder it may not read is named as a problem, not left out."""
    from tests.conftest import ROOT

    sweep = tmp_path / "sweep"
    (sweep / "0_locked").mkdir(parents=True)
    (sweep / "0_locked").chmod(0)
    try:
        command = _as_a_user([sys.executable, "-m", "analysis", str(sweep), "--out", str(tmp_path / "out")])
        if command is None:
            pytest.skip("root without setpriv: permissions do not bind")
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert "Traceback" not in done.stderr, done.stderr
        assert "0_locked: cannot read this folder (permission denied)" in done.stdout + done.stderr
        sweep.chmod(0)
        for args in (["-m", "analysis", str(sweep)], ["-m", "analysis", "compare", str(sweep), str(sweep)]):
            done = subprocess.run(_as_a_user([sys.executable, *args]), cwd=ROOT, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert f"{sweep}: cannot read this folder (permission denied)" in done.stderr
    finally:
        sweep.chmod(0o755)
        (sweep / "0_locked").chmod(0o755)


def test_a_stopped_sweeps_jobs_that_never_ran_are_a_problem_of_its_analysis(tmp_path):
    """sweep.json plans 4 jobs and 1 folder exists (Ctrl-C after the first): the analysis names the
    3 that never ran, and so exits 1, instead of reading a quarter of a sweep as a whole one."""
    from analysis.tables import SweepTables, never_ran

    (tmp_path / "sweep.json").write_text(json.dumps({"jobs": 4, "grid_points": 2, "repeats": 2}))
    assert never_ran(tmp_path, 1).startswith("3 of 4 planned jobs never ran: the sweep was stopped before them")
    assert never_ran(tmp_path, 4) is None and never_ran(tmp_path, 5) is None  # a resumed sweep of another grid
    assert SweepTables(tmp_path).problems == [("sweep", never_ran(tmp_path, 0))]
    for plan in ('{"jobs": true}', '{"jobs": "4"}', "[4]", "not json", '{"jobs": 6, "gr', "", '{"jobs": -1}'):
        (tmp_path / "sweep.json").write_text(plan)  # damaged: said, as it hides how many never ran
        assert "sweep.json is damaged" in never_ran(tmp_path, 1)
    (tmp_path / "sweep.json").unlink()
    assert never_ran(tmp_path, 1) is None  # a single run, or a sweep from before sweep.json
    # a sweep still running (another process holds the folder's lock): its jobs are to come
    from profsweep.contract import SWEEP_LOCK_FILE

    (tmp_path / "sweep.json").write_text(json.dumps({"jobs": 4}))
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); f.write('1'); f.flush(); print('held', flush=True); "
                               "time.sleep(60)", str(tmp_path / SWEEP_LOCK_FILE)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert never_ran(tmp_path, 1) is None
    finally:
        holder.kill()
        holder.wait()
    assert never_ran(tmp_path, 1) is not None


def test_a_folder_that_holds_a_sweep_of_another_grid_is_refused(tmp_path, capsys):
    """Rerunning another grid into a sweep's folder merged the two (job numbers twice, one
    sweep.json overwritten; a reviewer's finding). The same grid resumes, more repeats or another
    launcher included."""
    from experiments.sweep_folder import refuse_another_grid
    from hydra_plugins.profsweep_grid import grid

    def plan(*args: str) -> None:
        axes = grid.axes(list(args))
        (tmp_path / "sweep.json").write_text(json.dumps(
            {"axes": [{"key": a.key, "overrides": list(a.strings)} for a in axes]}))

    plan("size=16,64", "run.repeats=2")
    for same in (["size=16,64"], ["size=16,64", "run.repeats=5", "hydra/launcher=joblib"], ["size=range(16,65,48)"],
                 ["size=16,64", "expect=['op aten::mm present']"],
                 ["size=16,64", "profiler.active=2"]):  # another configuration in the same folders: redone
        refuse_another_grid(tmp_path, grid.axes(same))  # a resume: no refusal
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as refused:
        refuse_another_grid(tmp_path, grid.axes(["size=32,64"]))
    assert refused.value.code == 2
    assert f"error: hydra.sweep.dir={tmp_path} holds a sweep of another grid (size=16,64 run.repeats=2), not of " \
           "this one (size=32,64)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        refuse_another_grid(tmp_path, grid.axes(["size=16,64", "dtype=fp32"]))
    # one-value overrides in another order are the same grid (a reviewer's resume)
    plan("size=16,64", "dtype=fp32", "device=cpu")
    refuse_another_grid(tmp_path, grid.axes(["device=cpu", "size=16,64", "dtype=fp32"]))
    with pytest.raises(SystemExit):  # swept keys in another order number the jobs otherwise
        plan("size=16,64", "dtype=fp32,bf16")
        refuse_another_grid(tmp_path, grid.axes(["dtype=fp32,bf16", "size=16,64"]))


def test_a_jobs_folder_or_another_tools_folder_is_refused_as_a_sweeps(tmp_path, capsys):
    """helper-52: a sweep run into an existing job's folder nested its job inside, and the report
    gave the old job's numbers as the new sweep's (exit 0); one run into a folder of another
    tool's runs tallied them as its failed jobs. A sweep's own folder (a resume) is no refusal."""
    from experiments.sweep_folder import refuse_what_is_no_sweep
    from tests.conftest import hand_made_job

    job = hand_made_job(tmp_path / "sweep", 0, [100.0])
    for folder, said in ((job, f"hydra.sweep.dir={job} is one job's or run's folder (it holds metrics.json)"),
                         (tmp_path / "other", f"hydra.sweep.dir={tmp_path / 'other'} is no profsweep sweep or run: "
                                              "run1/metrics.json is another tool's record (no schema_version")):
        if folder.name == "other":
            for name in ("run1", "run2"):
                (folder / name).mkdir(parents=True)
                (folder / name / "metrics.json").write_text('{"accuracy": 0.9}')
        with pytest.raises(SystemExit) as refused:
            refuse_what_is_no_sweep(folder)
        assert refused.value.code == 2 and said in capsys.readouterr().err
    refuse_what_is_no_sweep(tmp_path / "sweep")  # its jobs are profsweep's
    refuse_what_is_no_sweep(tmp_path / "new")
    assert capsys.readouterr().err == ""


def test_a_subdir_that_jobs_share_or_that_leaves_the_sweep_is_refused(capsys):
    """helper-52: hydra.sweep.subdir=x gave two jobs one folder (one record of two kept); an
    absolute or `..` one wrote the jobs where neither the analysis nor a resume finds them."""
    from omegaconf import OmegaConf

    from experiments.task import refuse_a_subdir_that_shares_or_leaves

    def check(subdir: str) -> str:
        config = OmegaConf.create({"hydra": {"sweep": {"subdir": subdir}}})
        try:
            refuse_a_subdir_that_shares_or_leaves(config)
        except SystemExit as refused:
            assert refused.code == 2
            return capsys.readouterr().err
        return ""

    assert "it must hold ${hydra.job.num}" in check("x")
    for bad in ("/tmp/${hydra.job.num}", "../../${hydra.job.num}", "${hydra.job.num}/x"):
        assert "it names one folder inside hydra.sweep.dir" in check(bad), bad
    for good in ("${hydra.job.num}_${size}", "run_${hydra.job.num}_${eager_compile:${compile}}", "${hydra:job.num}_x",
                 "${hydra.job.id}",  # helper-54: the job's number too
                 OmegaConf.load(ROOT / "conf" / "config.yaml").hydra.sweep._get_node("subdir")._value()):
        assert check(good) == "", good
    # a '/' an interpolation gives (${now:%H/%M}) is seen at the first job, before it runs
    from experiments.task import refuse_a_job_folder_outside

    refuse_a_job_folder_outside(Path("/tmp/s/0_x"), Path("/tmp/s"))
    with pytest.raises(SystemExit) as refused:
        refuse_a_job_folder_outside(Path("/tmp/s/n0_19/55"), Path("/tmp/s"))
    assert refused.value.code == 2 and "hydra.sweep.subdir put a job into /tmp/s/n0_19/55, not into a folder " \
        "directly inside hydra.sweep.dir=/tmp/s" in capsys.readouterr().err


FORKING_FACTORY = '''
import os, time, torch

def make(*, size, dtype, device, pids: str = ""):
    x = torch.ones(size, size, dtype=dtype, device=device)
    forked = []

    def step(a):
        if not forked:  # the first call, in the job and again in its twin: a child that outlives them
            pid = os.fork()
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            forked.append(pid)
            with open(pids, "a") as f:
                f.write(f"{pid}\\n")
        return a @ a
    return step, (x,)
'''


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_what_a_workload_forks_ends_with_its_job(tmp_path, start):
    """A process the workload forked kept the machine's device lock (the next job, and every other
    sweep, waited for it) and the twin's result pipe (the job waited the child's whole life);
    a reviewer's model forked one that slept 45 s. It is killed when its job ends."""
    from tests.conftest import alive

    (tmp_path / "forking.py").write_text(FORKING_FACTORY)
    pids = tmp_path / "pids.txt"
    done = run_cli("-m", "workload=custom", "workload._target_=forking:make", f"+workload.pids={pids}", "size=8",
                   "warmup=true,false", f"run.start={start}", f"hydra.sweep.dir={tmp_path / 's'}",
                   env={"PYTHONPATH": str(tmp_path)}, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [read_metrics(d) for d in job_dirs(tmp_path / "s")]
    assert all(r["status"] == "ok" and r["timed_us_per_step"] for r in records), records
    forked = [int(p) for p in pids.read_text().split()]
    assert len(forked) == 3 and not any(alive(p) for p in forked)  # warm job, cold job, its twin


def test_the_tally_fails_a_sweep_that_lost_a_jobs_un_profiled_timing(tmp_path, capsys):
    """A job ok without its un-profiled timing (its twin killed, `timed_error`) is a problem for the
    sweep's exit status, as it is for `analyse`'s: exit 1, the job named, the rerun that redoes it."""
    from experiments.sweep_folder import EXIT_FAILED_JOBS, tally

    dirs = []
    for name, extra in (("0_a", {}), ("1_b", {"timed_error": "the twin was killed by SIGKILL"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({"status": "ok", **extra}))
        dirs.append(tmp_path / name)
    tally(dirs[:1], tmp_path, 1)  # every job timed: exit 0
    with pytest.raises(SystemExit) as stopped:
        tally(dirs, tmp_path, 2)
    said = capsys.readouterr().out
    assert stopped.value.code == EXIT_FAILED_JOBS
    assert "done: 2 jobs (2 ok, 0 failed)" in said
    assert "no un-profiled timing: 1_b: the twin was killed by SIGKILL" in said
    assert f"rerun the same command into the same folder to redo it (hydra.run.dir={tmp_path};" in said  # no sweep.json


def test_the_tally_fails_a_sweep_that_skipped_every_job(tmp_path, capsys):
    """run.unavailable=skip on a machine that can run none of the grid: nothing was measured, and
    the sweep says so and exits 1 (it exited 0 with `0 ok, 0 failed, 3 skipped`: helper-37); one
    job measured beside the skipped ones is a sweep that ran."""
    from experiments.sweep_folder import EXIT_FAILED_JOBS, tally

    why = "workload.backend='efficient' needs CUDA (it is a CUDA kernel) and torch sees no CUDA device here"
    dirs = []
    for name, record in (("0_a", {"status": "skipped", "error": why}), ("1_b", {"status": "ok"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(record))
        dirs.append(tmp_path / name)
    with pytest.raises(SystemExit) as stopped:
        tally(dirs[:1], tmp_path, 1)
    said = capsys.readouterr().out
    assert stopped.value.code == EXIT_FAILED_JOBS
    assert "done: 1 job (0 ok, 0 failed, 1 skipped)" in said
    assert f"nothing measured: every job was skipped on this machine (run.unavailable=skip; {why})" in said
    tally(dirs, tmp_path, 2)  # one measured: exit 0
    assert "nothing measured" not in capsys.readouterr().out


def test_the_tally_names_and_fails_what_the_sweeps_own_analysis_found(tmp_path, capsys):
    """A trace cut short in an ok job: `python -m analysis` named it and exited 1, the sweep said
    `8 ok` and exited 0 (helper-38). The problems its analysis returned that the records do not
    say are named as the analysis names them, and fail the sweep; those the tally says already
    (a failed job) are not said twice."""
    from experiments.sweep_folder import EXIT_FAILED_JOBS, tally
    from profsweep.sweep_state import SWEEP

    dirs = []
    for name, record in (("0_a", {"status": "ok"}), ("1_b", {"status": "failed", "error": "RuntimeError: boom"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(record))
        dirs.append(tmp_path / name)
    SWEEP.reset()
    try:
        cut = ("0_a", "trace: t.json: not a complete JSON trace (no closing bracket)")
        SWEEP.analysis_problems = [cut]
        with pytest.raises(SystemExit) as stopped:
            tally(dirs[:1], tmp_path, 1)
        said = capsys.readouterr().out
        assert stopped.value.code == EXIT_FAILED_JOBS
        assert "  problem: 0_a: trace: t.json: not a complete JSON trace (no closing bracket)" in said
        assert "to redo it: remove its folder and rerun the same command into the same folder" in said
        SWEEP.analysis_problems = [cut, ("1_b", "failed: RuntimeError: boom")]
        with pytest.raises(SystemExit):
            tally(dirs, tmp_path, 2)
        said = capsys.readouterr().out
        assert said.count("boom") == 1 and "problem: 1_b" not in said and "problem: 0_a" in said
        # a job folder without a record (stopped before it wrote one): named, and a plain rerun redoes it
        SWEEP.analysis_problems = [("0_a", "missing: no metrics.json: the job was not run or did not finish")]
        with pytest.raises(SystemExit):
            tally(dirs[:1], tmp_path, 1)
        said = capsys.readouterr().out
        assert "problem: 0_a: missing: no metrics.json" in said and "remove its folder" not in said
        SWEEP.analysis_problems = []
        tally(dirs[:1], tmp_path, 1)  # nothing found: exit 0
    finally:
        SWEEP.reset()


def test_a_folder_holding_more_grid_points_than_its_sweep_planned_is_a_problem(tmp_path):
    """A rerun into a finished sweep with profiler.active=2, killed after some jobs: the folder
    held both configurations, the analysis said `8 jobs, 7 grid points` and exit 0, compare
    called the rest `measured in NEW only` (helper-38). Now the analysis names it."""
    from analysis.tables import analyse_sweep
    from tests.conftest import hand_made_job, jitter

    sweep = tmp_path / "sweep"
    redone = hand_made_job(sweep, 0, jitter(100, 5), profiler_active=2)
    for k in (2, 3):  # the rerun's first repeat; the earlier run's second and third, finished before it
        job = hand_made_job(sweep, k - 1, jitter(100, 5), repeat=k, profiler_active=3)
        record = json.loads((job / "metrics.json").read_text())
        (job / "metrics.json").write_text(json.dumps({**record, "finished_at": f"2026-12-06T10:0{k}:00"}))
    record = json.loads((redone / "metrics.json").read_text())
    (redone / "metrics.json").write_text(json.dumps({**record, "finished_at": "2026-12-06T11:00:00"}))
    (sweep / "sweep.json").write_text(json.dumps({"jobs": 3, "grid_points": 1, "repeats": 3}))
    problems = analyse_sweep(sweep).problems
    assert problems == [("sweep", "2 grid points in this folder where its sweep planned 1: "
                                  "1_matmul_add_8_bf16_cold_eager_r2, 2_matmul_add_8_bf16_cold_eager_r3 were measured "
                                  "with other settings than the rest of their grid point's (a rerun into this folder "
                                  "with changed settings that did not redo them: stopped before it did, or one that "
                                  "planned fewer repeats); rerun the last command into this folder to redo them, or "
                                  "remove their folders")]
    (sweep / "sweep.json").write_text(json.dumps({"jobs": 3, "grid_points": 2, "repeats": 3}))  # as planned
    assert analyse_sweep(sweep).problems == []


def test_a_stop_while_the_sweep_winds_down_is_noted_and_the_rest_of_the_wind_down_runs():
    """A SIGTERM while the fork server shut down, before stops were deferred, left the sweep with
    every job ok, no analysis and the `to go on` line (a loaded test run, 1 stop in 12): a stop
    raised by a wind-down hook is noted and the hooks after it run; a second stop, once one was
    noted, still abandons."""
    from profsweep.sweep_state import SweepState

    state, ran = SweepState(), []

    def stopped() -> None:
        raise KeyboardInterrupt("signal 15")

    state.reset()
    state.after_launching(stopped)
    state.after_launching(lambda: ran.append("shutdown"))
    state.launching_ended()
    assert state.stopped and ran == ["shutdown"]

    state.reset()
    state.stop_noted = True
    state.after_launching(stopped)
    with pytest.raises(KeyboardInterrupt):
        state.launching_ended()



@pytest.mark.slow
def test_a_sweep_whose_reader_went_away_runs_to_its_end(tmp_path):
    """`run.py -m ... | head -2`, or `| tee` stopped by the same Ctrl-C: the sweep died with a
    BrokenPipeError traceback at its next progress line, exit 1, its job left "killed while it
    ran" and no analysis (a reviewer's finding). What it prints then goes nowhere; it goes on."""
    import subprocess
    import sys

    from tests.conftest import ROOT, job_dirs, read_metrics

    sweep = subprocess.Popen([sys.executable, "experiments/run.py", "-m", "size=8,16", "run.repeats=1",
                              f"hydra.sweep.dir={tmp_path / 's'}"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    first = sweep.stdout.readline()
    assert first.startswith(b"sweep of 2 jobs"), first
    sweep.stdout.close()  # the reader goes away: the next line meets a broken pipe
    err = sweep.stderr.read().decode()
    assert sweep.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert [read_metrics(d)["status"] for d in job_dirs(tmp_path / "s")] == ["ok", "ok"]
    assert (tmp_path / "s" / "report.html").is_file()
    # stdout closed before Python starts (`>&-`, some cron set-ups): sys.stdout is None (helper-51)
    closed = subprocess.run(["bash", "-c", f"{sys.executable} experiments/run.py -m size=8 run.repeats=1 "
                             f"hydra.sweep.dir={tmp_path / 'c'} >&-"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr
    assert [read_metrics(d)["status"] for d in job_dirs(tmp_path / "c")] == ["ok"]


def stopped_while_waiting(tmp_path, args, wait_line, env=None) -> str:
    """A sweep (`args`) started while another program holds the CPU's lock, stopped (SIGINT) once
    it prints `wait_line`: its whole output, after it exited 130."""
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    locks = tmp_path / "locks"
    locks.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)",
                               str(locks / "cpu.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        where = "hydra.sweep.dir" if "-m" in args else "hydra.run.dir"
        sweep = subprocess.Popen([sys.executable, "experiments/run.py", *args, f"{where}={tmp_path / 's'}"],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 text=True, env={**os.environ, "PROFSWEEP_LOCK_DIR": str(locks), **(env or {})})
        lines = []
        for line in sweep.stdout:
            lines.append(line)
            if wait_line in line:
                sweep.send_signal(signal.SIGINT)
                break
        out = "".join(lines) + sweep.stdout.read()
        assert sweep.wait(timeout=120) == 130, out
    finally:
        holder.kill()
        holder.wait()
    return out


@pytest.mark.slow
def test_a_stop_while_a_job_waits_for_its_device_leaves_it_not_started(tmp_path):
    """A stop while the job waited for the CPU another program held was recorded as a job that
    failed, "interrupted: the sweep was stopped while this job ran" (a reviewer's finding): it
    never started, as the jobs after it, and its folder is not left behind."""
    out = stopped_while_waiting(tmp_path, ["-m", "size=8,16", "run.repeats=1", "run.ceilings=off"],
                                "[1/2] matmul_add size=8 bf16 cold eager waiting for the CPU (one job per device), "
                                "held by another process on this machine")
    assert "[1/2] matmul_add size=8 bf16 cold eager not started: the sweep was interrupted" in out, out
    assert "done: 0 jobs (0 ok, 0 failed, 2 missing)" in out, out
    assert "this job ran" not in out and "problem:" not in out, out
    assert not list((tmp_path / "s").glob("0_*")), "a folder of a job that never started"
    assert "not started: 2 jobs (the sweep was interrupted)" in out, out  # the one that waited counted too
    # a single run (no -m): not started either, never "failed: no metrics.json" (helper-51)
    single = tmp_path / "single"
    single.mkdir()
    out = stopped_while_waiting(single, ["size=8", "run.ceilings=off"],
                                "matmul_add size=8 bf16 cold eager waiting for the CPU (one job per device)")
    assert "done: 0 jobs (0 ok, 0 failed, 1 not started)" in out and "failed:" not in out, out


@pytest.mark.slow
def test_a_sweep_that_waits_for_the_device_to_measure_its_ceilings_says_so(tmp_path):
    """The ceilings measured before the first job waited for the CPU without a word: a sweep
    whose device another program held printed its first line and nothing for two minutes."""
    (tmp_path / "cache").mkdir()
    out = stopped_while_waiting(tmp_path, ["-m", "size=8", "run.repeats=1", "run.ceilings=measure"],
                                "this machine's cpu bf16 ceilings (measured before the first job): waiting for the "
                                "CPU (one job per device), held by another process on this machine",
                                env={"PROFSWEEP_CACHE_DIR": str(tmp_path / "cache")})
    assert "not started: 1 job (the sweep was interrupted)" in out and "done: 0 jobs (0 ok, 0 failed, 1 missing)" in out


def _holding(path: Path) -> subprocess.Popen:
    """Another process holding an exclusive flock on `path` (a sweep's folder lock, or an
    analysis's), its pid written in it."""
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); f.write(str(os.getpid())); f.flush(); "
                               "print('held', flush=True); time.sleep(60)", str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_an_analysis_of_a_live_sweep_never_overwrites_a_newer_one_nor_interleaves_with_another(tmp_path, monkeypatch):
    """helper-55: `python -m analysis FOLDER` started while the sweep ran, finishing after the
    sweep's own analysis at its end, replaced its report with one that called the last job
    'unfinished' beside the sweep's tables of every job; two analyses wrote into one folder at once."""
    import threading

    import analysis.tables
    from analysis import ANALYSIS_LOCK_FILE, NotWritten, analyse_folder
    from analysis.__main__ import main
    from profsweep.contract import SWEEP_LOCK_FILE
    from tests.conftest import hand_made_point, processes

    sweep = tmp_path / "s"
    hand_made_point(sweep, 0, processes(100))
    assert analyse_folder(sweep, progress=lambda line: None) == []
    report = sweep / "report.html"
    before = report.stat().st_mtime_ns
    read = analysis.tables.analyse_sweep

    def a_job_finishes_meanwhile(folder, progress):
        found = read(folder, progress)
        record = next(folder.glob("*/metrics.json"))
        os.utime(record, ns=(time.time_ns() + 10**9,) * 2)
        return found

    monkeypatch.setattr(analysis.tables, "analyse_sweep", a_job_finishes_meanwhile)
    said: list[str] = []
    sweeping = _holding(sweep / SWEEP_LOCK_FILE)
    try:
        with pytest.raises(NotWritten, match=f"not written: jobs of {sweep} finished while this analysis read it"):
            analyse_folder(sweep, progress=said.append)
        with pytest.raises(NotWritten):  # --out naming the folder itself is the folder
            analyse_folder(sweep, progress=said.append, out=sweep)
        assert main([str(sweep)]) == 1  # the command says it wrote nothing
        # a job that only started meanwhile (its placeholder record) is no job finished: written
        for record in sweep.glob("*/metrics.json"):
            os.utime(record)  # (back from the future the finished one was given)
        placeholder = sweep / "9_matmul_add_8_bf16_cold_eager" / "metrics.json"

        def a_job_starts_meanwhile(folder, progress):
            found = read(folder, progress)
            placeholder.parent.mkdir()
            placeholder.write_text(json.dumps({"status": "unfinished", "unfinished": True}))
            return found

        monkeypatch.setattr(analysis.tables, "analyse_sweep", a_job_starts_meanwhile)
        analyse_folder(sweep, progress=said.append)
        assert report.stat().st_mtime_ns > before
        for leftover in placeholder.parent.iterdir():
            leftover.unlink()
        placeholder.parent.rmdir()
        before = report.stat().st_mtime_ns
        monkeypatch.setattr(analysis.tables, "analyse_sweep", a_job_finishes_meanwhile)
    finally:
        sweeping.kill()
        sweeping.wait()
    assert report.stat().st_mtime_ns == before, "a view older than the folder's replaced its report"
    # the sweep over (or never live): the same analysis writes, as the folder's newest
    analyse_folder(sweep, progress=said.append)
    assert report.stat().st_mtime_ns > before
    # another analysis writing the folder: this one waits for it, then writes its own whole
    monkeypatch.setattr(analysis.tables, "analyse_sweep", read)
    before = report.stat().st_mtime_ns
    writing = _holding(sweep / ANALYSIS_LOCK_FILE)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (analyse_folder(sweep, progress=lambda line: None), done.set()))
    waiter.start()
    try:
        assert not done.wait(3) and report.stat().st_mtime_ns == before  # read, then waiting: nothing touched
    finally:
        writing.kill()
        writing.wait()
    waiter.join(120)
    assert done.is_set() and report.stat().st_mtime_ns > before


@pytest.mark.parametrize("when", ["before its folder", "after its folder", "after a single run's folder"])
def test_a_stop_before_the_sweeps_own_handler_says_whether_its_folder_was_made(tmp_path, when):
    """helper-55: a stop while Hydra composed the sweep (before any folder) said "rerun the same
    command into the same folder to go on", of a folder that was never made."""
    code = textwrap.dedent(f"""
        import runpy, sys
        import experiments.task as t
        if {when == "before its folder"!r}:
            def stop(self, config, **kwargs):
                raise KeyboardInterrupt
            t.SweepCallback.on_multirun_start = stop
        else:
            made = t.start_in
            def stop(*args, **kwargs):
                made(*args, **kwargs)
                raise KeyboardInterrupt
            t.start_in = stop
        sys.argv = (["experiments/run.py", "size=8", "hydra.run.dir={tmp_path / 's'}"] if {when.startswith("after a single")!r}
                    else ["experiments/run.py", "-m", "size=8", "hydra.sweep.dir={tmp_path / 's'}"])
        runpy.run_path("experiments/run.py", run_name="__main__")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stdout + done.stderr
    if when == "before its folder":
        assert "interrupted before the sweep started: nothing was written" in done.stdout, done.stdout
        assert not (tmp_path / "s").exists()
    else:
        assert f"interrupted: rerun the same command into the same folder ({tmp_path / 's'}) to go on" in done.stdout
