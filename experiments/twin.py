"""A job's twin: a copy of the job's process, forked before the job ran anything, that waits and
then does one piece of work in a process the profiler never touched.

    twin = Twin.fork(work)        # before the job's first tensor op; None where it cannot fork
    ...                           # the job's own work: first call, profiled steps, export
    result = twin.result()        # the twin runs work() now and returns its JSON-ready dict
    twin.close()                  # (result() closes; close() alone: the twin is killed unused)

Why: a cold job's profiled steps must be the first steps of its process, so its un-profiled steps
can only come after them, in a process the profiler's session and trace export have changed
(with run.allocator=system, glibc's dynamic thresholds: a matmul_add 1024 step then refaults its
buffers, ~990 minor page faults, and took 1.6x the time on this project's 2-core machine; and,
whatever the allocator, the heap the trace's events and the export leave behind). The twin is that process as it
was before: forked once the job has imported what it runs and settled its garbage collector, with
no tensor op run (so no thread pool, no device context, nothing compiled). It then blocks on a
pipe until the job is done and has let go of its workload; it owns its pages before it starts (as
a forked job does, forkserver.own_memory), dies with the job (PR_SET_PDEATHSIG, and the pipe's
end), and never runs anything of the job's after its work: it leaves with os._exit. A twin that
hangs in the workload holds the job as the workload itself would: until run.job_timeout_s.

A job forks a twin only where the process is its own (`python -m experiments.job`, a fresh
interpreter or a child of the fork server) and single-threaded; elsewhere `fork` returns None.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import sys
import threading
import traceback
from typing import Any, Callable

from profsweep.contract import message
from profsweep.lifeline import die_with

_MAX_RESULT = 1 << 20
_HEADER = 8  # bytes of the result's length, before it


class TwinError(RuntimeError):
    """The twin failed or died: the message says how; `raised` names the exception its work raised
    (None where it died without a result)."""

    def __init__(self, message: str, raised: str | None = None, memory: bool = False) -> None:
        super().__init__(message)
        self.raised = raised
        self.memory = memory  # it ran out of memory (beside the job, whose pages it copies as it writes)


class Twin:
    """The parent's handle on a forked twin."""

    def __init__(self, pid: int, go: int, results: int) -> None:
        self.pid, self._go, self._results = pid, go, results
        self._done = False

    @classmethod
    def fork(cls, work: Callable[[], dict[str, Any]]) -> "Twin | None":
        """Fork the twin that will run `work` when asked (None: no fork here, or threads run)."""
        if not hasattr(os, "fork") or not sys.platform.startswith("linux") or threading.active_count() > 1:
            return None
        opened: list[int] = []
        try:
            go_read, go_write = os.pipe()
            opened += [go_read, go_write]
            results_read, results_write = os.pipe()
            opened += [results_read, results_write]
            parent = os.getpid()
            for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
                stream.flush()
            drawn = random.getstate()
            pid = os.fork()
        except OSError:  # no pipe, no process left (EMFILE, EAGAIN, ENOMEM): the job times without a twin
            for fd in opened:
                os.close(fd)
            return None
        if pid == 0:  # the twin
            # Python reseeds `random` in a forked child: given the job's state back, a factory that
            # draws its shapes from it builds in the twin what it built in the job (torch's and
            # numpy's global generators are copied by the fork as they are)
            random.setstate(drawn)
            os.close(go_write)
            os.close(results_read)
            _serve(parent, go_read, results_write, work)
        os.close(go_read)
        os.close(results_write)
        return cls(pid, go_write, results_read)

    def result(self) -> dict[str, Any]:
        """Let the twin run its work and return what it returned; TwinError if it failed."""
        if self._done:
            raise TwinError("the twin was already used")
        try:
            os.write(self._go, b"g")
        except BrokenPipeError:
            pass  # it died: its status says how
        os.close(self._go)
        data, status = self._read()
        os.close(self._results)
        self._done = True
        if status is None:  # else reaped while reading: a process its workload forked held the pipe open
            status = _reap(self.pid)
        text = data[:_MAX_RESULT].decode("utf-8", errors="replace")
        try:
            found = json.loads(text) if text else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            how = (f"was killed by signal {-status}" if status is not None and status < 0
                   else f"exited with code {status}")
            raise TwinError(f"the process timing the un-profiled steps {how} without a result")
        if "error" in found:
            raise TwinError(str(found["error"]), str(found.get("raised") or "") or None, found.get("memory") is True)
        return found

    def _read(self) -> tuple[bytes, int | None]:
        """The twin's result: its length first (8 bytes), then that many bytes; read until they
        are all here, or until the pipe ends, or until the twin has exited with the pipe still
        open (a process the workload forked in it holds its end). The twin's exit status where it
        was reaped here, else None."""
        buffer, need = b"", None
        poll = select.poll()
        poll.register(self._results, select.POLLIN)
        while need is None or len(buffer) < _HEADER + need:
            if poll.poll(200):
                chunk = os.read(self._results, 65536)
                if not chunk:
                    break
                buffer += chunk
                if need is None and len(buffer) >= _HEADER:
                    need = int.from_bytes(buffer[:_HEADER], "big")
                continue
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:  # exited: what it wrote before is in the pipe now, read it all (it may have come since the poll)
                while poll.poll(0):
                    chunk = os.read(self._results, 65536)
                    if not chunk:
                        break
                    buffer += chunk
                    if need is not None and len(buffer) >= _HEADER + need:
                        break
                need = int.from_bytes(buffer[:_HEADER], "big") if need is None and len(buffer) >= _HEADER else need
                return buffer[_HEADER:_HEADER + (need or 0)], os.waitstatus_to_exitcode(status)
        return buffer[_HEADER:_HEADER + (need or 0)], None

    def close(self) -> None:
        """Let the twin go unused (the job failed before it needed it): killed and reaped, since a
        process the workload forked may hold the pipe open and the twin would wait for ever."""
        if self._done:
            return
        self._done = True
        for fd in (self._go, self._results):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(self.pid)


_NO_MEMORY = ("can't allocate memory", "out of memory", "not enough memory", "cannot allocate memory")


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is running out of memory: Python's MemoryError, torch's OutOfMemoryError (a
    RuntimeError), or the RuntimeError torch's CPU allocator raises ("DefaultCPUAllocator: can't
    allocate memory")."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(words in message(exc).lower() for words in _NO_MEMORY)


def _reap(pid: int) -> int | None:
    """Wait for the twin; its exit code, or -N when signal N ended it."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def _serve(parent: int, go: int, results: int, work: Callable[[], dict[str, Any]]) -> None:
    """The twin's whole life: wait for the go, work, write the result, leave without cleanup."""
    code = 0
    try:
        die_with(parent)
        if os.read(go, 1) != b"g":  # the job closed the pipe unused, or died
            os._exit(0)
        code = 1  # whatever fails from here is the twin's failure, never a silent success
        from experiments.forkserver import own_memory

        own_memory()
        code = 0
        try:
            found = work()
        except BaseException as exc:  # the job's record says it: never a traceback of the job's own
            traceback.print_exc()
            found, code = {"error": f"{type(exc).__name__}: {message(exc)[:4000]}", "raised": type(exc).__name__,
                           "memory": out_of_memory(exc)}, 1
        data = json.dumps(found).encode("utf-8")
        data = len(data).to_bytes(_HEADER, "big") + data  # its length first: the parent reads no further
        while data:
            data = data[os.write(results, data):]
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)
