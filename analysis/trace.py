"""One Chrome trace (or several cycles of one run) -> the metrics a person reads off Perfetto.

Works on any torch.profiler trace: `.json` or `.json.gz`, with or without `ProfilerStep#N`
(without, the whole trace is one window), with or without `distributedInfo`, CUDA, ROCm or
CPU-only. Standard library only: the single-trace path stays light.

How it reads: `parse_trace` streams the file once into a `Trace` of named `HostEvent`s and
`DeviceEvent`s, each nested (parent, depth, self time), marked compute or not, and placed in
its step and training phase; each `analyse_*` function computes one family of metrics from
that (timing, device, launches, phases, ops, kernels, dead window); `analyse_trace` runs them
all and returns the one dict the rest of the project reads (FLAT_KEYS, PER_STEP_KEYS).

Definitions (all times in µs):
- host events: complete (`X`) events on host threads (cpu_op, user_annotation, runtime and
  driver calls, ...). Self time = duration minus direct children on the same thread, with
  torch's own nesting rule, so `self_cpu_total_us` equals key_averages().table()'s footer.
- device events: `kernel`, `gpu_memcpy`, `gpu_memset`, MTIA's `mtia_ccp_events`, and every
  event on a process or stream the trace labels as a device (any accelerator);
  `self_device_total_us` is the sum of their durations. An event with a missing, negative or
  non-finite duration, or a host event on the steps' thread that overlaps them and runs on after
  the last of them for longer than they all took, is malformed: counted and named
  (`malformed_events`), never summed. A device event
  belongs to the step whose runtime call launched it (matched by `correlation`).
- kernels: tensor cores read from the name (TENSOR_CORE_NAME, CUDA_CORE_NAME), and what CUPTI
  records in the kernel's args: estimated achieved occupancy (median over launches),
  registers per thread, shared memory, block size.
- totals (`*_total*`, `compute_us`, `overhead_us`) are over every recorded event, as torch's
  footer is: the profiler records only its active steps (plus any Python frame around them).
- per-step statistics: one window per `ProfilerStep#N` event when there are any, else the
  whole trace is one window. A step's body (`body_us`) is the time of the events directly inside
  its `ProfilerStep#N` on the same thread (a profsweep job: the workload's annotation); the rest
  of the step (`outside_us`) is the profiler's own time, dearest in its first recorded step.
- compute on the CPU: the self time of leaf operators that touch data (see NOT_COMPUTE_OPS and
  mark_compute); everything else is framework overhead. Where there are no kernels, the
  per-kernel statistics are those of the compute ops, each call timed by its self time.
- training steps: the `forward`, `backward` and `optimizer` annotations inside each step; work
  on any thread that starts inside a phase (autograd's own threads too) belongs to it.
"""

from __future__ import annotations

import bisect
import gzip
import itertools
import json
import re
import statistics
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from profsweep.columns import FLAT_KEYS, PER_STEP_KEYS, PHASES  # noqa: F401  (re-exported: the analysis reads them here)

# Device-side events: these categories (CUDA and ROCm's, MTIA's), and every event of a process
# or stream the trace labels as a device ("GPU 0", "MTIA 0", "stream 7"), whatever its category.
LONGEST_US = 1e12  # 11.6 days: an event's duration (µs) at or past this is no measurement
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
# themselves but do not make their caller a wrapper; nor do the pointwise epilogues a library
# kernel applies to its output (EPILOGUES: aten::mkldnn_rnn_layer's aten::add of the bias,
# aten::_addmm_activation's aten::relu_) while they take at most EPILOGUE_SHARE of its time,
# except in a pointwise op (aten::relu -> clamp_min, a wrapper) or a foreach op
# (aten::_foreach_mul_ -> aten::mul_ per tensor: its self time is the loop's). Backward ops
# (aten::mm under MmBackward0) and optimizer ops (aten::_foreach_mul_, aten::lerp_) count like
# any other.
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
EPILOGUES = frozenset(
    "aten::" + name
    for name in (
        "add add_ sub sub_ rsub subtract mul mul_ multiply div div_ divide true_divide "
        "relu relu_ clamp clamp_ clamp_min clamp_min_ clamp_max clamp_max_ threshold threshold_ hardtanh hardtanh_ "
        "leaky_relu leaky_relu_ elu elu_ gelu gelu_ silu silu_ sigmoid sigmoid_ tanh tanh_"
    ).split()
)
FOREACH = "aten::_foreach_"
# An epilogue is a small part of its kernel's time (mkldnn_rnn_layer: 50 us of add in 5 ms;
# _addmm_activation: 30 of 400); a pointwise composite's inner op is most of its own (clip ->
# clamp, selu -> elu, relu6 -> hardtanh): past this share of the parent's time, a wrapper.
EPILOGUE_SHARE = 0.25
NOT_OPERATOR_NAMESPACES = ("autograd::", "torch::", "profiler::")
COMPUTE_MARK = "cpp_fused"  # Inductor's C++ kernels, e.g. graph_0_cpp_fused_gelu_mul_0


def is_operator(name: str) -> bool:
    """An operator call (`ns::op`), as opposed to annotations, runtime calls and bookkeeping."""
    head, sep, tail = name.partition("::")
    return (bool(sep) and head.isidentifier() and tail[:1].isidentifier()
            and not name.startswith(NOT_OPERATOR_NAMESPACES))


def may_compute(name: str) -> bool:
    """An operator that touches data (compute if no such operator runs inside it)."""
    return COMPUTE_MARK in name or (is_operator(name) and name not in NOT_COMPUTE_OPS)


def mark_compute(host: Sequence[HostEvent]) -> None:
    """Set `compute` on nested host events (each after its parent) by the rule above: an operator
    that touches data, with no such operator (initialisers and a kernel's epilogues aside) anywhere
    inside it."""
    candidate: dict[str, bool] = {}  # name -> may_compute(name), decided once per name
    wraps: set[int] = set()  # ids of the events that hold a data-touching operator
    epilogues: dict[int, int] = {}  # id(event) -> the time of the epilogues inside it (ns)
    for h in reversed(host):  # children before their parents
        touches = candidate.get(h.name)
        if touches is None:
            touches = candidate[h.name] = may_compute(h.name)
        wrapper = id(h) in wraps or epilogues.get(id(h), 0) > EPILOGUE_SHARE * h.dur
        h.compute = touches and not wrapper
        if h.parent is None or not (wrapper or touches):
            continue
        if is_epilogue(h.name, h.parent.name):
            epilogues[id(h.parent)] = epilogues.get(id(h.parent), 0) + h.dur
        elif h.name not in INITIALISERS or wrapper:
            wraps.add(id(h.parent))


def is_epilogue(name: str, parent: str) -> bool:
    """Whether an operator `name` inside `parent` may be a library kernel's epilogue (the rule
    above): pointwise, in an operator that is neither pointwise nor a foreach loop."""
    return name in EPILOGUES and parent not in EPILOGUES and not parent.startswith(FOREACH)


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


# --- the trace parsed once: named events, nested, in steps and phases --------------------------


@dataclass(slots=True, eq=False)
class HostEvent:
    """A complete event on a host thread: an op, an annotation, a runtime call, a Python frame.
    Times are integer ns from the trace's base. Read from the event: name to correlation; set
    by parse_trace: the rest."""

    name: str
    cat: str
    ts: int
    dur: int
    correlation: Any = None  # a runtime call's id, shared with the device work it starts
    tid: tuple[Any, Any] = (None, None)  # (pid, tid)
    parent: HostEvent | None = field(default=None, repr=False)  # the innermost event around it
    depth: int = 0  # 0 for a root, parent's + 1
    self_ns: int = 0  # dur minus the dur of its direct children
    compute: bool = False  # compute on the CPU (mark_compute)
    step: int | None = None  # index in Trace.steps of the step it starts in
    phase: str | None = None  # the training phase it starts in (PHASES)


@dataclass(slots=True, eq=False)
class DeviceEvent:
    """Work on a device (kernel, memcpy, memset). Read: name to correlation; set by parse_trace:
    the rest. It belongs to the step and phase of the runtime call that launched it, else of its
    start."""

    name: str
    cat: str
    ts: int
    dur: int
    correlation: Any = None
    kind: str = "kernel"  # kernel, memcpy or memset (_device_kind)
    launch: HostEvent | None = field(default=None, repr=False)  # the runtime call with its correlation
    step: int | None = None
    phase: str | None = None


class MemoryEvent(NamedTuple):
    """An allocation (bytes > 0) or a free (< 0) that profile_memory=True records: a `[memory]`
    instant event, with the allocator's total after it."""

    ts: int  # ns, as host events
    bytes: int
    total_allocated: int
    device_type: int  # 0: CPU, 1: CUDA (c10::DeviceType)
    tid: tuple[Any, Any]
    device_id: int = -1


class Window(NamedTuple):
    """A span of host time: a `ProfilerStep#N` (or the whole trace), a phase annotation."""

    name: str
    start: int  # ns
    end: int
    tid: tuple[Any, Any]


@dataclass
class Trace:
    """One trace (or the cycles of one run) parsed once; every analyzer reads only this."""

    host: list[HostEvent]  # thread by thread, each in time order: a parent before its children
    device: list[DeviceEvent]  # in time order
    steps: list[Window]  # by start: one per ProfilerStep#N, else one for the whole trace
    windowed: bool  # the steps are ProfilerStep#N events
    phases: list[Window]  # the phase annotations (PHASES) on any thread, by start
    meta: dict[str, Any]  # the document without its events (deviceProperties, ...)
    malformed: dict[str, int]  # name -> events of a duration no measurement has (_read, _drop_overrunning)
    kernel_args: dict[str, dict[str, Any]]  # kernel name -> what CUPTI recorded of its launches
    memory: list[MemoryEvent] = field(default_factory=list)  # profile_memory=True's, in time order
    _step_starts: list[int] = field(init=False, repr=False)
    _phase_starts: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._step_starts = [s.start for s in self.steps]
        self._phase_starts = [p.start for p in self.phases]

    def step_at(self, t: int) -> int | None:
        """The index of the step running at `t` (in the whole trace, any time after its start)."""
        i = bisect.bisect_right(self._step_starts, t) - 1
        if i < 0:
            return None
        return i if t < self.steps[i].end or not self.windowed else None

    def phase_at(self, t: int) -> str | None:
        """The phase whose annotation started last at or before `t`, while it lasts."""
        i = bisect.bisect_right(self._phase_starts, t) - 1
        return self.phases[i].name if i >= 0 and t < self.phases[i].end else None


# --- the streaming reader -----------------------------------------------------------------------

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
    if start not in (b"{", b"["):  # say what it is not and how big, never what it holds
        try:
            size = f"{path.stat().st_size:,} bytes"
        except OSError:
            size = "its size unknown"
        raise TraceError(f"{path}: not a Chrome trace (it does not start as a JSON object or list; {size})")


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


def _paths(paths: Path | Sequence[Path]) -> list[Path]:
    return [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]


@contextmanager
def _malformed_events(path: Path) -> Iterator[None]:
    """An event with a field of the wrong type or missing is a TraceError that names the file."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        # AttributeError: an event that is not an object; OverflowError: a time of infinity
        if isinstance(exc, TraceError):
            raise
        raise TraceError(f"{path}: malformed events ({type(exc).__name__}: {exc})") from None


def parse_trace(paths: Path | Sequence[Path]) -> Trace:
    """One trace (or the cycles of one run, same clock), read as it streams into host and device
    events, then nested, marked compute, and placed in steps and phases."""
    paths = _paths(paths)
    readers = [_EventBatches(p) for p in paths]
    with _malformed_events(paths[0]):
        read = _read(batch for reader in readers for batch in reader)
        _drop_overrunning(read)
        if not read.device and not any(read.threads.values()):
            raise TraceError(f"{paths[0]}: no complete events (ph \"X\") in it: it recorded nothing to analyse")
        _move_device_threads(read.threads, read.labels, read.device)
        host = _nest_threads(read.threads)
        mark_compute(host)
        read.device.sort(key=lambda d: (d.ts, d.dur, d.cat, d.name, d.correlation))
        steps = sorted((Window(h.name, h.ts, h.ts + h.dur, h.tid) for h in host if h.name.startswith("ProfilerStep#")),
                       key=lambda s: s.start)
        windowed = bool(steps)
        if not windowed:
            starts = itertools.chain((h.ts for h in host), (d.ts for d in read.device))
            ends = itertools.chain((h.ts + h.dur for h in host), (d.ts + d.dur for d in read.device))
            steps = [Window("whole trace", min(starts, default=0), max(ends, default=0), (None, None))]
        phases = sorted((Window(h.name, h.ts, h.ts + h.dur, h.tid) for h in host
                         if h.cat == "user_annotation" and h.name in PHASES), key=lambda p: (p.start, p.end, p.name))
        malformed = dict(sorted(read.malformed.items(), key=lambda kv: -kv[1]))
        meta = readers[0].meta if readers else {}
        trace = Trace(host, read.device, steps, windowed, phases, meta, malformed, read.kernel_args, read.memory)
        _place(trace)
    return trace


def _drop_overrunning(read: _Read) -> None:
    """A host event on a thread of the recorded steps (`ProfilerStep#N`) that overlaps them and ends
    later after the last of them than all of them took, a duration no recording of these steps
    can hold (a hand-edited or corrupted trace), is malformed: counted and named, never summed.
    Device work is not judged so: a GPU runs what the steps queued long after they return."""
    steps = [(key, h.ts, h.ts + h.dur) for key, events in read.threads.items() for h in events
             if h.name.startswith("ProfilerStep#")]
    if not steps:
        return
    first, last = min(s for _, s, _ in steps), max(e for _, _, e in steps)
    limit = last + (last - first)
    for key in {k for k, _, _ in steps}:
        kept = []
        for h in read.threads[key]:
            if h.ts <= last and h.ts + h.dur > limit:
                read.malformed[h.name] = read.malformed.get(h.name, 0) + 1
            else:
                kept.append(h)
        read.threads[key] = kept


class _Read(NamedTuple):
    threads: dict[tuple[Any, Any], list[HostEvent]]  # (pid, tid) -> its events, as read
    device: list[DeviceEvent]
    labels: list[dict[str, Any]]  # process and thread labels (metadata events)
    malformed: dict[str, int]
    kernel_args: dict[str, dict[str, Any]]
    memory: list[MemoryEvent]


def _read(batches: Iterable[list[dict[str, Any]]]) -> _Read:
    """Each complete event as a host event (by thread) or a device event, batch by batch."""
    threads: dict[tuple[Any, Any], list[HostEvent]] = {}
    device: list[DeviceEvent] = []
    strings: dict[str, str] = {}  # one copy of each name: 100k events share a few thousand
    # Timestamps are µs with 3 decimals, ~1e12 or more: multiplied by 1000 as they are, a double
    # can be 1 ns off, enough to break the nesting. Relative to a base ~1000 s earlier they
    # convert to ns exactly.
    base: int | None = None
    labels: list[dict[str, Any]] = []
    malformed: dict[str, int] = {}
    kernel_args: dict[str, dict[str, Any]] = {}
    memory: list[tuple[float, dict[str, Any], tuple[Any, Any]]] = []
    for batch in batches:
        for e in batch:  # the hot loop: ~100k events in a 35 MB trace; _ns() inlined
            if e.get("ph") != "X":
                if e.get("ph") == "M":
                    labels.append(e)
                elif e.get("name") == "[memory]" and isinstance(e.get("args"), dict):
                    memory.append((e.get("ts"), e["args"], (e.get("pid"), e.get("tid"))))
                continue
            if base is None:
                base = int(float(e["ts"])) - 10**9
            dur = e.get("dur")
            if dur is None or not 0 <= float(dur) < LONGEST_US:  # NaN, infinity, a duration no clock gives
                name = str(e.get("name", ""))
                malformed[name] = malformed.get(name, 0) + 1
                continue
            cat = e.get("cat") or ""  # the format does not require one
            if cat in DEVICE_CATEGORIES:
                args = e.get("args") or {}
                name = e.get("name", "")
                device.append(DeviceEvent(strings.setdefault(name, name), strings.setdefault(cat, cat),
                                          int((float(e["ts"]) - base) * 1000.0 + 0.5),
                                          int(float(dur) * 1000.0 + 0.5), args.get("correlation")))
                if cat == "kernel" and "registers per thread" in args:
                    _add_kernel_args(kernel_args, name, args)
            elif cat not in NOT_HOST:
                args = e.get("args") or {}
                name = e.get("name", "")
                threads.setdefault((e.get("pid"), e.get("tid")), []).append(
                    HostEvent(strings.setdefault(name, name), strings.setdefault(cat, cat),
                              int((float(e["ts"]) - base) * 1000.0 + 0.5), int(float(dur) * 1000.0 + 0.5),
                              args.get("correlation")))
    return _Read(threads, device, labels, malformed, kernel_args, _memory_events(memory, base))


def _memory_events(found: list[tuple[Any, dict[str, Any], tuple[Any, Any]]], base: int | None) -> list[MemoryEvent]:
    """The `[memory]` events that say what they are (a time, bytes, the total after), in time order."""
    out = []
    for ts, args, tid in found:
        try:
            t = float(ts)
            event = MemoryEvent(int((t - (base if base is not None else int(t) - 10**9)) * 1000.0 + 0.5),
                                int(args["Bytes"]), int(args["Total Allocated"]), int(args.get("Device Type", 0)), tid,
                                int(args.get("Device Id", -1)))
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        out.append(event)
    out.sort(key=lambda m: m.ts)
    return out


def _move_device_threads(threads: dict[tuple[Any, Any], list[HostEvent]], labels: list[dict[str, Any]],
                         device: list[DeviceEvent]) -> None:
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
        device.extend(DeviceEvent(h.name, h.cat, h.ts, h.dur, h.correlation) for h in threads.pop(key))


def _nest(events: list[HostEvent]) -> None:
    """Sort one thread's events in place and set each one's parent, depth and self time, by
    torch's rule: a child starts before its parent ends and ends within it."""
    events.sort(key=lambda h: (h.ts, -h.dur))
    stack: list[HostEvent] = []
    for h in events:
        start, end = h.ts, h.ts + h.dur
        while stack:
            parent_end = stack[-1].ts + stack[-1].dur
            if start >= parent_end or end > parent_end:
                stack.pop()
            else:
                break
        h.self_ns = h.dur
        if stack:
            parent = h.parent = stack[-1]
            h.depth = parent.depth + 1
            parent.self_ns -= h.dur
        stack.append(h)


def _nest_threads(threads: dict[tuple[Any, Any], list[HostEvent]]) -> list[HostEvent]:
    """Every thread's events, nested, one thread after the other."""
    host: list[HostEvent] = []
    for key, events in threads.items():
        _nest(events)
        events = _merge_repeated(events)
        for h in events:
            h.tid = key
        host.extend(events)
    return host


def _merge_repeated(events: list[HostEvent]) -> list[HostEvent]:
    """An event that is the only child of an event of the same name is one op with it, as torch's
    own tree has it (EventList._remove_dup_nodes: `aten::div_` re-dispatched to `aten::div_` for a
    wrapped number): its children become the parent's, its self time is the parent's. Without
    this the outer one would be a wrapper and the compute split would differ from key_averages'."""
    children: dict[int, int] = {}
    for h in events:
        if h.parent is not None:
            children[id(h.parent)] = children.get(id(h.parent), 0) + 1
    merged: dict[int, HostEvent] = {}  # id(removed event) -> the event it became part of
    kept = []
    for h in events:  # parents before children: a chain of repeats collapses into its first
        parent = merged.get(id(h.parent), h.parent) if h.parent is not None else None
        h.parent = parent
        if parent is not None and parent.name == h.name and children.get(id(parent), 0) == 1 \
                and h.correlation is None:
            parent.self_ns += h.self_ns
            children[id(parent)] = children.get(id(h), 0)
            merged[id(h)] = parent
            continue
        h.depth = parent.depth + 1 if parent is not None else 0
        kept.append(h)
    return kept


def _place(trace: Trace) -> None:
    """Each event's step and phase (a device event's: its launch's), its kind and launch."""
    phased = bool(trace.phases)
    step_at, phase_at = trace.step_at, trace.phase_at
    launches: dict[Any, HostEvent] = {}  # correlation -> the runtime call (the last, if several)
    for h in trace.host:
        h.step = step_at(h.ts)
        if phased:
            h.phase = phase_at(h.ts)
        if h.correlation is not None and h.cat.endswith(RUNTIME_SUFFIXES):
            launches[h.correlation] = h
    kinds: dict[tuple[str, str], str] = {}
    for d in trace.device:
        kind = kinds.get((d.cat, d.name))
        if kind is None:
            kind = kinds[d.cat, d.name] = _device_kind(d.cat, d.name)
        d.kind = kind
        launch = launches.get(d.correlation) if d.correlation is not None else None
        if launch is not None:
            d.launch, d.step, d.phase = launch, launch.step, launch.phase
        else:
            d.step = step_at(d.ts)
            d.phase = phase_at(d.ts) if phased else None


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


# --- the analyzers: one metric family each, over the parsed trace ------------------------------
# Each returns Part(totals, per_step): totals over every recorded event, as torch's footer is;
# per-step lists with one value per step (in µs where the key says so).

US = 1e-3  # ns -> µs


class Part(NamedTuple):
    """What one analyzer found: result keys (totals, tables) and per-step lists by key."""

    totals: dict[str, Any]
    per_step: dict[str, list[Any]]


def analyse_timing(trace: Trace) -> Part:
    """Host time: each step's span, the part of it its body takes (the events directly inside the
    `ProfilerStep#N` on its thread: in a profsweep job, the workload's annotation) and the rest,
    the profiler's own (`outside_us`); and the self time of host events split into compute and
    framework overhead."""
    n = len(trace.steps)
    self_ns, compute_ns, body_ns = [0] * n, [0] * n, [0] * n
    total_self = total_compute = 0
    for h in trace.host:
        total_self += h.self_ns
        if h.compute:
            total_compute += h.self_ns
        if h.step is not None:
            self_ns[h.step] += h.self_ns
            if h.compute:
                compute_ns[h.step] += h.self_ns
            if h.parent is not None and h.parent.name.startswith("ProfilerStep#"):
                body_ns[h.step] += h.dur
    self_cpu, compute = total_self * US, total_compute * US
    host = [(s.end - s.start) * US for s in trace.steps]
    body = [v * US for v in body_ns] if trace.windowed else [None] * n
    return Part(
        {"self_cpu_total_us": self_cpu, "compute_us": compute, "overhead_us": self_cpu - compute},
        {
            "host_us": host,
            "body_us": body,
            "outside_us": [None if b is None else h - b for h, b in zip(host, body)],
            "self_cpu_us": [v * US for v in self_ns],
            "compute_us": [v * US for v in compute_ns],
            "overhead_us": [(a - b) * US for a, b in zip(self_ns, compute_ns)],
        },
    )


def analyse_device(trace: Trace) -> Part:
    """Device time and work: kernels, memcpys, memsets; the share of each step the device is busy
    (the union of every device event, clipped to the step)."""
    n = len(trace.steps)
    device_ns, kernels, memcpys = [0] * n, [0] * n, [0] * n
    totals = {"kernel": 0, "memcpy": 0, "memset": 0}
    for d in trace.device:
        totals[d.kind] += 1
        if d.step is not None:
            device_ns[d.step] += d.dur
            if d.kind == "kernel":
                kernels[d.step] += 1
            elif d.kind == "memcpy":
                memcpys[d.step] += 1
    union = _union((d.ts, d.ts + d.dur) for d in trace.device)
    busy = []
    for s in trace.steps:
        covered = sum(b - a for a, b in _clip(union, s.start, s.end))
        busy.append(covered / (s.end - s.start) if s.end > s.start else 0.0)
    return Part(
        {"self_device_total_us": sum(d.dur for d in trace.device) * US, "kernels_total": totals["kernel"],
         "memcpys_total": totals["memcpy"], "memsets_total": totals["memset"]},
        {"device_us": [v * US for v in device_ns], "kernels": kernels, "memcpys": memcpys, "gpu_busy": busy},
    )


def analyse_launches(trace: Trace) -> Part:
    """Runtime calls: kernel launches, occupancy queries, synchronisations; the lag from each
    launch to the start of its work (median per step)."""
    n = len(trace.steps)
    launches, queries, sync_ns = [0] * n, [0] * n, [0] * n
    lags: list[list[int]] = [[] for _ in range(n)]
    total_launches = total_queries = 0
    for h in trace.host:
        if h.name in LAUNCHES:
            total_launches += 1
            if h.step is not None:
                launches[h.step] += 1
        elif h.name.startswith(OCCUPANCY_PREFIXES):
            total_queries += 1
            if h.step is not None:
                queries[h.step] += 1
        elif h.name in SYNCS and h.step is not None:
            sync_ns[h.step] += h.dur
    for d in trace.device:
        if d.launch is not None and d.step is not None:
            lags[d.step].append(d.ts - d.launch.ts)
    return Part(
        {"launches_total": total_launches, "occupancy_queries_total": total_queries},
        {"launches": launches, "occupancy_queries": queries, "sync_us": [v * US for v in sync_ns],
         "launch_lag_us": [statistics.median(v) * US if v else None for v in lags]},
    )


def kernels_after_occupancy_query(trace: Trace) -> dict[str, int]:
    """Kernel name -> its launches (in steps) that followed an occupancy query on the same thread."""
    pending: set[tuple[Any, Any]] = set()  # threads with a query since their last launch
    after: set[Any] = set()  # correlation ids of those launches
    for h in trace.host:
        if h.cat.endswith(RUNTIME_SUFFIXES):
            if h.name.startswith(OCCUPANCY_PREFIXES):
                pending.add(h.tid)
            elif h.name in LAUNCHES and h.tid in pending:
                pending.discard(h.tid)
                after.add(h.correlation)
    counts: dict[str, int] = {}
    for d in trace.device:
        if d.kind == "kernel" and d.step is not None and d.correlation in after:
            counts[d.name] = counts.get(d.name, 0) + 1
    return counts


def analyse_phases(trace: Trace) -> Part:
    """A training step's phases (forward, backward, optimizer): the annotation's span, the compute
    and the device work that start in it (a kernel in its launch's phase); no keys without them."""
    n = len(trace.steps)
    host_ns = {p: [0] * n for p in PHASES}
    found = False
    for p in trace.phases:
        i = trace.step_at(p.start)
        if i is not None:
            host_ns[p.name][i] += p.end - p.start
            found = True
    if not found:
        return Part({}, {})
    compute_ns = {p: [0] * n for p in PHASES}
    device_ns = {p: [0] * n for p in PHASES}
    for h in trace.host:
        if h.compute and h.phase is not None and h.step is not None:
            compute_ns[h.phase][h.step] += h.self_ns
    for d in trace.device:
        if d.phase is not None and d.step is not None:
            device_ns[d.phase][d.step] += d.dur
    per_step = {}
    for p in PHASES:
        per_step[f"{p}_host_us"] = [v * US for v in host_ns[p]]
        per_step[f"{p}_compute_us"] = [v * US for v in compute_ns[p]]
        if trace.device:
            per_step[f"{p}_device_us"] = [v * US for v in device_ns[p]]
    return Part({}, per_step)


@dataclass(slots=True)
class _Op:
    category: str | None
    calls: int = 0
    self_host_ns: int = 0
    self_device_ns: int = 0  # of the device work its runtime calls launched
    compute_calls: int = 0
    by_step: dict[int, int] = field(default_factory=dict)  # step -> its self host ns in that step


def analyse_ops(trace: Trace) -> Part:
    """The op table (every host event name: calls, self host and device time, compute calls,
    most expensive first) and aten:: calls per step."""
    table: dict[str, _Op] = {}
    aten = [0] * len(trace.steps)
    for h in trace.host:
        op = table.get(h.name)
        if op is None:
            op = table[h.name] = _Op(h.cat)
        op.calls += 1
        op.self_host_ns += h.self_ns
        op.compute_calls += h.compute
        if h.step is not None:
            op.by_step[h.step] = op.by_step.get(h.step, 0) + h.self_ns
            if h.name.startswith("aten::"):
                aten[h.step] += 1
    for d in trace.device:
        if d.launch is not None:  # the op whose runtime call launched it (or the call itself)
            owner = d.launch.parent.name if d.launch.parent is not None else d.launch.name
            table.setdefault(owner, _Op(None)).self_device_ns += d.dur
    rows = sorted(
        ({"name": name, "calls": op.calls, "self_host_us": op.self_host_ns * US,
          "self_device_us": op.self_device_ns * US, "compute_calls": op.compute_calls, "category": op.category,
          "self_host_us_step_median": _step_median(op.by_step, len(trace.steps)) if trace.windowed else None}
         for name, op in table.items()),
        key=lambda r: -(r["self_host_us"] + r["self_device_us"]),
    )
    return Part({"top_ops": rows}, {"aten_ops": aten})


def analyse_kernels(trace: Trace, platform: str) -> Part:
    """The kernel table (calls, total, median, min, max; tensor cores, occupancy, registers,
    shared memory, block), the largest first; the top kernel's time per step. On the CPU the
    "kernels" are the compute ops, each call timed by its self time."""
    calls: list[dict[str, list[int]]] = [{} for _ in trace.steps]  # per step: name -> ns per call
    if platform != "cpu":
        for d in trace.device:
            if d.kind == "kernel" and d.step is not None:
                calls[d.step].setdefault(d.name, []).append(d.dur)
    else:
        for h in trace.host:
            if h.compute and h.step is not None:
                calls[h.step].setdefault(h.name, []).append(h.self_ns)
    merged: dict[str, list[int]] = {}
    for step_calls in calls:
        for name, durs in step_calls.items():
            merged.setdefault(name, []).extend(durs)
    after = kernels_after_occupancy_query(trace)
    rows = sorted((_kernel_row(trace, platform, name, durs, after.get(name, 0)) for name, durs in merged.items()),
                  key=lambda r: -r["total_us"])
    for row in rows:  # its time in each step, the median over the steps (0 in a step it did not run)
        row["step_median_us"] = (_step_median({i: sum(c.get(row["name"], [])) for i, c in enumerate(calls)},
                                              len(calls)) if trace.windowed else None)
    top = rows[0]["name"] if rows else None
    return Part({"kernels": rows}, {"top_kernel_us": [sum(c.get(top, [])) * US for c in calls] if top else []})


def _kernel_row(trace: Trace, platform: str, name: str, durs: list[int], after_query: int) -> dict[str, Any]:
    recorded = trace.kernel_args.get(name, {})
    occupancy = recorded.get("occupancy_pct") or []
    return {
        "name": name, "calls": len(durs), "total_us": sum(durs) * US, "median_us": statistics.median(durs) * US,
        "min_us": min(durs) * US, "max_us": max(durs) * US, "after_occupancy_query": after_query,
        "tensor_cores": tensor_cores(name) if platform != "cpu" else None,
        "occupancy_pct": statistics.median(occupancy) if occupancy else None,
        **{key: recorded.get(key) for key in ("registers_per_thread", "shared_memory_bytes", "block")},
    }


def _step_median(by_step: dict[int, int], steps: int) -> float:
    """The median over `steps` steps of a time in ns per step (0 where absent), in µs."""
    return statistics.median(by_step.get(i, 0) for i in range(steps)) * US if steps else 0.0


def analyse_dead_window(trace: Trace) -> Part:
    """The first step's dead window: from the start of the first annotation inside it (else of
    the step) to the first aten:: op; None without steps or ops."""
    if not trace.windowed:
        return Part({"dead_window_us": None}, {})
    step = trace.steps[0]
    inside = sorted((h for h in trace.host if step.start <= h.ts < step.end
                     and (step.tid == (None, None) or h.tid == step.tid)), key=lambda h: h.ts)
    annotation = next(
        (h for h in inside if h.cat == "user_annotation" and not h.name.startswith("ProfilerStep#")), None)
    begin = annotation.ts if annotation else step.start
    first_op = next((h for h in inside if h.name.startswith("aten::") and h.ts >= begin), None)
    return Part({"dead_window_us": None if first_op is None else (first_op.ts - begin) * US}, {})


NO_MEMORY = {"memory_step": None, "step_allocated_start_bytes": None, "step_allocated_peak_bytes": None,
             "step_allocated_peak_op": None, "memory_timeline": ()}
MEMORY_POINTS = 400  # of a step's memory timeline at most: the peak and the step's ends always among them


def analyse_memory(trace: Trace, platform: str) -> dict[str, Any]:
    """Memory over one step, from profile_memory=True's `[memory]` events of the device the job
    ran on (the CPU's on a CPU trace): the allocator's total at the step's start, its peak inside
    the step and the innermost operator (else annotation) on the allocating thread around the
    allocation that reached it, and the timeline (µs from the step's start, bytes allocated). The
    step is the last recorded one (the least cold); None everywhere without memory events."""
    none = dict(NO_MEMORY, memory_timeline=[])
    device_type = 0 if platform == "cpu" else 1
    events = [m for m in trace.memory if m.device_type == device_type]
    if not events or not trace.steps:
        return none
    if device_type != 0:  # one device's allocator: the GPU most of the events are on
        ids = [m.device_id for m in events]
        busiest = max(set(ids), key=ids.count)
        events = [m for m in events if m.device_id == busiest]
    step = trace.steps[-1]
    inside = [m for m in events if step.start <= m.ts < step.end]
    before = [m for m in events if m.ts < step.start]
    start = before[-1].total_allocated if before else (inside[0].total_allocated - inside[0].bytes if inside else None)
    if start is None:
        return none
    peak = max(inside, key=lambda m: m.total_allocated, default=None)
    top = peak.total_allocated if peak is not None and peak.total_allocated > start else start
    timeline = [(0.0, start)] + [((m.ts - step.start) * US, m.total_allocated) for m in inside]
    end = inside[-1].total_allocated if inside else start
    timeline.append(((step.end - step.start) * US, end))
    if len(timeline) > MEMORY_POINTS:  # evenly thinned, keeping the ends and the peak
        keep = {0, len(timeline) - 1, 1 + inside.index(peak)} if peak is not None else {0, len(timeline) - 1}
        stride = len(timeline) / MEMORY_POINTS
        keep |= {int(i * stride) for i in range(MEMORY_POINTS)}
        timeline = [timeline[i] for i in sorted(keep)]
    return {"memory_step": step.name, "step_allocated_start_bytes": start, "step_allocated_peak_bytes": top,
            "step_allocated_peak_op": _around(trace, peak) if peak is not None and top > start else None,
            "memory_timeline": timeline}


def _around(trace: Trace, m: MemoryEvent) -> str | None:
    """The innermost operator (else any event but the step) on the event's thread around `m`."""
    around = [h for h in trace.host if h.tid == m.tid and h.ts <= m.ts <= h.ts + h.dur
              and not h.name.startswith("ProfilerStep#")]
    ops = [h for h in around if is_operator(h.name)]
    chosen = max(ops or around, key=lambda h: h.depth, default=None)
    return chosen.name if chosen is not None else None


def platform_of(trace: Trace) -> str:
    """cpu, cuda, rocm, or the accelerator the runtime's category names (mtia_runtime: mtia)."""
    runtime = {(h.cat, h.name) for h in trace.host if h.cat.endswith(RUNTIME_SUFFIXES)}
    if not trace.device and not runtime:
        return "cpu"
    # CUDA's and ROCm's runtimes share a category; hip* calls say ROCm.
    families = {cat.rsplit("_", 1)[0] for cat, _ in runtime} - {"cuda", "hip"}
    if any(name.startswith("hip") for _, name in runtime):
        return "rocm"
    if families and not any(cat.startswith("cuda") for cat, _ in runtime):
        return sorted(families)[0]
    return "cuda"


# --- the facade ---------------------------------------------------------------------------------


def analyse_trace(paths: Path | Sequence[Path]) -> dict[str, Any]:
    """Metrics of one trace, or of the cycles of one run (same clock) taken together."""
    paths = _paths(paths)
    trace = parse_trace(paths)
    with _malformed_events(paths[0]):
        result = summarise(trace)
    result["files"] = [str(p) for p in paths]
    return result


def summarise(trace: Trace) -> dict[str, Any]:
    """Every analyzer over one parsed trace, as the dict analyse_trace returns (FLAT_KEYS and
    more; per-step statistics in PER_STEP_KEYS order, a training step's phases before the top
    kernel's time)."""
    platform = platform_of(trace)
    timing, device, launches = analyse_timing(trace), analyse_device(trace), analyse_launches(trace)
    ops, kernels, phases = analyse_ops(trace), analyse_kernels(trace, platform), analyse_phases(trace)
    totals = {**timing.totals, **device.totals, **launches.totals, **analyse_dead_window(trace).totals}
    values = {**timing.per_step, **device.per_step, **launches.per_step, **ops.per_step}
    per_step = {key: values[key] for key in PER_STEP_KEYS if key != "top_kernel_us"}
    per_step.update(phases.per_step)
    per_step.update(kernels.per_step)
    devices = trace.meta.get("deviceProperties") or []
    result: dict[str, Any] = {
        "window": "steps" if trace.windowed else "whole trace",
        "platform": platform,
        "device_name": devices[0].get("name") if devices and isinstance(devices[0], dict) else None,
        "steps": len(trace.steps) if trace.windowed else 0,
        "step_names": [s.name for s in trace.steps] if trace.windowed else [],
        **{key: totals[key] for key in (
            "self_cpu_total_us", "self_device_total_us", "compute_us", "overhead_us", "kernels_total",
            "launches_total", "memcpys_total", "memsets_total", "occupancy_queries_total", "dead_window_us")},
        "per_step": {key: _stats([v for v in vs if v is not None]) for key, vs in per_step.items()},
        "per_step_values": per_step,
        "kernels": kernels.totals["kernels"],
        "top_ops": ops.totals["top_ops"],
    }
    if platform == "cpu":
        result["self_device_total_us"] = None
    result["regime"] = regime(result)
    result["malformed_events"] = sum(trace.malformed.values())
    result["malformed"] = dict(trace.malformed)
    try:
        result.update(analyse_memory(trace, platform))
    except (ValueError, TypeError, ArithmeticError):  # odd memory events never cost the job its other numbers
        result.update(NO_MEMORY)
    return result


def op_tree(paths: Path | Sequence[Path], max_rows: int = 80) -> list[dict[str, Any]]:
    """The first profiled step as an indented tree of host events: the dispatch chain."""
    raw = [
        e for batch in _EventBatches(_paths(paths)[0]) for e in batch
        if e.get("ph") == "X" and e.get("cat") not in NOT_HOST and e.get("cat") != "python_function"
    ]
    base = int(float(raw[0]["ts"])) - 10**9 if raw else 0
    events = [HostEvent(e.get("name", ""), e.get("cat"), _ns(float(e["ts"]) - base), _ns(e.get("dur", 0)),
                        tid=(e.get("pid"), e.get("tid"))) for e in raw]
    steps = sorted((h for h in events if h.name.startswith("ProfilerStep#")), key=lambda h: h.ts)
    if steps:
        first = steps[0]
        events = [h for h in events if h.tid == first.tid and first.ts <= h.ts < first.ts + first.dur]
    _nest(events)
    return [{"depth": h.depth, "name": h.name, "start_us": (h.ts - events[0].ts) * 1e-3, "dur_us": h.dur * 1e-3}
            for h in events[:max_rows]]


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


# Inductor names each compiled graph's call by its hash, which changes with torch, the graph and
# the settings: the same call under two hashes is one op that did not change.
_GRAPH_HASH = re.compile(r"(## Call CompiledFxGraph) \w+ (##)")


def same_op(name: str) -> str:
    return _GRAPH_HASH.sub(r"\1 \2", name)


def is_op(row: dict[str, Any]) -> bool:
    """A row of a trace's op table (`top_ops`, ops.csv) that is an op, not an annotation or a
    Python frame: by its trace category, or by its name where the row has none (an ops.csv
    written before it kept the category)."""
    name = str(row["name"])
    if name.startswith("ProfilerStep#"):
        return False
    category = row.get("category")
    if isinstance(category, str) and category:
        return category not in NOT_OP_CATEGORIES
    return is_operator(name) or name.startswith(("cuda", "cu", "hip", "## Call CompiledFxGraph", "Torch-Compiled"))


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
