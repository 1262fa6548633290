"""The sweep side of a job: a child process that dies is recorded as failed, with its last words."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

from experiments.config import JobConfig
from experiments.point import run_task
from tests.conftest import ROOT


def test_a_killed_job_process_is_recorded_as_failed(tmp_path, monkeypatch, capsys):
    # Every interpreter started with this PYTHONPATH kills itself while starting up.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "print('about to die', file=sys.stderr, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(hook))
    job_dir = tmp_path / "0_job"
    record = run_task(JobConfig(size=8, device="cpu"), job_dir, 1, 3)

    assert record["status"] == "failed"
    assert "killed by SIGKILL" in record["error"]
    assert record["exit_code"] == -9 and "about to die" in record["stderr_tail"]
    assert json.loads((job_dir / "metrics.json").read_text()) == record
    assert record["size"] == 8 and record["workload"] == "matmul_add"
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[1/3] matmul_add size=8 bf16 cold eager ..."
    assert out[1].startswith("[1/3] matmul_add size=8 bf16 cold eager failed: ")


def test_a_stale_metrics_file_never_passes_for_a_new_result(tmp_path, monkeypatch):
    """The earlier run's record is replaced, in one step, by the unfinished one before the job's
    process starts (a kill at any moment leaves one or the other, never a folder without a
    record), and that by the job's failure."""
    job_dir = tmp_path / "0_job"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import json, os\n"
        f"seen = json.load(open({str(job_dir / 'metrics.json')!r}))\n"
        f"open({str(tmp_path / 'seen')!r}, 'w').write(json.dumps(seen))\n"
        "os._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(hook))
    job_dir.mkdir()
    (job_dir / "metrics.json").write_text(json.dumps({"status": "ok"}))
    record = run_task(JobConfig(size=8, device="cpu"), job_dir, 1, 1)
    assert record["status"] == "failed" and "exit code 3" in record["error"]
    seen = json.loads((tmp_path / "seen").read_text())  # what the job's process found on disk
    assert seen["unfinished"] is True and seen["status"] == "failed" and seen["size"] == 8
    # and never removed first (a kill right after would leave the folder without a record)
    code = ("import sys\n"
            "from pathlib import Path\n"
            "def hook(event, args):\n"
            "    if event == 'os.remove' and str(args[0]).endswith('metrics.json'):\n"
            "        raise SystemExit('metrics.json removed: ' + str(args[0]))\n"
            "sys.addaudithook(hook)\n"
            f"import os; os.environ['PYTHONPATH'] = {str(hook)!r}  # the job's process dies at once, as above\n"
            "from experiments.config import JobConfig\n"
            "from experiments.point import run_task\n"
            f"run_task(JobConfig(size=8, device='cpu'), Path({str(job_dir)!r}), 1, 1)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "removed" not in done.stderr, done.stderr


def test_a_long_job_log_keeps_its_first_and_last_part_and_says_what_was_cut(tmp_path):
    from experiments.launchers import _tail, cap_log

    log = tmp_path / "job.log"
    log.write_bytes(b"first line\n" + b"chatter\n" * 100_000 + b"last words\n")
    size = log.stat().st_size
    assert cap_log(log, keep=10_000) == size - 20_000
    text = log.read_text()
    assert text.startswith("first line\n") and text.endswith("last words\n")
    assert f"[... {size - 20_000:,} bytes of this log cut by profsweep" in text
    assert _tail(log, 1) == "last words"
    assert cap_log(log, keep=10_000) == 0  # short enough now


def test_a_cut_log_keeps_the_parts_the_job_started_in_its_middle(tmp_path):
    """A timeout names the part of the job it interrupted by the log's last phase line; one in the
    middle a long log loses was lost with it, and the timeout named an earlier part."""
    from experiments import records
    from experiments.launchers import PHASES_KEPT, cap_log

    def phase(text):
        return f"\n{records.PHASE_MARK}{text}\n".encode()

    log = tmp_path / "job.log"
    chatter = b"chatter " * 200_000  # 1.6 MB with no newline: a line longer than a block read
    middle = b"".join(phase(f"part {i}") + b"noise\n" * 1000 for i in range(PHASES_KEPT + 4))
    log.write_bytes(phase("building the workload") + b"x" * 5_000 + chatter + b"\n" + middle
                    + b"y" * 30_000 + b"\nnot a phase: " + records.PHASE_MARK.encode() + b"quoted\n"
                    + b"z" * 10_000 + b"\n")
    assert cap_log(log, keep=20_000) > 0
    text = log.read_text()
    assert records.last_phase(text) == f"part {PHASES_KEPT + 3}"
    kept = [line for line in text.splitlines() if line.startswith(records.PHASE_MARK)]
    assert kept == [f"{records.PHASE_MARK}building the workload",
                    *(f"{records.PHASE_MARK}part {i}" for i in range(4, PHASES_KEPT + 4))]
    assert "and the parts of the job it started in between:" in text

    # a phase line the cut's end goes through: its start in the middle, its end in the tail
    straddled = tmp_path / "straddled.log"
    body = b"x" * 30_000 + b"\n"
    line = phase("the one the cut goes through")
    straddled.write_bytes(body + phase("early") + body + line[:10] + b"" + line[10:] + b"y" * (2_000 - len(line) + 10))
    cap_log(straddled, keep=2_000)
    assert records.last_phase(straddled.read_text()) == "the one the cut goes through"

    plain = tmp_path / "plain.log"
    plain.write_bytes(b"chatter\n" * 100_000)
    cap_log(plain, keep=10_000)
    assert "in between" not in plain.read_text() and records.last_phase(plain.read_text()) is None


def test_scratch_folders_a_killed_process_left_are_cleared(tmp_path, monkeypatch):
    """A sweep or job killed by SIGKILL runs no cleanup: its private cache and provenance folders
    stayed in /tmp for good, non-empty after a compiled job (a reviewer's kills)."""
    import subprocess
    import sys
    import tempfile
    import time

    from experiments import point

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # a process that has exited: its pid names no process now (reuse aside)
    stale = [tmp_path / f"profsweep-cache-{dead}-abc", tmp_path / f"profsweep-provenance-{dead}-xyz"]
    live = tmp_path / f"profsweep-cache-{os.getpid()}-def"
    for folder in (*stale, live):
        (folder / "inductor").mkdir(parents=True)
    stale.append(tmp_path / f"profsweep-memory-{dead}-q1.json")  # a memory count's trace, a file
    stale[-1].write_text("{}")
    recent, old = tmp_path / "profsweep-cache-recent", tmp_path / "profsweep-provenance-old"  # no pid: an older profsweep
    for folder in (recent, old):
        folder.mkdir()
    week = time.time() - point.OLD_SCRATCH_S - 60
    os.utime(old, (week, week))
    stale.append(old)  # untouched for a week: no job's
    point.clear_stale_scratch()
    assert not any(f.exists() for f in stale) and live.exists() and recent.exists()


def test_resume_keeps_only_an_ok_record_that_says_what_its_job_measures(tmp_path):
    """helper-34: a record edited to size="abc", timed_us_per_step NaN was skipped as 'already ok'
    on resume, the sweep said 4 ok and exited 0 while its analysis named the job failed."""
    from experiments import records
    from experiments.launchers import finished_record

    config = JobConfig(device="cpu", size=16)
    trace = '{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}]}\n'
    (tmp_path / "t.json").write_text(trace)
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(trace.encode()))
    record = {**records.base_record(config, tmp_path), "status": "ok", "config_hash": records.config_hash(config),
              "finished_at": records.now_iso(), "timed_us_per_step": 12.5, "trace_file": "t.json"}
    path = tmp_path / records.METRICS_FILE

    def kept(**edit) -> bool:
        path.write_text(json.dumps({**record, **edit}))
        return finished_record(config, tmp_path) is not None

    assert kept() and kept(trace_file="a.json.gz") and kept(trace_file="a.json.gz;t.json")
    for edit in ({"size": "abc"}, {"size": 32}, {"compile": True}, {"timed_us_per_step": float("nan")},
                 {"timed_us_per_step": -1.0}, {"timed_us_per_step": "12"}, {"timed_us_per_step": None},
                 {"trace_file": None}, {"trace_file": "gone.json"}, {"trace_file": "t.json;gone.json"},
                 {"trace_file": "../t.json"}, {"schema_version": 0}, {"schema_version": None}):
        assert not kept(**edit), edit
    # each trace of the size the job wrote (trace_sizes): a gzip trace cut mid-stream is seen too
    sizes = {n: str((tmp_path / n).stat().st_size) for n in ("t.json", "a.json.gz")}
    assert kept(trace_file="a.json.gz;t.json", trace_sizes=f"{sizes['a.json.gz']};{sizes['t.json']}")
    gz = (tmp_path / "a.json.gz").read_bytes()
    (tmp_path / "a.json.gz").write_bytes(gz[:-6])  # its magic bytes there, its trailer cut
    assert kept(trace_file="a.json.gz") and not kept(trace_file="a.json.gz", trace_sizes=sizes["a.json.gz"])
    assert not kept(trace_sizes="12;34") and not kept(trace_sizes="big")  # a size for each trace, or none
    # a trace cut short since (helper-38: resume kept it, and the sweep said nothing of it)
    (tmp_path / "t.json").write_text(trace[: len(trace) // 2])
    (tmp_path / "b.json.gz").write_bytes(b"not gzip at all, but long enough")
    assert not kept() and not kept(trace_file="b.json.gz")
    path.unlink()
    os.mkfifo(path)  # a pipe where the record was: read, it would block the sweep for ever
    assert finished_record(config, tmp_path) is None


def test_a_failure_the_full_disk_kept_from_its_record_never_reads_killed(tmp_path, monkeypatch, capsys):
    """On a full disk the sweep's failure record was not written and the placeholder stayed: the
    job's record, the sweep's tally and a later analysis said "the sweep was killed while it ran"
    (a reviewer's finding). The placeholder is taken away, which frees its bytes, and the record
    tried again; where that fails too, the folder holds no record at all."""
    import errno

    from experiments import launchers, records
    from experiments.config import JobConfig

    config, job_dir = JobConfig(size=8, device="cpu"), tmp_path / "0_job"
    job_dir.mkdir()
    real = records.write_json
    full = {"left": 1}

    def write(path, data):
        if full["left"] > 0:
            full["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    launchers.unfinished_record(config, job_dir)
    monkeypatch.setattr(records, "write_json", write)
    record = launchers.failure_record(config, job_dir, "disk full: the trace could not be written")
    saved = json.loads((job_dir / "metrics.json").read_text())
    assert saved["status"] == "failed" and saved["error"] == record["error"]  # written on the second try
    monkeypatch.setattr(records, "write_json", real)
    launchers.unfinished_record(config, job_dir)
    full["left"] = 2
    monkeypatch.setattr(records, "write_json", write)
    launchers.failure_record(config, job_dir, "disk full: the trace could not be written")
    assert not (job_dir / "metrics.json").exists()  # no record, never the placeholder's "killed"
    assert "metrics.json of 0_job not written: disk full" in capsys.readouterr().out
    # a record the job wrote itself is never taken away
    monkeypatch.setattr(records, "write_json", real)
    real(job_dir / "metrics.json", {**records.base_record(config, job_dir), "status": "ok"})
    full["left"] = 2
    monkeypatch.setattr(records, "write_json", write)
    launchers.failure_record(config, job_dir, "disk full")
    assert json.loads((job_dir / "metrics.json").read_text())["status"] == "ok"


def test_a_failed_jobs_progress_line_is_one_line(capsys):
    """helper-58: Inductor's CppCompileError (a g++ command and its warnings) spilled 35 lines under
    the job's progress line; the closing tally already said it in one."""
    from experiments.point import _print_outcome
    from profsweep.contract import LINE

    error = "InductorError: CppCompileError: C++ compile error\n\nCommand:\ng++ " + "-O3 " * 400 + "\nOutput:\n..."
    _print_outcome("[2/2] multi", {"status": "failed", "error": error}, 17.0)
    out = capsys.readouterr().out
    assert out == "[2/2] multi failed: InductorError: CppCompileError: C++ compile error (the rest in job.log) (17.0 s)\n"
    assert len(out) < LINE + 60
