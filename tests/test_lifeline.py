"""A sweep that dies leaves nothing running, and no two sweeps ever write into one folder."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, alive, run_cli, wait_for
from experiments.launchers import oom_kills
from profsweep.progress import duration
from profsweep.sweep_state import SweepState

def _descendants(pid: int) -> list[int]:
    """Every live process below `pid` (a job's process, the fork server's template and its jobs)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [c for c, p in parents.items() if p in frontier]
        found += children
        frontier = children
    return found


def _job_started(sweep_dir: Path) -> bool:
    return any(sweep_dir.glob("0_*/job.log"))


def _users(folder: Path) -> set[int]:
    """The live processes whose working folder, or a file they hold open, lies in `folder`."""
    inside = str(folder.resolve())
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not alive(int(entry.name)):
            continue
        try:
            paths = [os.readlink(entry / "cwd")] + [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if any(p == inside or p.startswith(inside + os.sep) for p in paths):
            found.add(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_a_killed_sweep_leaves_no_job_running_and_a_second_sweep_is_refused_while_it_lives(tmp_path, start,
                                                                                           slow_workload):
    sweep_dir = tmp_path / "sweep"
    args = [sys.executable, "experiments/run.py", "-m", "workload=custom", "workload._target_=slowbench:make",
            "workload.seconds=600", "size=8,16", "device=cpu", f"run.start={start}", f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, **slow_workload}
    below: list[int] = []
    sweep = subprocess.Popen(args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _job_started(sweep_dir), 60), "the first job never started"
        assert wait_for(lambda: bool(_users(sweep_dir) & set(_descendants(sweep.pid))), 30), \
            "no job process under the sweep"  # its process is up, in its folder: the factory sleeps
        below = _descendants(sweep.pid)

        second = run_cli(*args[2:], env=slow_workload, timeout=120)
        assert second.returncode == 2
        assert f"is in use by another sweep that is still running (pid {sweep.pid})" in second.stderr
        assert "hydra.sweep.dir=" in second.stderr

        sweep.kill()  # kill -9: no handler, no finally
        sweep.wait()
        assert wait_for(lambda: not any(alive(p) for p in below), 10), "a job process outlived the sweep"
        # and nothing else is left to write: no process has a file open in the sweep's folder or works there
        assert wait_for(lambda: not _users(sweep_dir), 10), f"processes still in {sweep_dir}: {_users(sweep_dir)}"

        # the job it was running left a failure with its settings, which the analysis shows as such
        (record_file,) = sweep_dir.glob("0_*/metrics.json")
        record = json.loads(record_file.read_text())
        assert record["status"] == "failed" and record["error"].startswith("unfinished: ")
        assert record["size"] == 8 and record["workload_target"] == "slowbench:make"
        analysed = subprocess.run([sys.executable, "-m", "analysis", str(sweep_dir)], cwd=ROOT,
                                  capture_output=True, text=True, timeout=300)
        assert analysed.returncode == 1 and "Traceback" not in analysed.stderr
        assert f"{record_file.parent.name}: failed: unfinished: " in analysed.stdout
        with open(sweep_dir / "summary.csv", newline="") as f:
            summary = list(csv.DictReader(f))
        assert [(p["size"], p["status"]) for p in summary] == [("8", "failed")]  # the one point that started
    finally:
        if sweep.poll() is None:
            sweep.kill()
        for pid in below:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_stop_before_the_sweep_has_its_own_handlers_is_said_and_exits_130(tmp_path):
    """SIGTERM while the sweep made its folder or wrote environment.json ended in a traceback and
    exit 1 (a reviewer's finding). An audit hook stands in for the signal: a KeyboardInterrupt
    from the folder's first mkdir, where the stop landed."""
    hook = tmp_path / "hook"
    hook.mkdir()
    sweep_dir = tmp_path / "sweep"
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        f"def stop(event, args, target={str(sweep_dir)!r}):\n"
        "    if event == 'os.mkdir' and str(args[0]) == target:\n"
        "        raise KeyboardInterrupt('signal 15')\n"
        "sys.addaudithook(stop)\n")
    done = run_cli("-m", "size=8,16", "device=cpu", f"hydra.sweep.dir={sweep_dir}", env={"PYTHONPATH": str(hook)},
                   timeout=300)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "interrupted: rerun the same command" in done.stdout


def test_an_output_folder_that_cannot_be_created_is_refused_naming_the_key(tmp_path):
    done = run_cli("size=8", "device=cpu", "hydra.run.dir=/proc/profsweep/x")
    assert done.returncode == 2
    assert "error: hydra.run.dir=/proc/profsweep/x: cannot create this folder" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_cli("-m", "size=8", "device=cpu", "hydra.sweep.dir=/proc/profsweep/x")
    assert done.returncode == 2 and "error: hydra.sweep.dir=/proc/profsweep/x" in done.stderr


def test_durations_read_as_a_person_writes_them():
    assert duration(0) == "0 s" and duration(42.4) == "42 s"
    assert duration(190) == "3 min 10 s" and duration(180) == "3 min"
    assert duration(14 * 60 + 20, rough=True) == "14 min"
    assert duration(2 * 3600 + 5 * 60 + 9) == "2 h 5 min"


def test_the_progress_line_estimates_what_is_left_from_the_jobs_done(monkeypatch):
    clock = iter([1000.0, 1000.0 + 190])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    state = SweepState()
    state.reset()
    state.durations = [10.0] * 16  # 16 jobs done, 10 s each: 96 left at job 17 of 112
    assert state.progress_line(17, 112) == " 3 min 10 s elapsed, ~16 min left"
    assert state.progress_line(1, 112) == ""  # nothing to estimate from before the first job


def test_oom_kills_are_read_from_cgroup_v2_and_v1(tmp_path):
    (tmp_path / "cg").write_text("0::/jobs/a\n")
    events = tmp_path / "root" / "jobs" / "a" / "memory.events"
    events.parent.mkdir(parents=True)
    events.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    assert oom_kills(tmp_path / "root", tmp_path / "cg") == 2
    (tmp_path / "cg1").write_text("4:memory:/box\n0::/\n")
    v1 = tmp_path / "root1" / "memory" / "box" / "memory.oom_control"
    v1.parent.mkdir(parents=True)
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert oom_kills(tmp_path / "root1", tmp_path / "cg1") == 5
    assert oom_kills(tmp_path / "nothing", tmp_path / "missing") is None


def _can_mount_tmpfs(folder: Path) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k none {folder}"],
                          capture_output=True)
    return done.returncode == 0


@pytest.mark.slow
def test_a_full_disk_fails_the_job_that_met_it_and_stops_the_sweep(tmp_path):
    """A real full disk: a 160 kB tmpfs in a private mount namespace holds one job's folder."""
    disk = tmp_path / "disk"
    if not _can_mount_tmpfs(disk):
        pytest.skip("cannot mount a tmpfs here (unshare -rm not permitted)")
    sweep_dir = disk / "sweep"
    script = (f"mount -t tmpfs -o size=160k none {disk} && {sys.executable} experiments/run.py -m "
              f"size=8,16,32 device=cpu profiler.active=30 run.repeats=1 hydra.sweep.dir={sweep_dir}; "
              f"echo rc=$?; cat {sweep_dir}/0_*/metrics.json")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert "rc=1" in out, out + done.stderr
    assert "[1/3] matmul_add size=8 bf16 cold eager ok" in out
    assert "[2/3] matmul_add size=16 bf16 cold eager failed: disk full: " in out
    assert "not started: 1 job (the disk is full)" in out and "[3/3]" not in out
    assert "stopped: disk full: " in out and "rerun the same command" in out
    assert '"status": "ok"' in out  # the job that finished keeps its record
    assert "Traceback" not in out + done.stderr


@pytest.mark.slow
def test_gzipped_traces_are_written_by_torch_and_read_by_the_analysis(tmp_path):
    out = tmp_path / "run"
    done = run_cli("size=8", "device=cpu", "profiler.gzip=true", f"hydra.run.dir={out}")
    assert done.returncode == 0, done.stderr
    import gzip
    import json

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["trace_file"] == "8_bf16_cold_eager.json.gz" and metrics["profiler_gzip"] is True
    events = json.loads(gzip.decompress((out / metrics["trace_file"]).read_bytes()))["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events)
    report = (out / "report.html").read_text()
    assert "Traces: 1 file, " in report and "profiler.gzip=true</code> writes them" not in report
    import pandas as pd

    row = pd.read_csv(out / "summary.csv").iloc[0]
    assert row["trace_bytes"] == (out / metrics["trace_file"]).stat().st_size
    assert row["host_us_per_step"] > 0


def _memory_cgroup(limit: int) -> Path | None:
    """A memory cgroup of `limit` bytes this test may put a sweep into (v1 or v2), else None."""
    for folder, limit_file in ((Path("/sys/fs/cgroup/memory/profsweep_test"), "memory.limit_in_bytes"),
                               (Path("/sys/fs/cgroup/profsweep_test"), "memory.max")):
        try:
            folder.mkdir(exist_ok=True)
            (folder / limit_file).write_text(str(limit))
            return folder
        except OSError:
            continue
    return None


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_a_job_killed_by_the_oom_killer_is_recorded_so(tmp_path, start):
    group = _memory_cgroup(400 * 2**20)
    if group is None:
        pytest.skip("no memory cgroup this test may create (needs root)")
    out = tmp_path / "run"  # matmul_add 12000 fp32: three 576 MB tensors in a 400 MB cgroup
    done = subprocess.run(["sh", "-c", f"echo $$ > {group}/cgroup.procs && exec {sys.executable} experiments/run.py "
                           f"size=12000 dtype=fp32 device=cpu run.start={start} hydra.run.dir={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads((out / "metrics.json").read_text())["error"]
    assert error.startswith("out of memory: the kernel's OOM killer killed the job"), error


@pytest.mark.slow
def test_a_disk_that_fills_during_the_analysis_fails_the_sweep_and_names_the_file(tmp_path):
    """All jobs fit in a 300 kB tmpfs, the plots do not: the sweep exits 1 and says which file."""
    disk = tmp_path / "disk"
    if not _can_mount_tmpfs(disk):
        pytest.skip("cannot mount a tmpfs here (unshare -rm not permitted)")
    script = (f"mount -t tmpfs -o size=300k none {disk} && {sys.executable} experiments/run.py -m "
              f"size=8,16 device=cpu run.repeats=1 hydra.sweep.dir={disk / 'sweep'}; echo rc=$?")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert "done: 2 jobs (2 ok, 0 failed)" in done.stdout, done.stdout + done.stderr
    assert "rc=1" in done.stdout
    assert re.search(r"analysis not written: disk full: cannot write \S+: No space left on device", done.stderr)
    assert "redo it with: python -m analysis" in done.stderr and "Traceback" not in done.stderr


def test_a_read_only_sweep_folder_is_named_and_analysed_elsewhere_with_out(tmp_path):
    from tests.conftest import hand_made_job, jitter

    disk = tmp_path / "disk"
    if not _can_mount_tmpfs(disk):
        pytest.skip("cannot mount a tmpfs here (unshare -rm not permitted)")
    seed = tmp_path / "seed"
    hand_made_job(seed, 0, jitter(100, 5))
    out = tmp_path / "elsewhere"
    script = (f"mount -t tmpfs -o size=4m none {disk} && cp -r {seed} {disk}/sweep && mount -o remount,ro {disk} && "
              f"{sys.executable} -m analysis {disk}/sweep; echo rc=$?; "
              f"{sys.executable} -m analysis {disk}/sweep --out {out}; echo rc=$?")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.count("rc=") == 2, done.stdout + done.stderr
    first, second = re.findall(r"rc=(\d+)", done.stdout)
    assert first == "1" and f"error: cannot write {disk}/sweep/" in done.stderr and "Read-only file system" in done.stderr
    assert "Traceback" not in done.stderr
    assert second == "0" and (out / "summary.csv").is_file() and (out / "report.html").is_file()
    assert "../disk/sweep/0_matmul_add_8_bf16_cold_eager/t.json" in (out / "report.html").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_analysis_drawing_processes_die_with_it():
    """helper-55: kill -9 of `python -m analysis` left its forked drawing processes running; they
    wrote their figures into plots/ after it died, and a rerun's could be overwritten by them."""
    code = (
        "import multiprocessing, os, time\n"
        "from analysis.report.plots import _quiet_worker\n"
        "pool = multiprocessing.get_context('fork').Pool(1, initializer=_quiet_worker, initargs=(os.getpid(),))\n"
        "print(pool.apply(os.getpid), flush=True)\n"
        "pool.apply_async(time.sleep, (60,))\n"
        "time.sleep(60)\n")
    analysis = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        worker = int(analysis.stdout.readline())
        assert alive(worker)
        analysis.kill()
        analysis.wait()
        assert wait_for(lambda: not alive(worker), 10), "a drawing process outlived the analysis"
    finally:
        analysis.kill()
