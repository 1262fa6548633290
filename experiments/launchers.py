"""How a job's process starts, behind one interface (as optimum-benchmark's launchers):

    launcher_for(config).launch(config, job_dir, env, slot, slot_fd) -> the job's record

    InProcess         run.isolation=none   the job runs in the sweep's own process
    FreshInterpreter  run.start=fresh      `python -m experiments.job CONFIG` per job
    Forked            run.start=fork       forked from the fork server's template (experiments.
                                           forkserver); a fresh interpreter where it cannot

The job itself turns any failure of its workload into its record (experiments.job.run_job); a
launcher adds only how the process ended (a kill, a timeout, an exit without a record), in one
failure record (`failure_record`). The sweep process never imports torch for a job in a process
of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from experiments import forkserver, records
from experiments.config import JobConfig, config_to_dict
from experiments.lifeline import PARENT_ENV
from profsweep.contract import read_json
from profsweep.machine import cgroup_dirs
from experiments.slots import CPU_SLOT

LOG_TAIL_LINES = 20
LOG_KEEP_BYTES = 1 << 20  # a job's log keeps its first and last MiB


class Launcher:
    """One way to start a job's process; `launch` returns the job's record, failed or not."""

    def launch(self, config: JobConfig, job_dir: Path, env: dict[str, str], slot: str, slot_fd: int) -> dict[str, Any]:
        """Run the job with `env` added to its environment, on the device `slot` the sweep holds
        (the lock's `slot_fd` is inherited by a job's own process)."""
        raise NotImplementedError

    def start_in_background(self) -> None:
        """Start what the jobs will need (seconds of work) while the sweep still checks its grid."""


def launcher_for(config: JobConfig) -> Launcher:
    """The launcher of run.isolation and run.start."""
    if config.run.isolation != "process":
        return InProcess()
    return Forked() if config.run.start == "fork" else FreshInterpreter()


class InProcess(Launcher):
    """The job in this process (run.isolation=none): quick, not a cold start."""

    def launch(self, config: JobConfig, job_dir: Path, env: dict[str, str], slot: str, slot_fd: int) -> dict[str, Any]:
        from experiments.job import run_job  # imports torch: only for isolation=none

        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        try:
            return run_job(config, job_dir)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class ProcessEnd(NamedTuple):
    """How a job's own process ended."""

    returncode: int  # as subprocess gives it: the exit code, or -N when signal N killed it
    timed_out: bool  # killed after run.job_timeout_s
    oom_kills_before: int | None  # the cgroup's OOM kill count when the job started


class ChildProcess(Launcher):
    """The job in a process of its own, which holds the device slot with this one (it inherits the
    lock's fd) and dies with this one (experiments.lifeline)."""

    def launch(self, config: JobConfig, job_dir: Path, env: dict[str, str], slot: str, slot_fd: int) -> dict[str, Any]:
        config_path = job_dir / records.CONFIG_FILE
        records.write_json(config_path, config_to_dict(config))
        log_path = job_dir / records.LOG_FILE
        timeout = config.run.job_timeout_s or None
        ooms_before = oom_kills()
        device = {} if slot == CPU_SLOT else {"CUDA_VISIBLE_DEVICES": slot}
        job_env = {**os.environ, **env, **device, PARENT_ENV: str(os.getpid())}
        try:
            end = ProcessEnd(self._run(config_path, log_path, job_env, timeout, slot_fd), False, ooms_before)
        except subprocess.TimeoutExpired:  # the job has been killed
            end = ProcessEnd(-signal.SIGKILL, True, ooms_before)
        except forkserver.ForkServerError as exc:  # the template died under the job
            return failure_record(config, job_dir, _fork_server_failure(exc, ooms_before),
                                  stderr_tail=_tail(log_path))
        return _record_of(config, job_dir, log_path, end, timeout)

    def _run(self, config_path: Path, log_path: Path, env: dict[str, str], timeout: float | None,
             slot_fd: int) -> int:
        """Start the job's process and wait for it; its return code, as subprocess.run gives it."""
        raise NotImplementedError


class FreshInterpreter(ChildProcess):
    """`python -m experiments.job CONFIG` (run.start=fresh): a new interpreter imports torch."""

    def _run(self, config_path: Path, log_path: Path, env: dict[str, str], timeout: float | None,
             slot_fd: int) -> int:
        with open(log_path, "wb") as log:
            # its own session, so that what it leaves running (a process its workload forked, which
            # holds the device lock and its pipes) is killed with it when it ends or times out
            proc = subprocess.Popen([sys.executable, "-m", "experiments.job", str(config_path)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    pass_fds=(slot_fd,), start_new_session=True)
            if not hasattr(os, "waitid"):  # no wait without reaping (macOS): reaped, then its group by its id
                try:
                    return proc.wait(timeout=timeout)
                finally:
                    forkserver.kill_group(proc.pid, leader=False)
            try:
                forkserver.wait_unreaped(proc.pid, timeout)
            except BaseException:  # its timeout, or a stop of the sweep: the job and what it started
                forkserver.kill_group(proc.pid)
                proc.wait()
                raise
            forkserver.kill_group(proc.pid, leader=False)  # ended, not reaped yet: its pid is still its group's
            return proc.wait()


class Forked(ChildProcess):
    """Forked from the fork server's template (run.start=fork), which imported torch and
    initialised nothing; a fresh interpreter where fork is unavailable or the template cannot start."""

    def _run(self, config_path: Path, log_path: Path, env: dict[str, str], timeout: float | None,
             slot_fd: int) -> int:
        server = forkserver.shared()
        if server is None:
            return FreshInterpreter()._run(config_path, log_path, env, timeout, slot_fd)
        return server.run(config_path, log_path, env, timeout, keep_fds=[slot_fd])

    def start_in_background(self) -> None:
        threading.Thread(target=forkserver.shared, name="fork-server-start", daemon=True).start()


# --- how the process ended, in the job's record ----------------------------------------------------


def _record_of(config: JobConfig, job_dir: Path, log_path: Path, end: ProcessEnd, timeout: float | None
               ) -> dict[str, Any]:
    """The job's own ok record; else the failure record: what the job recorded (if anything) and
    how its process ended, with its log's last lines."""
    cap_log(log_path)
    record = read_record(job_dir)
    if end.timed_out and finished_record(config, job_dir) is not None:
        return record  # it had written its ok record: the kill ended only what it left running
    if end.timed_out:
        phase = records.last_phase(_whole(log_path))
        record, error = None, (f"timeout: still running after run.job_timeout_s={timeout} s, killed"
                               + (f" during {phase}" if phase else ""))
    elif end.returncode == 0 and record is not None and record.get("status") == "ok":
        return record
    elif record is None:
        error = (f"{records.DISK_FULL}: the job could not write its results into {job_dir}"
                 if end.returncode == records.EXIT_DISK_FULL else
                 f"the job's process ended without a result ({_describe_exit(end.returncode)})")
    else:
        error = record["error"]  # the job's own words
    if end.returncode == -signal.SIGKILL and not end.timed_out:
        error = _killed(end.oom_kills_before, error)
    return failure_record(config, job_dir, error, record=record, exit_code=end.returncode,
                          stderr_tail=_tail(log_path))


def failure_record(config: JobConfig, job_dir: Path, error: str, record: dict[str, Any] | None = None,
                   **how_it_ended: Any) -> dict[str, Any]:
    """The one failure record the sweep writes for a job: the job's own record (or the fields every
    record has), failed with `error`, plus how its process ended; saved into its folder."""
    record = records.base_record(config, job_dir) if record is None else record
    record["error"] = error
    record["status"] = "failed"
    record.update(how_it_ended)
    _save(job_dir, record)
    return record


def _save(job_dir: Path, record: dict[str, Any]) -> None:
    """The sweep's record of a job that failed. On a full disk, the placeholder that said the
    sweep was killed (unfinished_record) is taken away first, which frees its bytes, and the
    record tried again: where it still cannot be written, the folder holds no record (a resume
    redoes the job) and the terminal says why, never "killed"."""
    path = job_dir / records.METRICS_FILE
    for _ in range(2):  # the second after the placeholder is gone
        try:
            records.write_json(path, record)
            return
        except OSError as exc:
            if not records.disk_full(exc):
                raise
            error = exc
        if read_record(job_dir) is not None:  # a record the job wrote itself stays
            break
        path.unlink(missing_ok=True)  # the placeholder, or nothing
    print(f"  {records.METRICS_FILE} of {job_dir.name} not written: {records.DISK_FULL} ({error})", flush=True)


def _killed(ooms_before: int | None, error: str) -> str:
    """A SIGKILL in words: the OOM killer's where the cgroup counted a kill, else either."""
    ooms = _oom_kills_since(ooms_before)
    if ooms is not None:
        return ("out of memory: the kernel's OOM killer killed the job's process (SIGKILL; "
                f"cgroup oom_kill count {ooms_before} -> {ooms})")
    return ("killed by SIGKILL: the kernel's out-of-memory killer or a kill -9 "
            f"(this machine does not say which); {error}")


def _fork_server_failure(exc: forkserver.ForkServerError, ooms_before: int | None) -> str:
    """The fork server's template died while the job ran: the OOM killer's doing where the cgroup
    counted a kill."""
    ooms = _oom_kills_since(ooms_before)
    if ooms is not None:
        return (f"out of memory: the kernel's OOM killer killed the job or its fork server's "
                f"template (cgroup oom_kill count {ooms_before} -> {ooms}): {exc}")
    return f"the fork server failed while the job ran: {exc}"


def _oom_kills_since(before: int | None) -> int | None:
    """The cgroup's OOM kill count now, when it grew since `before`; else None."""
    ooms = oom_kills()
    return ooms if ooms is not None and before is not None and ooms > before else None


def oom_kills(root: Path = Path("/sys/fs/cgroup"), cgroups: Path = Path("/proc/self/cgroup")) -> int | None:
    """How many processes the OOM killer has killed in this process's memory cgroup (cgroup v2
    memory.events, or v1 memory.oom_control), or None where the machine does not say."""
    candidates = ([d / "memory.events" for d in cgroup_dirs("", root, cgroups)]
                  + [d / "memory.oom_control" for d in cgroup_dirs("memory", root, cgroups)])
    for events in candidates:
        try:
            lines = events.read_text(encoding="ascii").splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def finished_record(config: JobConfig, job_dir: Path) -> dict[str, Any] | None:
    """The job's own ok record of this configuration, once it has written it (final); one whose
    un-profiled timing failed (its twin killed, say), whose trace is gone or cut short, or written
    in another schema of metrics.json (an earlier profsweep's: the analysis reads it only as far
    as its fields allow) is not: a resume redoes it."""
    record = read_record(job_dir)
    if (record and record.get("status") == "ok" and record.get("schema_version") == records.SCHEMA_VERSION
            and record.get("config_hash") == records.config_hash(config)
            and record.get("finished_at") and not record.get("timed_error") and _measured(record, config)
            and _trace_whole(job_dir, record)):
        return record
    return None


def _trace_whole(job_dir: Path, record: dict[str, Any]) -> bool:
    """Whether the traces the record names (`a.json;b.json` for profiler.repeat > 1) are there and
    whole: each of the size the job wrote (`trace_sizes`), or, in a record without it, whole as far
    as its ends show (a JSON object's braces; gzip's magic bytes). Read without opening more than
    64 bytes at each end: one cut short or removed since is no result to keep on resume (its
    analysis names it a problem)."""
    names = record.get("trace_file")
    if not isinstance(names, str) or not names:
        return False
    sizes = record.get("trace_sizes")  # None in a record from before it: the ends decide
    if sizes is not None:
        sizes = str(sizes).split(";")
        if len(sizes) != len(names.split(";")) or not all(s.isdigit() for s in sizes):
            return False  # a record that says no size for each trace is none to keep
    for k, name in enumerate(names.split(";")):
        if not name or "/" in name or "\\" in name:
            return False
        path = job_dir / name
        try:
            size = path.stat().st_size
            if sizes is not None:
                if size != int(sizes[k]):
                    return False
                continue
            with path.open("rb") as f:
                head = f.read(64)
                f.seek(max(0, size - 64))
                tail = f.read()
        except OSError:
            return False
        whole = (head[:2] == b"\x1f\x8b" and size > 18) if name.endswith(".gz") else \
            (head.lstrip()[:1] == b"{" and tail.rstrip().endswith(b"}"))
        if not whole:
            return False
    return True


def _measured(record: dict[str, Any], config: JobConfig) -> bool:
    """Whether an ok record says what this job measures (its grid point's settings) and holds an
    un-profiled step that is a time: one edited or damaged since is no result to keep on resume."""
    timed = record.get("timed_us_per_step")
    same = all(record.get(key) == getattr(config, key) for key in ("size", "dtype", "compile", "warmup", "train"))
    return same and isinstance(timed, (int, float)) and not isinstance(timed, bool) and 0 < timed < float("inf")


def unfinished_record(config: JobConfig, job_dir: Path) -> None:
    """Save the failure that stands until the job's own record (or the sweep's failure record)
    replaces it: what a sweep killed while this job ran or waited leaves behind."""
    record = records.base_record(config, job_dir)
    record["error"] = ("unfinished: the job started and wrote no result: the sweep was killed while it ran "
                       "(or is still running it); rerun the same command to redo it")
    record[records.UNFINISHED] = True
    records.write_json(job_dir / records.METRICS_FILE, record)


def read_record(job_dir: Path) -> dict[str, Any] | None:
    """The job's metrics.json, or None where it is missing, unreadable, not a JSON object, or the
    sweep's own from before the job started (unfinished_record)."""
    try:
        if not (job_dir / records.METRICS_FILE).is_file():  # missing; or a pipe, which would block
            return None
        found = read_json(job_dir / records.METRICS_FILE)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and not found.get(records.UNFINISHED) else None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _whole(path: Path) -> str:
    """A job's log as text (capped: its first and last MiB at most); "" where it cannot be read."""
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


PHASES_KEPT = 16  # the last phase lines of a log's cut middle, kept (a timeout names the last)


def _phase_lines(f: BinaryIO, start: int, end: int) -> list[bytes]:
    """The job's phase lines (records.PHASE_MARK) in bytes start..end of its log, the last
    PHASES_KEPT of them: what the middle cut out of a long log said of the job's parts."""
    mark = records.PHASE_MARK.encode()
    found: deque[bytes] = deque(maxlen=PHASES_KEPT)
    f.seek(max(0, start - 1))  # from the byte before: a line that starts at `start` follows a newline
    left = end - f.tell()
    pending, first = b"", True
    while left > 0:
        block = f.read(min(1 << 20, left))
        if not block:
            break
        left -= len(block)
        lines = (pending + block).split(b"\n")
        pending = lines.pop()[:1024]  # a line not ended yet: its start is all a phase line needs
        found.extend(line[:400] for line in lines[1 if first else 0:] if line.startswith(mark))
        first = first and not lines  # the line it began in, started before `start`, is not one of them
    if pending and not first and mark.startswith(pending[:len(mark)]):  # a line the cut's end goes through
        line = (pending + f.read(400)).split(b"\n")[0]  # (the tail keeps its end only, without the mark)
        if line.startswith(mark):
            found.append(line[:400])
    return list(found)


def cap_log(path: Path, keep: int = LOG_KEEP_BYTES) -> int:
    """Cut the middle out of a job's log longer than 2 * keep bytes (a chatty workload wrote 52 MB
    in one job), saying so in the log, and keeping the job's phase lines from it (a timeout names
    the part of the job it interrupted); returns the bytes cut."""
    try:
        size = path.stat().st_size
        if size <= 2 * keep + 4096:  # (the slack: a log cut once, note included, stays as it is)
            return 0
        with open(path, "rb") as f:
            head = f.read(keep)
            phases = _phase_lines(f, keep, size - keep)
            f.seek(size - keep)
            tail = f.read(keep)
        cut = size - 2 * keep
        note = (f"\n[... {cut:,} bytes of this log cut by profsweep: a job's log keeps its first and last "
                f"{keep / 2**20:g} MiB" + (", and the parts of the job it started in between:" if phases else "")
                + " ...]\n").encode() + b"".join(line + b"\n" for line in phases)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(head + note + tail)
        os.replace(tmp, path)
        return cut
    except OSError:  # a log it cannot cut stays as it is
        return 0
