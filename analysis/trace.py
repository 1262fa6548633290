"""One Chrome trace (or several cycles of one run) -> the metrics a person reads off Perfetto.

Works on any torch.profiler trace: `.json` or `.json.gz`, with or without `ProfilerStep#N`
(without, the whole trace is one window), with or without `distributedInfo`, CUDA, ROCm or
CPU-only. Standard library only: the single-trace path stays light.

Definitions (all times in µs):
- host events: complete (`X`) events on host threads (cpu_op, user_annotation, runtime and
  driver calls, ...). Self time = duration minus direct children on the same thread, with
  torch's own nesting rule, so `self_cpu_total_us` equals key_averages().table()'s footer.
- device events: `kernel`, `gpu_memcpy`, `gpu_memset`, MTIA's `mtia_ccp_events`, and every
  event on a process or stream the trace labels as a device (any accelerator);
  `self_device_total_us` is the sum of their durations. An event with a missing or negative
  duration is malformed: counted and named (`malformed_events`), never summed. A device event
  belongs to the step whose runtime call launched it (matched by `correlation`).
- kernels: tensor cores read from the name (TENSOR_CORE_NAME, CUDA_CORE_NAME), and what CUPTI
  records in the kernel's args: estimated achieved occupancy (median over launches),
  registers per thread, shared memory, block size.
- totals (`*_total*`, `compute_us`, `overhead_us`) are over every recorded event, as torch's
  footer is: the profiler records only its active steps (plus any Python frame around them).
- per-step statistics: one window per `ProfilerStep#N` event when there are any, else the
  whole trace is one window.
- compute on the CPU: the self time of leaf operators that touch data (see NOT_COMPUTE_OPS and
  compute_flags); everything else is framework overhead. Where there are no kernels, the
  per-kernel statistics are those of the compute ops, each call timed by its self time.
- training steps: the `forward`, `backward` and `optimizer` annotations inside each step; work
  on any thread that starts inside a phase (autograd's own threads too) belongs to it.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

# Device-side events: these categories (CUDA and ROCm's, MTIA's), and every event of a process
# or stream the trace labels as a device ("GPU 0", "MTIA 0", "stream 7"), whatever its category.
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events"})
DEVICE_LABEL = re.compile(r"\b(GPU|MTIA|XPU|HPU|NPU|TPU|accelerator|device)\b", re.IGNORECASE)
STREAM_LABEL = re.compile(r"^\s*stream\s+\d+", re.IGNORECASE)
RUNTIME_SUFFIXES = ("_runtime", "_driver")  # cuda_runtime, cuda_driver, hip_runtime, mtia_runtime, ...
# Tensor cores, read from a kernel's name: MMA shapes (s16816, h1688, i8816), hmma, wmma,
# gmma/wgmma (Hopper), tensorop, xmma; CUDA cores: a plain sgemm or dgemm; otherwise unknown.
TENSOR_CORE_NAME = re.compile(r"(?:^|[^a-z0-9])[hsid]\d{3,5}(?=gemm|[^a-z0-9]|$)|hmma|wmma|w?gmma|tensorop|xmma",
                              re.IGNORECASE)
CUDA_CORE_NAME = re.compile(r"[sd]gemm", re.IGNORECASE)
# Not host work: device-side records, the trace's own span, profiler overhead. (Python frames,
# recorded with with_stack=True, are host work: torch's table counts them too.)
NOT_HOST = DEVICE_CATEGORIES | {
    "cuda_sync", "gpu_user_annotation", "Trace", "overhead",
    "cuda_profiler_range", "gpu_instant_event",
}
LAUNCHES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cudaGraphLaunch",
    "cuGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel", "hipGraphLaunch",
})
SYNCS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
})
OCCUPANCY_PREFIXES = (
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "hipOccupancyMaxActiveBlocksPerMultiprocessor",
)
# Compute on the CPU, for any model: the self time of the operators that touch data and leave
# the work to no other such operator. An operator is an event named `namespace::op` (aten::,
# mkldnn::, a custom op's namespace; not torch's own autograd:: and torch:: bookkeeping) or one
# of Inductor's C++ kernels. It touches data unless it is a view, a metadata read, an allocation
# or a conversion that only allocates and copies (NOT_COMPUTE_OPS). An operator that calls
# another one that touches data is a dispatch wrapper (aten::linear, aten::conv1d, aten::mean,
# aten::embedding, aten::relu -> clamp_min): its self time is framework overhead, as are
# annotations, Dynamo guards and Python. The copies and fills that kernels use to initialise
# their outputs (INITIALISERS: aten::addmm copies the bias, aten::sum fills zeros) are compute
# themselves but do not make their caller a wrapper. Backward ops (aten::mm under MmBackward0)
# and optimizer ops (aten::_foreach_mul_, aten::lerp_) count like any other.
NOT_COMPUTE_OPS = frozenset(
    "aten::" + name
    for name in (
        "empty empty_strided empty_like new_empty new_empty_strided resize_ resize_as_ set_ "
        "zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full scalar_tensor "
        "clone contiguous to _to_copy lift lift_fresh lift_fresh_copy "
        "view _unsafe_view view_as reshape _reshape_alias as_strided as_strided_ t t_ transpose transpose_ "
        "permute expand expand_as squeeze squeeze_ unsqueeze unsqueeze_ slice select split "
        "split_with_sizes chunk narrow unbind unfold flatten unflatten movedim swapaxes alias "
        "detach detach_ resolve_conj resolve_neg conj _conj "
        "_local_scalar_dense item is_nonzero size stride numel dim is_same_size result_type "
        "_has_compatible_shallow_copy_type"
    ).split()
)
INITIALISERS = frozenset({"aten::copy_", "aten::fill_", "aten::zero_"})
NOT_OPERATOR_NAMESPACES = ("autograd::", "torch::", "profiler::")
COMPUTE_MARK = "cpp_fused"  # Inductor's C++ kernels, e.g. graph_0_cpp_fused_gelu_mul_0
PHASES = ("forward", "backward", "optimizer")  # a training step's record_function phases


def is_operator(name: str) -> bool:
    """An operator call (`ns::op`), as opposed to annotations, runtime calls and bookkeeping."""
    head, sep, tail = name.partition("::")
    return (bool(sep) and head.isidentifier() and tail[:1].isidentifier()
            and not name.startswith(NOT_OPERATOR_NAMESPACES))


def may_compute(name: str) -> bool:
    """An operator that touches data (compute if no such operator runs inside it)."""
    return COMPUTE_MARK in name or (is_operator(name) and name not in NOT_COMPUTE_OPS)


def compute_flags(names: Sequence[str], parents: Sequence[int]) -> list[bool]:
    """For events with their parent indexes (-1: none): which are compute by the rule above."""
    candidate = [may_compute(n) for n in names]
    wraps = [False] * len(names)
    for i, c in enumerate(candidate):
        if not c or names[i] in INITIALISERS:
            continue
        p = parents[i]
        while p >= 0 and not wraps[p]:
            wraps[p] = True
            p = parents[p]
    return [c and not w for c, w in zip(candidate, wraps)]


try:  # orjson parses big traces about 3x faster than the standard library
    from orjson import JSONDecodeError as _OrjsonError
    from orjson import loads as _orjson_loads

    def _loads(raw: bytes) -> Any:
        try:
            return _orjson_loads(raw)
        except _OrjsonError as exc:
            raise ValueError(str(exc)) from None

except ImportError:  # pragma: no cover - orjson is a dependency, json the fallback
    _loads = json.loads


class TraceError(ValueError):
    """A trace that cannot be read; the message starts with the file's path."""


@dataclass
class Step:
    name: str
    start: int  # ns
    end: int
    tid: tuple[Any, Any]
    host_self_ns: int = 0
    compute_ns: int = 0
    phase_host_ns: dict[str, int] = field(default_factory=dict)
    phase_device_ns: dict[str, int] = field(default_factory=dict)
    phase_compute_ns: dict[str, int] = field(default_factory=dict)
    kernels: int = 0
    launches: int = 0
    memcpys: int = 0
    memsets: int = 0
    occupancy_queries: int = 0
    aten_ops: int = 0
    sync_ns: int = 0
    device_ns: int = 0
    lags_ns: list[int] = field(default_factory=list)
    device_intervals: list[tuple[int, int]] = field(default_factory=list)
    kernel_ns: dict[str, list[int]] = field(default_factory=dict)
    compute_calls: dict[str, list[int]] = field(default_factory=dict)  # self ns per call
    kernels_after_occupancy: dict[str, int] = field(default_factory=dict)


CHUNK_BYTES = 1 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")  # between two objects of the events array (usually)


def _check_head(path: Path, size: int = 1 << 16) -> None:
    """A file that does not start as JSON (an object or a list) is no trace: refused from its
    first bytes, before a 2 GB file is read whole."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        if magic == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(size)
        else:
            with open(path, "rb") as f:
                head = f.read(size)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(f"{path}: cannot read it ({exc})") from None
    start = head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    if start not in (b"{", b"["):
        raise TraceError(f"{path}: not a Chrome trace (it does not start as JSON: {head[:16]!r})")


class _EventBatches:
    """Iterate over the events of a Chrome trace a megabyte at a time, reading the file (or its
    gzip stream) as it goes; `meta` (everything but the events) is set once the iteration ends.

    Parsing the events array piece by piece, from a buffer of a few megabytes, keeps memory near
    the size of the largest batch instead of the whole file (or the several times more that one
    json.loads of the whole document takes).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta: dict[str, Any] = {}
        _check_head(path)
        try:
            with open(path, "rb") as f:
                gzipped = f.read(2) == b"\x1f\x8b"
            self._file = gzip.open(path, "rb") if gzipped else open(path, "rb")
        except OSError as exc:
            raise TraceError(f"{path}: cannot read it ({exc})") from None
        self._eof = False
        buf = self._fill(b"")
        while True:
            stripped = buf.lstrip(b" \t\r\n\xef\xbb\xbf")
            if stripped[:1] == b"[":  # a bare list of events
                start = buf.find(b"[")
                break
            key = buf.find(b'"traceEvents"')
            start = buf.find(b"[", key) if key >= 0 else -1
            if key >= 0 and start > 0:
                if buf[key + len(b'"traceEvents"'):start].strip() != b":":
                    self._close()
                    raise TraceError(f"{path}: not a Chrome trace (traceEvents is not a list)")
                break
            if self._eof:
                self._close()
                raise TraceError(f"{path}: not a Chrome trace (no traceEvents list)")
            buf = self._fill(buf)
        self.head = buf[:start]  # the document before the events array (deviceProperties, ...)
        self._buf = buf[start + 1:]

    def _fill(self, buf: bytes) -> bytes:
        """`buf` and the next piece of the file (sets _eof at its end)."""
        try:
            more = self._file.read(4 * CHUNK_BYTES)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            self._close()
            raise TraceError(f"{self.path}: cannot read it ({exc})") from None
        if not more:
            self._eof = True
            self._close()
        return buf + more

    def _close(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass

    def _fail(self, exc: Exception) -> TraceError:
        return TraceError(f"{self.path}: not a complete JSON trace ({exc})")

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        buf, self._buf = self._buf, b""  # from the first event on
        while True:
            while len(buf) < 2 * CHUNK_BYTES and not self._eof:
                buf = self._fill(buf)
            batch, frm = None, CHUNK_BYTES
            while batch is None:
                m = _BOUNDARY.search(buf, min(frm, len(buf)))
                if m is None:
                    if self._eof:
                        break
                    buf = self._fill(buf)
                    continue
                try:
                    batch = _loads(b"[" + buf[:m.start() + 1] + b"]")
                except ValueError:  # the boundary was inside a string or a nested value
                    frm = m.end()
            if batch is None or m is None:
                break
            yield batch
            buf = buf[m.end() - 1:]
        # The tail: the last events, the array's closing bracket, and the rest of the document.
        k = len(buf)
        error: Exception = ValueError("no closing bracket")
        while True:
            k = buf.rfind(b"]", 0, k)
            if k < 0:
                raise self._fail(error)
            try:
                batch = _loads(b"[" + buf[:k] + b"]")
                meta = _loads(self.head + b"[]" + buf[k + 1:])
            except ValueError as exc:
                error = exc
                continue
            break
        self.meta = meta if isinstance(meta, dict) else {}
        self.meta.pop("traceEvents", None)
        yield batch


def load_trace(path: Path) -> dict[str, Any]:
    """The whole trace as a dict with `traceEvents` (a bare list of events is accepted too)."""
    batches = _EventBatches(Path(path))
    events = [e for batch in batches for e in batch]
    return {**batches.meta, "traceEvents": events}


def analyse_trace(paths: Path | Sequence[Path]) -> dict[str, Any]:
    """Metrics of one trace, or of the cycles of one run (same clock) taken together."""
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    readers = [_EventBatches(p) for p in paths]
    try:
        result = _analyse((batch for reader in readers for batch in reader), readers)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, TraceError):
            raise
        raise TraceError(f"{paths[0]}: malformed events ({type(exc).__name__}: {exc})") from None
    result["files"] = [str(p) for p in paths]
    return result


def _ns(value: Any) -> int:
    """µs (float, 3 decimals at most) -> integer ns; half-up, which for timestamps is round()."""
    return int(float(value) * 1000.0 + 0.5)


def tensor_cores(kernel: str) -> bool | None:
    """Whether a kernel's name says it runs on tensor cores (True), CUDA cores (False), or neither."""
    if TENSOR_CORE_NAME.search(kernel):
        return True
    return False if CUDA_CORE_NAME.search(kernel) else None


def _device_kind(cat: str, name: str) -> str:
    """kernel, memcpy or memset, for a device event of any accelerator."""
    text = f"{cat} {name}".lower()
    if "memcpy" in text:
        return "memcpy"
    return "memset" if "memset" in text else "kernel"


_KERNEL_ARGS = (("est. achieved occupancy %", "occupancy_pct"), ("registers per thread", "registers_per_thread"),
                ("shared memory", "shared_memory_bytes"), ("block", "block"))


def _analyse(batches: Iterable[list[dict[str, Any]]], readers: list[_EventBatches]) -> dict[str, Any]:
    """Metrics of the events, read batch by batch (the readers' `meta` is set at the end)."""
    # --- split: host events per thread, device events, launch calls by correlation id --------
    threads: dict[tuple[Any, Any], list[list[Any]]] = {}
    device: list[tuple[int, int, str, str, Any]] = []  # start, dur, cat, name, correlation
    strings: dict[str, str] = {}  # one copy of each name: 100k events share a few thousand
    # Timestamps are µs with 3 decimals, ~1e12 or more: multiplied by 1000 as they are, a double
    # can be 1 ns off, enough to break the nesting. Relative to a base ~1000 s earlier they
    # convert to ns exactly.
    base: int | None = None
    labels: list[dict[str, Any]] = []  # process and thread labels (metadata events)
    malformed: dict[str, int] = {}  # name -> events with a missing or negative duration
    kernel_args: dict[str, dict[str, Any]] = {}  # kernel name -> what its launches record
    for batch in batches:
        for e in batch:  # the hot loop: ~100k events in a 35 MB trace; _ns() inlined
            if e.get("ph") != "X":
                if e.get("ph") == "M":
                    labels.append(e)
                continue
            if base is None:
                base = int(float(e["ts"])) - 10**9
            dur = e.get("dur")
            if dur is None or float(dur) < 0:
                name = str(e.get("name", ""))
                malformed[name] = malformed.get(name, 0) + 1
                continue
            cat = e.get("cat")
            if cat in DEVICE_CATEGORIES:
                args = e.get("args") or {}
                name = e.get("name", "")
                device.append((int((float(e["ts"]) - base) * 1000.0 + 0.5),
                               int(float(dur) * 1000.0 + 0.5),
                               cat, strings.setdefault(name, name), args.get("correlation")))
                if cat == "kernel" and "registers per thread" in args:
                    _add_kernel_args(kernel_args, name, args)
            elif cat not in NOT_HOST:
                args = e.get("args") or {}
                name = e.get("name", "")
                # [start, dur, name, cat, correlation, self, parent index]
                threads.setdefault((e.get("pid"), e.get("tid")), []).append(
                    [int((float(e["ts"]) - base) * 1000.0 + 0.5), int(float(e.get("dur", 0)) * 1000.0 + 0.5),
                     strings.setdefault(name, name), strings.setdefault(cat, cat), args.get("correlation"), 0, -1]
                )
    meta = readers[0].meta if readers else {}
    _move_device_threads(threads, labels, device)

    host: list[list[Any]] = []
    for thread_events in threads.values():
        offset = len(host)
        for h, parent in zip(thread_events, _nest(thread_events)):
            h[5] = h[1]
            if parent >= 0:
                thread_events[parent][5] -= h[1]
                h[6] = offset + parent
        host.extend(thread_events)
    # thread of each host event, for the dead window
    thread_of: list[tuple[Any, Any]] = []
    for key, thread_events in threads.items():
        thread_of.extend([key] * len(thread_events))

    # --- window and steps --------------------------------------------------------------------
    steps = sorted(
        (Step(h[2], h[0], h[0] + h[1], thread_of[i]) for i, h in enumerate(host) if h[2].startswith("ProfilerStep#")),
        key=lambda s: s.start,
    )
    windowed = bool(steps)
    if not steps:
        starts = [h[0] for h in host] + [d[0] for d in device]
        ends = [h[0] + h[1] for h in host] + [d[0] + d[1] for d in device]
        steps = [Step("whole trace", min(starts, default=0), max(ends, default=0), (None, None))]
    step_starts = [s.start for s in steps]

    def step_of(t: int) -> Step | None:
        i = bisect.bisect_right(step_starts, t) - 1
        if i < 0:
            return None
        s = steps[i]
        return s if t < s.end or not windowed else None

    # --- host events into steps --------------------------------------------------------------
    launch_step: dict[Any, tuple[Step | None, int, int]] = {}  # correlation -> (step, start, host index)
    ops: dict[str, list[Any]] = {}  # name -> [calls, self host ns, self device ns, compute calls, category]
    totals = {"self": 0, "compute": 0, "launches": 0, "occupancy": 0}
    occupancy_pending: dict[Any, bool] = {}  # thread -> an occupancy query since its last launch
    after_occupancy: set[Any] = set()  # correlation ids of launches that followed one
    computes = compute_flags([h[2] for h in host], [h[6] for h in host])
    phases = sorted(
        (h[0], h[0] + h[1], h[2]) for h in host if h[3] == "user_annotation" and h[2] in PHASES
    )
    phase_starts = [p[0] for p in phases]

    def phase_of(t: int) -> str | None:
        i = bisect.bisect_right(phase_starts, t) - 1
        return phases[i][2] if i >= 0 and t < phases[i][1] else None

    for start, end, name in phases:
        s = step_of(start)
        if s is not None:
            s.phase_host_ns[name] = s.phase_host_ns.get(name, 0) + end - start
    for i, h in enumerate(host):
        start, dur, name, cat, corr, self_ns = h[0], h[1], h[2], h[3], h[4], h[5]
        compute = computes[i]
        totals["self"] += self_ns
        totals["compute"] += self_ns if compute else 0
        totals["launches"] += name in LAUNCHES
        totals["occupancy"] += name.startswith(OCCUPANCY_PREFIXES)
        op = ops.setdefault(name, [0, 0, 0, 0, cat])
        op[0] += 1
        op[1] += self_ns
        op[3] += compute
        s = step_of(start)
        if cat.endswith(RUNTIME_SUFFIXES):
            if name.startswith(OCCUPANCY_PREFIXES):
                occupancy_pending[thread_of[i]] = True
            elif name in LAUNCHES:
                if occupancy_pending.pop(thread_of[i], False):
                    after_occupancy.add(corr)
            if corr is not None:
                launch_step[corr] = (s, start, i)
        if s is None:
            continue
        s.host_self_ns += self_ns
        if compute:
            s.compute_ns += self_ns
            s.compute_calls.setdefault(name, []).append(self_ns)
            phase = phase_of(start) if phases else None
            if phase is not None:
                s.phase_compute_ns[phase] = s.phase_compute_ns.get(phase, 0) + self_ns
        if name.startswith("aten::"):
            s.aten_ops += 1
        if name in LAUNCHES:
            s.launches += 1
        elif name in SYNCS:
            s.sync_ns += dur
        elif name.startswith(OCCUPANCY_PREFIXES):
            s.occupancy_queries += 1

    # --- device events into the steps that launched them --------------------------------------
    device.sort()
    for start, dur, cat, name, corr in device:
        launched = launch_step.get(corr) if corr is not None else None
        if launched is not None:
            s, launch_start, host_index = launched
            parent = host[host_index][6]
            owner = host[parent][2] if parent >= 0 else host[host_index][2]
            ops.setdefault(owner, [0, 0, 0, 0, None])[2] += dur
            if s is not None:
                s.lags_ns.append(start - launch_start)
            phase = phase_of(launch_start) if phases else None
        else:
            s = step_of(start)
            phase = phase_of(start) if phases else None
        if s is None:
            continue
        s.device_ns += dur
        if phase is not None:
            s.phase_device_ns[phase] = s.phase_device_ns.get(phase, 0) + dur
        kind = _device_kind(cat, name)
        if kind == "kernel":
            s.kernels += 1
            s.kernel_ns.setdefault(name, []).append(dur)
            if corr in after_occupancy:
                s.kernels_after_occupancy[name] = s.kernels_after_occupancy.get(name, 0) + 1
        elif kind == "memcpy":
            s.memcpys += 1
        else:
            s.memsets += 1
    union = _union((d[0], d[0] + d[1]) for d in device)
    for s in steps:
        s.device_intervals = _clip(union, s.start, s.end)

    result = _summarise(steps, windowed, host, device, ops, meta, thread_of, totals)
    for row in result["kernels"]:
        recorded = kernel_args.get(row["name"], {})
        occupancy = recorded.get("occupancy_pct") or []
        row["tensor_cores"] = tensor_cores(row["name"]) if result["platform"] != "cpu" else None
        row["occupancy_pct"] = statistics.median(occupancy) if occupancy else None
        for key in ("registers_per_thread", "shared_memory_bytes", "block"):
            row[key] = recorded.get(key)
    result["malformed_events"] = sum(malformed.values())
    result["malformed"] = dict(sorted(malformed.items(), key=lambda kv: -kv[1]))
    return result


def _add_kernel_args(found: dict[str, dict[str, Any]], name: str, args: dict[str, Any]) -> None:
    """What CUPTI recorded of a kernel's launch: occupancy (every launch), registers, shared
    memory and block size (the first launch's)."""
    row = found.setdefault(name, {"occupancy_pct": []})
    if "est. achieved occupancy %" in args:
        row["occupancy_pct"].append(float(args["est. achieved occupancy %"]))
    for key, column in _KERNEL_ARGS[1:]:
        if column not in row and key in args:
            value = args[key]
            row[column] = "x".join(str(v) for v in value) if isinstance(value, list) else value


def _move_device_threads(threads: dict[tuple[Any, Any], list[list[Any]]], labels: list[dict[str, Any]],
                         device: list[tuple[int, int, str, str, Any]]) -> None:
    """Events on a process or stream the trace labels as a device are device events, whatever
    their category (an accelerator whose categories this module does not know)."""
    processes, streams = set(), set()
    for e in labels:
        text = str((e.get("args") or {}).get("labels") or (e.get("args") or {}).get("name") or "")
        if e.get("name") == "process_labels" and DEVICE_LABEL.search(text) and "CPU" not in text:
            processes.add(e.get("pid"))
        elif e.get("name") == "thread_name" and STREAM_LABEL.match(text):
            streams.add((e.get("pid"), e.get("tid")))
    for key in [k for k in threads if k[0] in processes or k in streams]:
        for h in threads.pop(key):  # [start, dur, name, cat, correlation, ...]
            device.append((h[0], h[1], h[3], h[2], h[4]))


def _nest(events: list[list[Any]]) -> list[int]:
    """Sort one thread's [start, dur, ...] events in place and return each one's parent index
    (-1 for none), by torch's rule: a child starts before its parent ends and ends within it."""
    events.sort(key=lambda h: (h[0], -h[1]))
    parents = []
    stack: list[int] = []
    for i, h in enumerate(events):
        start, end = h[0], h[0] + h[1]
        while stack:
            parent = events[stack[-1]]
            parent_end = parent[0] + parent[1]
            if start >= parent_end or end > parent_end:
                stack.pop()
            else:
                break
        parents.append(stack[-1] if stack else -1)
        stack.append(i)
    return parents


def op_tree(paths: Path | Sequence[Path], max_rows: int = 80) -> list[dict[str, Any]]:
    """The first profiled step as an indented tree of host events: the dispatch chain."""
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    events = [
        e for e in load_trace(paths[0])["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") not in NOT_HOST and e.get("cat") != "python_function"
    ]
    base = int(float(events[0]["ts"])) - 10**9 if events else 0
    events = [
        [_ns(float(e["ts"]) - base), _ns(e.get("dur", 0)), e.get("name", ""), (e.get("pid"), e.get("tid"))]
        for e in events
    ]
    steps = sorted((h for h in events if h[2].startswith("ProfilerStep#")), key=lambda h: h[0])
    if steps:
        first = steps[0]
        events = [h for h in events if h[3] == first[3] and first[0] <= h[0] < first[0] + first[1]]
    parents = _nest(events)
    depth: list[int] = []
    rows = []
    for h, parent in zip(events, parents):
        depth.append(depth[parent] + 1 if parent >= 0 else 0)
        if len(rows) < max_rows:
            rows.append({"depth": depth[-1], "name": h[2], "start_us": (h[0] - events[0][0]) * 1e-3,
                         "dur_us": h[1] * 1e-3})
    return rows


def _union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _clip(union: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    i = max(0, bisect.bisect_right(union, (start, start)) - 1)
    out = []
    for a, b in union[i:]:
        if a >= end:
            break
        a, b = max(a, start), min(b, end)
        if b > a:
            out.append((a, b))
    return out


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _dead_window_ns(step: Step, host: list[list[Any]], thread_of: list[Any]) -> int | None:
    """First step: from the start of the annotation inside it to the first aten:: op."""
    inside = [
        h for i, h in enumerate(host)
        if step.start <= h[0] < step.end and (step.tid == (None, None) or thread_of[i] == step.tid)
    ]
    inside.sort(key=lambda h: h[0])
    annotation = next(
        (h for h in inside if h[3] == "user_annotation" and not h[2].startswith("ProfilerStep#")),
        None,
    )
    begin = annotation[0] if annotation else step.start
    first_op = next((h for h in inside if h[2].startswith("aten::") and h[0] >= begin), None)
    return None if first_op is None else first_op[0] - begin


def _summarise(
    steps: list[Step],
    windowed: bool,
    host: list[list[Any]],
    device: list[tuple[int, int, str, str, Any]],
    ops: dict[str, list[Any]],
    meta: dict[str, Any],
    thread_of: list[Any],
    totals: dict[str, int],
) -> dict[str, Any]:
    us = 1e-3
    has_device = bool(device)
    runtime = {(h[3], h[2]) for h in host if h[3].endswith(RUNTIME_SUFFIXES)}
    platform = "cpu"
    if has_device or runtime:
        # The runtime's category names the accelerator (mtia_runtime: mtia); CUDA's and ROCm's
        # share theirs, and hip* calls say ROCm.
        families = {cat.rsplit("_", 1)[0] for cat, _ in runtime} - {"cuda", "hip"}
        if any(name.startswith("hip") for _, name in runtime):
            platform = "rocm"
        elif families and not any(cat.startswith("cuda") for cat, _ in runtime):
            platform = sorted(families)[0]
        else:
            platform = "cuda"

    # On the CPU the "kernels" are the compute ops, timed by their self time per call.
    per_call = (lambda s: s.kernel_ns) if platform != "cpu" else (lambda s: s.compute_calls)
    kernels: dict[str, list[int]] = {}
    after_occupancy: dict[str, int] = {}
    for s in steps:
        for name, durs in per_call(s).items():
            kernels.setdefault(name, []).extend(durs)
        for name, n in s.kernels_after_occupancy.items():
            after_occupancy[name] = after_occupancy.get(name, 0) + n
    kernel_rows = sorted(
        (
            {
                "name": name,
                "calls": len(durs),
                "total_us": sum(durs) * us,
                "median_us": statistics.median(durs) * us,
                "min_us": min(durs) * us,
                "max_us": max(durs) * us,
                "after_occupancy_query": after_occupancy.get(name, 0),
            }
            for name, durs in kernels.items()
        ),
        key=lambda r: -r["total_us"],
    )
    op_rows = sorted(
        (
            {"name": name, "calls": int(v[0]), "self_host_us": v[1] * us, "self_device_us": v[2] * us,
             "compute_calls": int(v[3]), "category": v[4]}
            for name, v in ops.items()
        ),
        key=lambda r: -(r["self_host_us"] + r["self_device_us"]),
    )

    per_step = {
        "host_us": [(s.end - s.start) * us for s in steps],
        "self_cpu_us": [s.host_self_ns * us for s in steps],
        "compute_us": [s.compute_ns * us for s in steps],
        "overhead_us": [(s.host_self_ns - s.compute_ns) * us for s in steps],
        "device_us": [s.device_ns * us for s in steps],
        "kernels": [s.kernels for s in steps],
        "launches": [s.launches for s in steps],
        "memcpys": [s.memcpys for s in steps],
        "occupancy_queries": [s.occupancy_queries for s in steps],
        "aten_ops": [s.aten_ops for s in steps],
        "sync_us": [s.sync_ns * us for s in steps],
        "gpu_busy": [
            sum(b - a for a, b in s.device_intervals) / (s.end - s.start) if s.end > s.start else 0.0
            for s in steps
        ],
        "launch_lag_us": [statistics.median(s.lags_ns) * us if s.lags_ns else None for s in steps],
    }
    if any(s.phase_host_ns for s in steps):  # a training step's phases
        for phase in PHASES:
            per_step[f"{phase}_host_us"] = [s.phase_host_ns.get(phase, 0) * us for s in steps]
            per_step[f"{phase}_compute_us"] = [s.phase_compute_ns.get(phase, 0) * us for s in steps]
            if has_device:
                per_step[f"{phase}_device_us"] = [s.phase_device_ns.get(phase, 0) * us for s in steps]
    top = kernel_rows[0]["name"] if kernel_rows else None
    per_step["top_kernel_us"] = [sum(per_call(s).get(top, [])) * us for s in steps] if top else []

    self_cpu = totals["self"] * us
    compute = totals["compute"] * us
    self_device = sum(d[1] for d in device) * us
    dead = _dead_window_ns(steps[0], host, thread_of) if windowed else None
    devices = meta.get("deviceProperties") or []
    result: dict[str, Any] = {
        "window": "steps" if windowed else "whole trace",
        "platform": platform,
        "device_name": devices[0].get("name") if devices and isinstance(devices[0], dict) else None,
        "steps": len(steps) if windowed else 0,
        "step_names": [s.name for s in steps] if windowed else [],
        "self_cpu_total_us": self_cpu,
        "self_device_total_us": self_device if platform != "cpu" else None,
        "compute_us": compute,
        "overhead_us": self_cpu - compute,
        "kernels_total": sum(1 for d in device if _device_kind(d[2], d[3]) == "kernel"),
        "launches_total": totals["launches"],
        "memcpys_total": sum(1 for d in device if _device_kind(d[2], d[3]) == "memcpy"),
        "memsets_total": sum(1 for d in device if _device_kind(d[2], d[3]) == "memset"),
        "occupancy_queries_total": totals["occupancy"],
        "dead_window_us": dead * us if dead is not None else None,
        "per_step": {key: _stats([v for v in values if v is not None]) for key, values in per_step.items()},
        "per_step_values": per_step,
        "kernels": kernel_rows,
        "top_ops": op_rows,
    }
    result["regime"] = regime(result)
    return result


def regime(m: dict[str, Any], flops: float | None = None, bytes_moved: float | None = None,
           ridge_flops_per_byte: float | None = None) -> str | None:
    """overhead-bound when the host costs more than the work; else compute- or memory-bound by
    arithmetic intensity against the device's ridge point (None when the cost is unknown)."""
    if m["platform"] == "cpu":
        work, host = m["compute_us"], m["overhead_us"]
    else:
        work, host = m["self_device_total_us"] or 0.0, m["self_cpu_total_us"]
    if host > work:
        return "overhead-bound"
    if not flops or not bytes_moved or not ridge_flops_per_byte:
        return None
    return "compute-bound" if flops / bytes_moved >= ridge_flops_per_byte else "memory-bound"


# Not ops: the profiler's and the user's annotations (`ProfilerStep#N`, whose name changes every
# step; record_function: forward, backward, the workload's name, Optimizer.step#...) and Python
# frames (with_stack). Their self time is the Python between the ops they hold.
NOT_OP_CATEGORIES = frozenset({"user_annotation", "python_function"})


def is_op(row: dict[str, Any]) -> bool:
    """A row of a trace's op table (`top_ops`) that is an op, not an annotation or a Python frame."""
    return row.get("category") not in NOT_OP_CATEGORIES and not str(row["name"]).startswith("ProfilerStep#")


FLAT_KEYS = (
    "window", "platform", "steps", "self_cpu_total_us", "self_device_total_us",
    "compute_us", "overhead_us", "kernels_total", "launches_total", "memcpys_total",
    "memsets_total", "occupancy_queries_total", "dead_window_us", "malformed_events",
)
# Per-step statistics (step_<key>_median/min/max in summary.csv; phases add <phase>_host_us, ...).
PER_STEP_KEYS = (
    "host_us", "self_cpu_us", "compute_us", "overhead_us", "device_us", "kernels", "launches", "memcpys",
    "occupancy_queries", "aten_ops", "sync_us", "gpu_busy", "launch_lag_us", "top_kernel_us",
)


def flat(m: dict[str, Any]) -> dict[str, Any]:
    """One flat row of a trace's metrics, for summary.csv (units in the column names)."""
    row = {key: m[key] for key in FLAT_KEYS}
    for key, stats in m["per_step"].items():
        for stat, value in stats.items():
            row[f"step_{key}_{stat}"] = value
    top = m["kernels"][0] if m["kernels"] else None
    row["top_kernel"] = top["name"] if top else None
    for key in ("calls", "median_us", "min_us", "max_us"):
        row[f"top_kernel_{key}"] = top[key] if top else None
    row["top_kernel_spread"] = (top["max_us"] / top["median_us"]) if top and top["median_us"] else None
    row["malformed_names"] = "; ".join(f"{n} ({c})" for n, c in list(m.get("malformed", {}).items())[:5]) or None
    return row
