"""A fork server: every job in a new process of its own, without a new interpreter and `import torch`.

    server = forkserver.shared()       # None where fork is unavailable: run a fresh interpreter
    returncode = server.run(config_path, log_path, env, timeout, keep_fds=[lock.fileno()])

The sweep process never forks (it has not imported torch and may run threads). On first use it
starts a template process, `python -m experiments.forkserver`, that imports torch and the job's
modules (PRELOAD; with a CPU-only torch also Dynamo's and Inductor's, COMPILER_MODULES) and
initialises nothing: no tensor op, so no thread pool; no CUDA context; no compilation, and no
cache folder chosen. For each
job the template forks a child, which takes the job's environment as its own (the lazily read
LAZY_ENV keys included), its log as stdout and stderr, /dev/null as stdin, the sweep's working
folder, and runs exactly what `python -m experiments.job CONFIG` runs, as `__main__`.

How processes end:
- the sweep dies (kill -9 included): the template gets SIGKILL (PR_SET_PDEATHSIG), and so does
  the job (the same, towards the template); the template also ends when its socket closes.
- a timeout: the job's process group gets SIGKILL, is reaped, and run() raises
  subprocess.TimeoutExpired, as subprocess.run(timeout=) does; any exception in the caller while
  a job runs (Ctrl-C) kills the job the same way before it propagates.
- the template reaps each job and sends its wait status; run() returns it as subprocess does:
  the exit code, or -N when signal N killed the job.

The template is started again when the sweep's environment (outside LAZY_ENV) or working folder
changes, since the interpreter and torch read those while starting.
"""

from __future__ import annotations

import array
import ctypes
import errno
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, NoReturn, Sequence

from experiments.lifeline import PARENT_ENV
from experiments.records import LOCK_WAIT_ENV

# Environment keys nothing reads while the interpreter and torch start: a change of them keeps
# the template (any other change starts a new one). The child gets them all the same. Torch reads
# the first three at first use, after the fork (tests/test_forkserver.py checks the Inductor
# cache live, CUDA_VISIBLE_DEVICES where there is a GPU): the Inductor cache in
# torch._inductor.runtime.cache_dir_utils.cache_dir(), a module the template never imports;
# Triton's when it builds a kernel; CUDA_VISIBLE_DEVICES when CUDA starts (cuInit; torch.cuda
# caches its device count only once CUDA is initialised). The job reads PARENT_ENV and LOCK_WAIT_ENV when it starts
# (experiments.lifeline); pytest rewrites PYTEST_CURRENT_TEST at every phase of every test.
LAZY_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_VISIBLE_DEVICES", PARENT_ENV, "PYTEST_CURRENT_TEST",
            LOCK_WAIT_ENV)
# What the job imports at module level and while it prepares (job._settle_process), pure imports
# without side effects. Not experiments.job itself: it runs as __main__, as under `python -m`.
PRELOAD = ("torch", "torch.profiler", "experiments.records", "experiments.seam", "experiments.config",
           "experiments.counting", "experiments.steps", "experiments.profiling", "experiments.workloads")
# Modules the template must not hold: those that read their configuration or choose caches when
# imported, and the job's own module (it runs as __main__, as under `python -m`).
FIRST_USE_MODULES = ("triton", "experiments.job")
# Dynamo and Inductor: about 2 s to import on 2 cores, and every job imports them (the profiler
# looks for torch._inductor); and Inductor's compile_fx, which torch.compile imports when called
# (0.6 s on 2 cores, paid by every compiled job and again by its twin before this). Importing
# them starts no thread or process and touches no device. Dynamo's import calls Inductor's
# cache_dir() once, which makes the default folder (/tmp/torchinductor_<user>) and sets
# TORCHINDUCTOR_CACHE_DIR in the template's own environment; every child takes the job's
# environment in its place (LAZY_ENV), and cache_dir() reads it at each call: a graph compiled in a
# job is cached where the job's environment says (checked). What they read from the environment
# while importing is the sweep's, the same for every job (the template restarts when it changes).
# A forked eager job holds these modules, a fresh eager one does not (job._settle_process imports
# them for compiled jobs only): its heap differs by what they allocated. Preloaded only by a torch
# without a GPU build: with CUDA or ROCm, an import that asked the driver anything before the fork
# would leave every child without a usable device, and that has not been checked on a GPU yet.
COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._inductor.compile_fx")
FRESH = "every job starts a fresh interpreter"
START_TIMEOUT_S = 300.0  # importing torch from a cold disk
REPLY_TIMEOUT_S = 30.0  # a fork, or a kill and reap
MAX_MESSAGE = 1 << 20
PR_SET_PDEATHSIG = 1
MADV_POPULATE_WRITE = 23


class ForkServerError(RuntimeError):
    """The template could not start, or died: the message says why."""


# --- the caller's side: the sweep process ---------------------------------------------------------


def unavailable_reason() -> str | None:
    """Why this platform cannot fork jobs from a template, or None."""
    if not sys.platform.startswith("linux"):
        return f"fork server is for Linux, this is {sys.platform}"
    if not hasattr(os, "fork") or not hasattr(socket, "send_fds"):
        return "this Python has no os.fork or socket.send_fds"
    return None


class ForkServer:
    """A template process, started on first use and again when the environment it imported torch
    under changes; one job at a time (a lock guards it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._key: tuple | None = None
        self._refused: dict[tuple, str] = {}
        self.ready: dict[str, Any] = {}  # the template's state when it became ready
        self.last_peak_rss_kb: int | None = None  # the last job's maximum resident set (wait4)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def run(self, config_path: Path, log_path: Path, env: dict[str, str], timeout: float | None,
            keep_fds: Sequence[int] = ()) -> int:
        """Run one job as `python -m experiments.job CONFIG` would, with os.environ | env."""
        return self.run_python(["-m", "experiments.job", str(config_path)], log_path, env, timeout, keep_fds)

    def run_python(self, argv: Sequence[str], log_path: Path, env: dict[str, str], timeout: float | None,
                   keep_fds: Sequence[int] = ()) -> int:
        """Run what `python ARGV` runs (`-m MODULE ARGS` or `SCRIPT ARGS`) in a child of the template;
        run() is this for a job, other argvs are for tests. Returns like subprocess.run."""
        full_env = {**os.environ, **env}
        with self._lock:
            self._ensure(full_env, os.getcwd())
            with open(log_path, "wb") as log:
                self._send({"op": "run", "argv": list(argv), "env": full_env, "cwd": os.getcwd()},
                           [log.fileno(), *keep_fds])
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                self._expect("started", time.monotonic() + REPLY_TIMEOUT_S)
                reply = self._expect("exited", deadline)
            except TimeoutError:
                self._kill_job()
                raise subprocess.TimeoutExpired([sys.executable, *argv], timeout) from None
            except ForkServerError:
                raise
            except BaseException:  # Ctrl-C, SIGTERM: never leave the job running
                self._kill_job()
                raise
            self.last_peak_rss_kb = reply["peak_rss_kb"]
            return os.waitstatus_to_exitcode(reply["status"])

    def state(self) -> dict[str, Any]:
        """The template's own state now: pid, threads, whether CUDA, Dynamo or Inductor were touched."""
        with self._lock:
            if self._sock is None:
                raise ForkServerError("the template is not running")
            self._send({"op": "state"})
            return self._expect("state", time.monotonic() + REPLY_TIMEOUT_S)

    def close(self) -> None:
        """Stop the template (a running job dies with it)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
        keeper, self._keeper = getattr(self, "_keeper", None), None
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join()  # the process runs no thread of ours after this (forked plots need that)
        self._key = None

    def _ensure(self, env: dict[str, str], cwd: str) -> None:
        key = _start_key(env, cwd)
        if key == self._key and self._proc is not None and self._proc.poll() is None:
            return
        self.close()
        if key in self._refused:
            raise ForkServerError(self._refused[key])
        try:
            self._start({k: v for k, v in env.items() if k not in LAZY_ENV}, cwd)
        except ForkServerError as exc:
            self.close()
            self._refused[key] = str(exc)
            raise
        self._key = key

    def _start(self, env: dict[str, str], cwd: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [sys.executable, "-m", "experiments.job", TEMPLATE_FLAG, str(theirs.fileno()), str(os.getpid())]
        started = threading.Event()
        box: list[Any] = []

        def keeper() -> None:
            # PR_SET_PDEATHSIG fires when the thread that started the template ends: this one
            # lives as long as the template (it reaps it), whichever thread asked for the job.
            try:
                proc = subprocess.Popen(cmd, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, cwd=cwd, env=env, start_new_session=True)
            except OSError as exc:
                box.append(exc)
                started.set()
                return
            box.append(proc)
            started.set()
            proc.wait()

        self._keeper = threading.Thread(target=keeper, name="forkserver-template", daemon=True)
        self._keeper.start()
        started.wait()
        theirs.close()
        if isinstance(box[0], OSError):
            ours.close()
            raise ForkServerError(f"cannot start {' '.join(cmd[:3])}: {box[0]}")
        self._proc, self._sock = box[0], ours
        reply = self._expect("ready", time.monotonic() + START_TIMEOUT_S)
        self.ready = reply

    def _send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        assert self._sock is not None
        self._sock.settimeout(REPLY_TIMEOUT_S)
        try:
            socket.send_fds(self._sock, [json.dumps(message).encode()], list(fds))
        except OSError as exc:
            self._died(f"sending to the template failed: {exc}")

    def _expect(self, event: str | tuple[str, ...], deadline: float | None) -> dict[str, Any]:
        """The template's next message, which must be `event` (or one of them); TimeoutError after
        `deadline`."""
        assert self._sock is not None
        self._sock.settimeout(None if deadline is None else max(deadline - time.monotonic(), 0.001))
        try:
            data, _, _, _ = socket.recv_fds(self._sock, MAX_MESSAGE, 0)
        except TimeoutError:
            if event in ("ready", "started"):  # the template hangs; only a job may take its time
                self._died(f"the template did not answer {event!r} in time")
            raise
        except OSError as exc:
            self._died(f"reading from the template failed: {exc}")
        if not data:
            self._died("the template process ended")
        reply = json.loads(data)
        if reply.get("event") == "failed":
            self._died(reply["why"], exit_code=False)
        if reply.get("event") not in (event if isinstance(event, tuple) else (event,)):
            self._died(f"the template answered {reply.get('event')!r}, expected {event!r}")
        return reply

    def _died(self, why: str, exit_code: bool = True) -> NoReturn:
        proc = self._proc
        self.close()
        code = proc.returncode if proc is not None and exit_code else None
        raise ForkServerError(why if code in (None, -signal.SIGKILL) else f"{why} (its exit code: {code})")

    def _kill_job(self) -> None:
        """SIGKILL the running job and wait until the template has reaped it (else stop the template:
        the job then dies of PR_SET_PDEATHSIG)."""
        if self._sock is None:
            return
        try:
            self._send({"op": "kill"})
            deadline = time.monotonic() + REPLY_TIMEOUT_S
            while self._expect(("started", "exited"), deadline)["event"] != "exited":
                pass
        except (ForkServerError, TimeoutError):
            self.close()


def _start_key(env: dict[str, str], cwd: str) -> tuple:
    """What the template's interpreter and `import torch` read while starting."""
    return cwd, tuple(sorted((k, v) for k, v in env.items() if k not in LAZY_ENV))


_SHARED = ForkServer()
_SAID: set[str] = set()


def shared() -> ForkServer | None:
    """This process's fork server, its template started (or restarted) for the current environment;
    None, said once on stderr, where fork is unavailable or the template cannot start."""
    why = unavailable_reason()
    if why is None:
        with _SHARED._lock:
            try:
                _SHARED._ensure(dict(os.environ), os.getcwd())
                return _SHARED
            except ForkServerError as exc:
                why = str(exc)
    if why not in _SAID:
        _SAID.add(why)
        print(f"fork server unavailable ({why}): {FRESH}", file=sys.stderr, flush=True)
    return None


def shutdown() -> None:
    """Stop this process's template, if one runs, and the thread that watches it: when the sweep
    has launched its last job."""
    with _SHARED._lock:
        _SHARED.close()


def how_jobs_start(server: ForkServer | None) -> str:
    """One line for the progress output: how the jobs' processes start."""
    if server is None:
        return FRESH
    return f"every job forks from a template process that has imported torch and initialised nothing (pid {server.pid})"


# --- the template's side --------------------------------------------------------------------------


def _die_with(parent: int) -> bool:
    """SIGKILL this process when `parent` (the thread that started it) ends; exit now if it has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:  # it ended before prctl took effect
        os._exit(1)
    return armed


def _template_state() -> dict[str, Any]:
    import torch

    return {
        "pid": os.getpid(),
        "pdeathsig": _ARMED[0],
        "cuda_initialized": torch.cuda.is_initialized(),  # reads a flag, initialises nothing
        "imported": [name for name in _first_use_modules() if name in sys.modules],
        "preloaded": [name for name in COMPILER_MODULES if name in sys.modules],
        "python_threads": threading.active_count(),
        "threads": len(os.listdir("/proc/self/task")),
    }


def _cpu_only_torch() -> bool:
    import torch

    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None


def settle_garbage_collector() -> None:
    """Collect, then freeze what is left into the permanent generation: the collector's counters
    start from zero and never again scans the objects the imports made (about 290,000 with torch,
    Dynamo and Inductor: 155 ms a full collection on this 2-core machine). Every job calls it
    after its imports, before it builds its workload, however it was started: without it a full
    collection lands at a moment that depends on the process's history (in a forked job's first
    call but a fresh interpreter's profiled step, or the other way round), which is what made
    forked and fresh jobs disagree."""
    import gc

    gc.collect()
    gc.freeze()


def _first_use_modules() -> tuple[str, ...]:
    """Modules the template must not hold: triton and the job's own module always (it runs as
    __main__, as under `python -m`); Dynamo and Inductor too, with a GPU build of torch."""
    return FIRST_USE_MODULES + (() if _cpu_only_torch() else COMPILER_MODULES)


_ARMED = [False]  # whether the template dies with the sweep's thread (PR_SET_PDEATHSIG)


TEMPLATE_FLAG = "--template"  # `python -m experiments.job --template FD PARENT` starts a template


def template_main(fd: int, parent: int) -> int | list[str]:
    """The template's life: import, report ready, fork a child per request. Returns the exit code
    when the sweep has gone; in each forked child it returns that child's command (argv), which
    the caller, at the top level of `python -m experiments.job`, runs there: so a forked job's
    Python frame stack is frame for frame that of a fresh `python -m experiments.job CONFIG`.
    (CPython 3.11 keeps frames on a stack of 16 KiB chunks, mapped and unmapped as calls cross
    their boundaries; where the boundaries fall depends on the depth the job runs at, and a
    job run from deep inside this loop crossed one 6,300 times in a compiled first call where a
    fresh interpreter crossed it 2,100 times: 7,000 more page faults, +8% on the first call.)"""
    sock = socket.socket(fileno=fd)
    _ARMED[0] = _die_with(parent)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            _reply(sock, {"event": "failed", "why": f"the template cannot import {name}: {exc!r}"})
            return 1
    if _cpu_only_torch():
        for name in COMPILER_MODULES:
            importlib.import_module(name)
    if threading.active_count() != 1:  # a Python thread would be cut off in each child
        _reply(sock, {"event": "failed", "why": f"{threading.active_count()} Python threads after imports"})
        return 1
    settle_garbage_collector()  # once here: a job's own call is then cheap, as in a fresh one after it
    _reply(sock, {"event": "ready", **_template_state()})
    while True:
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 64)
        if not data:
            return 0  # the sweep process has gone
        request = json.loads(data)
        if request["op"] == "state":
            _reply(sock, {"event": "state", **_template_state()})
        elif request["op"] == "run":
            sys.stdout.flush()
            sys.stderr.flush()
            me = os.getpid()
            # Python 3.12+ warns of forking with threads: OpenBLAS's (numpy's, via torch), which
            # its own fork handler stops first. Both sides leave the filters as they were.
            quiet = warnings.catch_warnings()
            quiet.__enter__()
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
            quiet.__exit__(None, None, None)
            if pid == 0:
                return _child(sock, request, fds, me)
            for f in fds:
                os.close(f)
            _reply(sock, {"event": "started", "pid": pid})
            ended = _watch(sock, pid)
            if ended is None:
                return 0
            _reply(sock, {"event": "exited", "status": ended[0], "peak_rss_kb": ended[1]})
        # "kill" with no job running: that job has just been reported


def _watch(sock: socket.socket, pid: int) -> tuple[int, int] | None:
    """Wait for the job `pid`, killing it when asked; its wait status and peak RSS (KiB), or None
    when the socket closed."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    if pidfd is not None:
        poll.register(pidfd, select.POLLIN)
    try:
        while True:
            events = poll.poll(None if pidfd is not None else 100)
            if _exited(pid):  # not reaped yet: what it started goes with it (they hold its lock, its pipes)
                kill_group(pid, leader=False)
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, usage.ru_maxrss
            if any(fd == sock.fileno() for fd, _ in events):
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 64)
                for f in fds:
                    os.close(f)
                if not data or json.loads(data)["op"] == "kill":
                    kill_group(pid)
                    _, status, usage = os.wait4(pid, 0)
                    return (status, usage.ru_maxrss) if data else None
    finally:
        if pidfd is not None:
            os.close(pidfd)


def wait_unreaped(pid: int, timeout: float | None) -> None:
    """Wait until the child `pid` has ended, without reaping it (so that its group can still be
    killed by its id); subprocess.TimeoutExpired after `timeout` seconds. Needs os.waitid (Linux)."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while not _exited(pid):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(str(pid), timeout)
            if pidfd is not None:  # readable once the process has ended
                select.select([pidfd], [], [], 1.0 if left is None else min(1.0, left))
            else:
                time.sleep(0.05 if left is None else min(0.05, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _exited(pid: int) -> bool:
    """Whether the job has ended, without reaping it (its pid stays its, and its group's id)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except (AttributeError, ChildProcessError, OSError):
        return False


def kill_group(pid: int, leader: bool = True) -> None:
    """SIGKILL the job and what it started (its own session); it is not reaped yet, so `pid` is its.
    After the job ended (`leader` False): what it left running, a process its workload forked that
    would hold the machine's device lock and the job's pipes open."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # killed before its setsid(), or nothing left
        pass
    if not leader:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reply(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode())


def _child(sock: socket.socket, request: dict[str, Any], fds: list[int], template: int) -> list[str]:
    """In the forked child: become the job's process (its session, fds, folder, environment and
    memory) and return the command it is to run."""
    try:
        os.setsid()  # its own process group: a timeout kills what it started too
        _die_with(template)
        log, keep = fds[0], set(fds[1:])
        sock.close()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for name in os.listdir("/proc/self/fd"):  # nothing else the template held
            if int(name) > 2 and int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if PARENT_ENV in os.environ:
            # The job dies with its parent, which is the template here (and that one with the
            # sweep), not the sweep process that named itself.
            os.environ[PARENT_ENV] = str(template)
        own_memory()
        if "numpy.random" in sys.modules:  # its global state, which a fresh process seeds from the OS
            sys.modules["numpy.random"].seed()
    except BaseException:
        traceback.print_exc()
        os._exit(127)
    return list(request["argv"])


def run_child(argv: list[str]) -> NoReturn:
    """Run a command other than a job in a forked child (tests run scripts so), and exit as the
    interpreter exits: its own shutdown joins the threads left running and runs the atexit
    handlers (logging's, torch's own)."""
    sys.exit(_run_python(argv))


def own_memory() -> int:
    """Copy now every page the template wrote, which the child shares with it copy-on-write:
    a fresh interpreter owns those pages before its job starts, so the job's first calls must not
    pay the copies (measured: +20% on an eager first call without this). Pages the template never
    wrote stay as lazy as in a fresh process. Returns the pages copied (0 where the kernel has no
    MADV_POPULATE_WRITE, Linux < 5.14, or /proc/self/pagemap cannot be read)."""
    page = os.sysconf("SC_PAGE_SIZE")
    present, file_or_shared = 1 << 63, 1 << 61  # /proc/self/pagemap flags
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    copied = 0
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
            for fields in [line.split() for line in maps]:
                if fields[1][:2] != "rw" or fields[1][3] != "p" or fields[-1].startswith("[v"):
                    continue  # private writable mappings only; not [vvar], [vdso], [vsyscall]
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                pagemap.seek(lo // page * 8)
                flags = array.array("Q", pagemap.read((hi - lo) // page * 8))
                run = None
                for i, flag in enumerate([*flags, 0]):
                    own = flag & present and not flag & file_or_shared
                    if own and run is None:
                        run = i
                    elif not own and run is not None:
                        if madvise(lo + run * page, (i - run) * page, MADV_POPULATE_WRITE) == 0:
                            copied += i - run
                        elif ctypes.get_errno() == errno.EINVAL and not copied:
                            return 0  # a kernel without MADV_POPULATE_WRITE
                        run = None
    except OSError:
        pass
    return copied


def _run_python(argv: list[str]) -> int:
    """What the interpreter does for `python ARGV`: run as __main__; the exit code (SystemExit
    raised from here lets the interpreter end the process as it would)."""
    import atexit
    import runpy

    interrupted: list[bool] = []
    # Registered before the script's own: atexit runs handlers last in, first out, so this one
    # runs after them, as Python ends on an uncaught Ctrl-C: by the signal, once all is done.
    atexit.register(_end_by_sigint, interrupted)
    try:
        if argv[0] == "-m":
            sys.argv = ["-m", *argv[2:]]  # runpy puts the module's file in argv[0]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException as exc:
        # The traceback a fresh interpreter prints: from the script's or module's own frames.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
        if isinstance(exc, KeyboardInterrupt):
            interrupted.append(True)
    return code


def _end_by_sigint(interrupted: list[bool]) -> None:
    if not interrupted:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _exit_code(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


if __name__ == "__main__":
    ended = template_main(int(sys.argv[1]), int(sys.argv[2]))
    if isinstance(ended, list):
        run_child(ended)
    sys.exit(ended)
