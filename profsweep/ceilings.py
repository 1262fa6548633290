"""This machine's measured ceilings: what a dense matmul and a memory stream actually reach.

A roofline drawn from a datasheet says what the vendor promises; this measures what the machine
gives, per device x dtype x torch version x threads:

- **matmul FLOP/s**: square matmuls of the dtype from 256 up, doubling until two sizes in a row
  beat the best smaller one by less than 5% (or one call would take longer than MAX_CALL_S); at each size the median rate
  over blocks of calls timed for at least BLOCK_S each. The ceiling is the best of these medians
  over PROCESSES processes: the best *sustained* rate, not a lucky call.
- **memory bandwidth**: STREAM's copy (a = b) and triad (a = b + s*c) over float64 arrays of at
  least 4x the last-level cache (the L2 on a GPU), counting the bytes read and written as STREAM
  does; the median over passes, the best over processes. The roofline's memory ceiling is triad.

Every measurement runs in a process forked for it from a worker interpreter that imported torch
and ran nothing (so no process carries another's caches, threads or allocations), one at a time
and while the sweep holds the device (experiments.slots). Results are cached per machine in the
user's cache folder (CACHE_FILE) with the date they were measured; `python -m analysis calibrate`
measures afresh and replaces the cached entry.

Both sides use this module: the sweep measures (or reads the cache) before its first job and
records the ceilings it used in environment.json (`ceilings`); the analysis reads them from there.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable

from profsweep.contract import amount, read_json

MODES = ("measure", "table", "off")  # run.ceilings: measured (cached) | datasheet peaks only | none
DTYPES = ("bf16", "fp16", "fp32")
DEVICES = ("cpu", "cuda")
PROCESSES = 3  # the ceiling is the best sustained rate over this many processes
BLOCK_S = 0.05  # a timed block of calls lasts at least this long
MIN_BLOCKS = 3  # blocks per size (each at least one call)
MIN_TIME_S = 0.2  # and at least this long in all, per size
MAX_CALL_S = 0.8  # a size whose one call would take longer is not tried (the scan's time cap)
SATURATED = 1.05  # the scan stops once PATIENCE sizes in a row do not beat the best smaller one by 5%
PATIENCE = 2
FIRST_SIZE = 256
MAX_SIZE = {"cpu": 8192, "cuda": 32768}
MIN_ARRAY_BYTES = {"cpu": 64 << 20, "cuda": 256 << 20}  # at least, whatever the cache
ASSUMED_LLC_BYTES = 32 << 20  # where the cache size cannot be read (said in `how`)
PASSES = 7  # copy and triad passes per process
STALE_DAYS = 30  # a cached ceiling older than this is said to be, with how to measure it again
BUSY_OTHER_CPUS = 0.5  # other processes' CPUs while measuring past which the ceiling is said to be suspect
TIMEOUT_S = 600  # a worker interpreter still measuring after this is stopped
CACHE_FILE = "ceilings.json"


class CeilingError(ValueError):
    """A ceiling that cannot be measured here; the message names what and why."""


@dataclass(frozen=True)
class Ceiling:
    """One device x dtype x threads ceiling of one machine and torch version."""

    device: str  # cpu | cuda
    dtype: str  # bf16 | fp16 | fp32
    threads: int | None  # torch's intra-op threads it was measured with (cpu)
    machine: str  # hostname, and the CPU model or GPU it ran on
    torch_version: str
    flops_per_s: float  # dense matmul: the best sustained rate over processes
    matmul_size: int  # the square size that reached it
    matmul_low: float  # the lowest of the processes' rates at that size
    bytes_per_s: float  # triad (STREAM): the roofline's memory ceiling
    copy_bytes_per_s: float
    array_bytes: int  # each stream array
    cache_bytes: int  # the last-level cache it was sized against
    processes: int
    seconds: float  # what measuring took
    measured_at: str  # ISO date and time
    how: str  # in words
    device_name: str | None = None  # the GPU (torch.cuda.get_device_name) or CPU model measured
    other_cpus: float | None = None  # CPUs other processes kept busy while it measured (lowers a ceiling)
    cpus: int | None = None
    source: str = "measured"  # measured | cached (measured_at says when)

    @property
    def ridge(self) -> float:
        """FLOP per byte where the two ceilings meet."""
        return self.flops_per_s / self.bytes_per_s

    def line(self) -> str:
        threads = f", {amount(self.threads, 'thread')}" if self.threads else ""
        return (f"{self.device} {self.dtype}{threads}: matmul {flops(self.flops_per_s)} at {self.matmul_size} "
                f"(processes {flops(self.matmul_low)}–{flops(self.flops_per_s)}); triad {rate(self.bytes_per_s)}, "
                f"copy {rate(self.copy_bytes_per_s)} over {self.array_bytes >> 20} MiB arrays; ridge "
                f"{self.ridge:.1f} FLOP/byte ({self.source}, {self.measured_at[:10]}"
                + (f"; the machine was busy: other processes used {self.other_cpus:.1f} of {self.cpus} CPUs"
                   if self.busy else "") + ")")

    @property
    def busy(self) -> bool:
        """Whether other processes kept a CPU's worth or more busy while it measured (half a CPU or
        more on average, the bar a job's noise is held to)."""
        return self.other_cpus is not None and self.other_cpus > BUSY_OTHER_CPUS

    def stale(self, now: _dt.datetime | None = None) -> str:
        """Why a cached ceiling may no longer be this machine's ('' when it may be): measured on a
        busy machine (low), or longer ago than STALE_DAYS (drivers, firmware, the machine's
        neighbours change)."""
        if self.busy:
            return f"measured while other processes used {self.other_cpus:.1f} of {self.cpus} CPUs"
        try:
            then = _dt.datetime.fromisoformat(str(self.measured_at))
            age = ((now or _dt.datetime.now(then.tzinfo)) - then).days
        except (TypeError, ValueError):
            return "its measuring date cannot be read"
        return f"measured {age} days ago" if age > STALE_DAYS else ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ceiling:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def flops(value: float) -> str:
    return f"{value / 1e12:.3g} TFLOP/s" if value >= 1e12 else f"{value / 1e9:.3g} GFLOP/s"


def rate(value: float) -> str:
    return f"{value / 1e9:.3g} GB/s"


# --- the cache ------------------------------------------------------------------------------------


CACHE_DIR_ENV = "PROFSWEEP_CACHE_DIR"  # where the cache lives, if not the user's cache folder


def cache_path() -> Path:
    """PROFSWEEP_CACHE_DIR/ceilings.json, else $XDG_CACHE_HOME/profsweep/, else ~/.cache/profsweep/."""
    chosen = os.environ.get(CACHE_DIR_ENV)
    if chosen:
        return Path(chosen) / CACHE_FILE
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "profsweep" / CACHE_FILE


def machine(device: str) -> str:
    """What names this machine for a ceiling: its hostname and the processor measured."""
    host = socket.gethostname()
    if device == "cuda":
        gpus = gpu_names()
        return f"{host} {gpus[0] if gpus else 'cuda'}"
    return f"{host} {cpu_model()}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> list[str]:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def _key(device: str, dtype: str, threads: Any, torch_version: str) -> str:
    return f"{machine(device)} | {device} {dtype} | torch {torch_version} | threads {threads}"


def cached(device: str, dtype: str, threads: Any, torch_version: str) -> Ceiling | None:
    """The cached ceiling of this machine for these settings, or None (none, or an unreadable cache)."""
    try:
        entry = read_json(cache_path()).get(_key(device, dtype, threads, torch_version))
        return None if entry is None else Ceiling.from_dict({**entry, "source": "cached"})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def remember(ceiling: Ceiling, threads: Any) -> None:
    """Add (or replace) a ceiling in the cache, atomically; a cache that cannot be written is left
    alone (the sweep still records the ceiling it measured)."""
    from profsweep.contract import atomic_write_text

    path = cache_path()
    try:
        found = read_json(path)
        found = found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        found = {}
    found[_key(ceiling.device, ceiling.dtype, threads, ceiling.torch_version)] = asdict(ceiling)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(found, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass


# --- measuring ------------------------------------------------------------------------------------


def measure(device: str, dtype: str, threads: Any = "auto", processes: int = PROCESSES,
            progress: Callable[[str], None] | None = None, visible: str | None = None,
            hold: int | None = None) -> Ceiling:
    """Measure a ceiling afresh in a worker interpreter (which forks one process per measurement);
    `visible`: the one GPU it may use (CUDA_VISIBLE_DEVICES); `hold`: a file descriptor (the
    device slot's lock) that the worker and its processes keep open while they live."""
    if device not in DEVICES:
        raise CeilingError(f"device {device!r} is not allowed: measure cpu or cuda")
    if dtype not in DTYPES:
        raise CeilingError(f"dtype {dtype!r} is not allowed: measure one of {', '.join(DTYPES)}")
    if not (threads == "auto" or (isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1)):
        raise CeilingError(f"threads {threads!r} is not allowed: give a count >= 1, or auto")
    if not isinstance(processes, int) or processes < 1:
        raise CeilingError(f"processes {processes!r} is not allowed: give a count >= 1")
    say = progress or (lambda line: None)
    say(f"measuring this machine's {device} {dtype} ceilings (matmul FLOP/s, memory bandwidth) in {processes} "
        f"processes, once per machine and torch version ...")
    command = [sys.executable, "-m", "profsweep.ceilings", device, dtype, str(threads), str(processes), str(os.getpid())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                                     os.environ.get("PYTHONPATH")) if p)}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    # Its own session, so that a stop or a timeout kills the worker and the processes it forked
    # together; `hold`: the device slot's lock, held by them too while they live.
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              start_new_session=True, pass_fds=() if hold is None else (hold,))
    try:
        out, err = worker.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CeilingError(f"measuring the {device} {dtype} ceilings took longer than {TIMEOUT_S} s") from None
    finally:
        if worker.poll() is None:
            _kill_session(worker)
    lines = out.strip().splitlines()
    if worker.returncode != 0 or not lines:
        said = (err.strip().splitlines() or ["no output"])[-1][:300]
        raise CeilingError(f"measuring the {device} {dtype} ceilings failed: {said}")
    try:
        return Ceiling.from_dict(json.loads(lines[-1]))
    except (ValueError, TypeError) as exc:
        raise CeilingError(f"measuring the {device} {dtype} ceilings gave no result: {exc}") from None


def _kill_session(worker: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except OSError:
        worker.kill()
    worker.wait()


def torch_version() -> str:
    """The installed torch's version, without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "none"


def _worker(device: str, dtype: str, threads: Any, processes: int) -> dict[str, Any]:
    """In the worker interpreter: fork one process per measurement, one at a time. The worker
    itself touches no device (a process forked after CUDA is initialised cannot use it): the first
    process finds the cache, sizes the arrays and scans the matmul sizes; the others measure the
    best size with the same arrays."""
    import multiprocessing

    import torch  # noqa: F401  (once, here: every forked process shares the import)

    from profsweep import machine as the_machine

    started = time.perf_counter()
    before = the_machine.read()
    context = multiprocessing.get_context("fork")
    first = _forked(context, _one_process, device, dtype, threads, None, None)
    runs = [first]
    best_size = max(first["matmul"], key=lambda s: first["matmul"][s])
    for _ in range(processes - 1):
        runs.append(_forked(context, _one_process, device, dtype, threads, int(best_size), first["array"]))
    at_best = [r["matmul"][best_size] for r in runs]
    others = the_machine.between(before, the_machine.read())["other_cpus"]
    cache, array = first["cache"] or ASSUMED_LLC_BYTES, first["array"]
    host = socket.gethostname()
    return asdict(Ceiling(
        device=device, dtype=dtype, threads=first["threads"],
        machine=f"{host} {first['device_name']}" if device == "cuda" else machine(device),
        torch_version=torch_version(),
        flops_per_s=max(at_best), matmul_size=int(best_size), matmul_low=min(at_best),
        bytes_per_s=max(r["triad"] for r in runs), copy_bytes_per_s=max(r["copy"] for r in runs),
        array_bytes=array, cache_bytes=cache, processes=processes, device_name=first["device_name"],
        other_cpus=None if others is None else round(others, 2), cpus=the_machine.cpus(), seconds=round(time.perf_counter() - started, 2),
        measured_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        how=(f"square {dtype} matmuls {FIRST_SIZE}..{max(int(s) for s in first['matmul'])} in one process, the "
             f"best size again in {processes - 1} more; the median rate over blocks of at least {BLOCK_S * 1e3:.0f} "
             f"ms, the best over processes. STREAM copy and triad over float64 arrays of {array >> 20} MiB "
             f"(4x the {cache >> 20} MiB {'L2' if device == 'cuda' else 'last-level'} cache"
             f"{'' if first['cache'] else ', assumed: not readable here'}), median of "
             f"{PASSES} passes, best over processes"),
    ))


def _die_with_parent(parent: int) -> None:
    """Be killed (SIGKILL) when the parent process (pid `parent`, as the parent said it before it
    started this one) dies, on Linux: a killed sweep leaves no worker measuring on, nor a killed
    worker a measuring process. A parent gone already (this process's parent is init, or a
    subreaper, by now) ends this one at once: a sweep killed while its worker imported torch left
    the worker measuring for 11 s, holding the CPU's lock (helper-38)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the wish was made
        os._exit(1)


def _forked(context: Any, target: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_send, args=(child, os.getpid(), target, *args))
    process.start()
    child.close()
    try:
        result = parent.recv() if parent.poll(TIMEOUT_S) else {"error": f"no result within {TIMEOUT_S} s"}
    except EOFError:
        result = {"error": "the measuring process died"}
    process.join(5)
    if process.is_alive():
        process.kill()
    if "error" in result:
        raise CeilingError(result["error"])
    return result


def _send(pipe: Any, parent: int, target: Callable[..., dict[str, Any]], *args: Any) -> None:
    _die_with_parent(parent)
    try:
        pipe.send(target(*args))
    except CeilingError as exc:
        pipe.send({"error": str(exc)})
    except Exception as exc:  # the parent says what failed
        pipe.send({"error": f"{type(exc).__name__}: {exc}"})
    pipe.close()


def _one_process(device: str, dtype: str, threads: Any, size: int | None, array_bytes: int | None) -> dict[str, Any]:
    """One measuring process: the matmul scan (or the one size given) and the two streams, over
    arrays of `array_bytes` (None: sized here, at least 4x the last-level cache)."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise CeilingError("device cuda is not available here (torch.cuda.is_available() is False): measure cpu")
    if threads != "auto":
        torch.set_num_threads(int(threads))
    cache = _last_level_cache(device)
    array = array_bytes or max(4 * (cache or ASSUMED_LLC_BYTES), MIN_ARRAY_BYTES[device])
    dev = torch.device(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    kind = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    rates: dict[int, float] = {}
    with torch.no_grad():
        n = size or FIRST_SIZE
        stalled = 0
        while True:
            try:
                a = torch.randn(n, n, device=dev, dtype=kind)
                b = torch.randn(n, n, device=dev, dtype=kind)
                rates[n], call_s = _rate(lambda: torch.mm(a, b), 2.0 * n ** 3, sync)
                del a, b
            except RuntimeError as exc:  # out of memory at a size past the first: the scan ends there
                if "out of memory" not in str(exc).lower() or not rates:
                    raise
                break
            if size is not None or n * 2 > MAX_SIZE[device] or call_s * 8 > MAX_CALL_S:
                break
            if len(rates) > 1 and rates[n] < SATURATED * max(v for k, v in rates.items() if k < n):
                stalled += 1  # no better than the best smaller size by 5%
                if stalled == PATIENCE:
                    break  # saturated
            else:
                stalled = 0
            n *= 2
        if device == "cuda":
            torch.cuda.empty_cache()
        count = max(1, array // 8)
        x = torch.ones(count, device=dev, dtype=torch.float64)
        y = torch.full((count,), 2.0, device=dev, dtype=torch.float64)
        z = torch.full((count,), 3.0, device=dev, dtype=torch.float64)
        copy = _passes(lambda: x.copy_(y), 2 * count * 8, sync)
        triad = _passes(lambda: torch.add(y, z, alpha=3.0, out=x), 3 * count * 8, sync)
    return {"matmul": {str(k): v for k, v in rates.items()}, "copy": copy, "triad": triad, "cache": cache,
            "array": array, "threads": torch.get_num_threads() if device == "cpu" else None,
            "device_name": torch.cuda.get_device_name() if device == "cuda" else cpu_model()}


def _rate(call: Callable[[], Any], work: float, sync: Callable[[], None]) -> tuple[float, float]:
    """(median work per second over timed blocks, seconds per call) of one size; the first call
    (timed, not counted) sizes the blocks."""
    start = time.perf_counter()
    call()
    sync()
    once = max(time.perf_counter() - start, 1e-9)
    per_block = max(1, int(BLOCK_S / once))
    rates = []
    spent = 0.0
    while len(rates) < MIN_BLOCKS or spent < MIN_TIME_S:
        start = time.perf_counter()
        for _ in range(per_block):
            call()
        sync()
        took = time.perf_counter() - start
        spent += took
        rates.append(work * per_block / took)
    return statistics.median(rates), spent / (per_block * len(rates))


def _passes(call: Callable[[], Any], moved: float, sync: Callable[[], None]) -> float:
    call()
    sync()
    rates = []
    for _ in range(PASSES):
        start = time.perf_counter()
        call()
        sync()
        rates.append(moved / (time.perf_counter() - start))
    return statistics.median(rates)


def _last_level_cache(device: str) -> int:
    """Bytes of the last-level cache: the GPU's L2, or the largest CPU cache sysfs lists; 0 unknown."""
    if device == "cuda":
        import torch

        size = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
        return size
    largest = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        digits = text[:-1] if unit != 1 else text
        if digits.isdigit():
            largest = max(largest, int(digits) * unit)
    return largest


if __name__ == "__main__":  # the worker interpreter: python -m profsweep.ceilings DEVICE DTYPE THREADS PROCESSES PARENT
    device_, dtype_, threads_, processes_, parent_ = sys.argv[1:6]
    _die_with_parent(int(parent_))  # before torch's import, seconds long: the sweep may die meanwhile
    try:
        print(json.dumps(_worker(device_, dtype_, threads_ if threads_ == "auto" else int(threads_),
                                 int(processes_))))
    except CeilingError as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(2)
