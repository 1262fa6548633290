"""The sweep side of a job: a child process that dies is recorded as failed, with its last words."""

from __future__ import annotations

import json

from experiments.config import JobConfig
from experiments.point import run_task


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
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(hook))
    job_dir = tmp_path / "0_job"
    job_dir.mkdir()
    (job_dir / "metrics.json").write_text(json.dumps({"status": "ok"}))
    record = run_task(JobConfig(size=8, device="cpu"), job_dir, 1, 1)
    assert record["status"] == "failed" and "exit code 3" in record["error"]


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
