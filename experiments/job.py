"""Profile one grid point in this process and write its artifacts.

    python -m experiments.job <job_dir>/job_config.json

is how the sweep runs each job in a process of its own (and how a person reruns one by hand).
The job's work is in parts, each filling its part of the record (`_profile`): prepare (device,
cost, memory guard, build, compile), the first call timed on its own (cold: as the profiler's
first wait step; warm: as the first warm-up call), warm-up (when asked), the profiled steps
(experiments.profiling: the configured schedule), the export of each cycle's Chrome trace and
key_averages() table, then peak memory and, without a cost model, FLOPs and bytes counted. The
un-profiled steps are timed where no profiler has been (`timed_in`): a warm job before its
profiled steps, a cold job in its twin (experiments.twin) once all else is done. A compiled job
traces Inductor's kernel-to-node provenance while it compiles and reads it into provenance.json
last (experiments.provenance). `run_job` turns any failure into the record and writes
metrics.json. Every file is written atomically.
"""

from __future__ import annotations

import collections.abc
import faulthandler
import importlib
import itertools
import math
import os
import sys
import time
import traceback
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from experiments import allocator, provenance, records, seam
from profsweep import machine
from experiments.config import AUTO, ConfigError, JobConfig, config_from_dict
from experiments.lifeline import PARENT_ENV, die_with_parent
from experiments.records import JobError
from profsweep.contract import FINAL, first_line, message, read_json
from profsweep.sweep_state import SWEEP

if TYPE_CHECKING:  # both import torch: the job imports them once it runs (_settle_process)
    from experiments.profiling import ProfilingSession
    from experiments.steps import Step

MEMORY_HEADROOM = 0.9  # a job may plan to use at most this share of the free memory
# Un-profiled timing (see timed_in below): at least TIMED_MIN_STEPS steps and TIMED_MIN_S
# seconds, for a stable median; for big steps, stop after TIMED_MAX_S once TIMED_FLOOR ran.
TIMED_MIN_STEPS, TIMED_MIN_S = 20, 0.2
TIMED_FLOOR, TIMED_MAX_S, TIMED_MAX_STEPS = 3, 0.5, 20_000
# Compile against eager side by side (_side_by_side): pairs of blocks (eager's, compiled's), at least
# SIDE_MIN_PAIRS and SIDE_MIN_S seconds; for big steps, stop after SIDE_MAX_S once SIDE_FLOOR pairs
# ran. A block is the steps that take about SIDE_BLOCK_S (one at least, SIDE_BLOCK_MAX at most).
# SIDE_MIN_S: a process's ratio is judged over 3 processes by Student's t (2 degrees of freedom),
# so its own noise counts almost twice: matmul_add 1024 bf16 on this project's 2-core machine,
# compiled over eager from 10 pairs of blocks (0.18 s) scattered 1.2-1.9% within one process, and
# processes of 10 pairs 1.00-1.09 (the same within ±5% in 2 sweeps of 3); 0.4 s halves that scatter.
SIDE_MIN_PAIRS, SIDE_MIN_S, SIDE_FLOOR, SIDE_MAX_S = 10, 0.4, 5, 0.5
SIDE_BLOCK_S, SIDE_BLOCK_MAX = 0.01, 200
SIDE_LONG_S = 10.0  # SIDE_FLOOR pairs of steps would take longer: one pair (a step of 1 s or more)
TIMED_SAMPLES_KEPT = 201  # more steps are kept as this many evenly spaced order statistics (the median among them)


def run_job(config: JobConfig, job_dir: Path, own_process: bool = False) -> dict[str, Any]:
    """Profile `config`, write its artifacts into `job_dir`, and return the metrics record.
    `own_process`: this process is the job's own and has run nothing yet (`python -m
    experiments.job`), so a cold job may fork its twin (experiments.twin) to time its un-profiled
    steps.

    Never raises for a failure of the workload: the record says `failed` with the error.
    """
    _log_recompiles(config)  # before the workload's module is imported (base_record reads its defaults)
    record = records.base_record(config, job_dir)
    record["started_at"] = records.now_iso()
    signalled: list[int] = []
    try:
        with _noting_interrupts(signalled):
            _profile(config, job_dir, record, twin_allowed=own_process)
        record["status"] = "ok"
    except BaseException as exc:  # the record carries it (a workload's own BaseException too); the sweep goes on
        if isinstance(exc, GeneratorExit) or (isinstance(exc, KeyboardInterrupt) and (signalled or SWEEP.stopped)):
            raise  # Ctrl-C, SIGTERM: the sweep's stop, said by it
        if isinstance(exc, KeyboardInterrupt):  # raised by the workload itself: no signal reached the job
            said = message(exc)
            exc = JobError(f"the workload raised KeyboardInterrupt{': ' + said if said else ''} itself (no Ctrl-C or "
                           "SIGTERM reached the job)")
        if isinstance(exc, SystemExit):  # the workload called sys.exit(): say so, in the log too
            exc = JobError(f"the workload called sys.exit({exc.code!r})")
            print(f"error: {exc}", file=sys.stderr, flush=True)
        else:
            traceback.print_exc()
        said = message(exc)[:ERROR_CHARS]  # the whole traceback is in job.log
        record["error"] = (f"{records.DISK_FULL}: {said}" if records.disk_full(exc)
                           else f"{'JobError' if type(exc) is records.Refusal else type(exc).__name__}: {said}"
                           + ("" if isinstance(exc, seam.WorkloadError) else autograd_hint(said, config)))
        record[FINAL] = final_failure(exc)
    record["finished_at"] = records.now_iso()
    records.write_json(job_dir / records.METRICS_FILE, record)
    return record


ERROR_CHARS = 4000  # of an exception's message in the record (a workload's may be megabytes)

# autograd's words for a training step the workload's own code cannot train, and what to change
AUTOGRAD_HINTS = (
    ("does not require grad and does not have a grad_fn",
     "the loss does not depend on anything that trains: the model's forward runs under torch.no_grad() or "
     "detaches its output, or its parameters are frozen, or were made under torch.inference_mode() (whose tensors "
     "never train: build the model outside it)"),
    ("Inference tensors cannot be saved for backward",
     "the model's parameters or inputs were made under torch.inference_mode(), whose tensors never train: build "
     "them outside it (the factory already runs under torch.no_grad())"),
    ("grad can be implicitly created only for real scalar outputs",
     "the loss is complex: Workload(loss=...) must return a real number (e.g. out.abs().sum())"),
    ("grad can be implicitly created only for scalar outputs",
     "the loss is not a scalar: Workload(loss=...) must return one number (e.g. .sum() or .mean() of the output)"),
    ("a leaf Variable that requires grad is being used in an in-place operation",
     "train=true of a function without parameters trains its floating-point inputs, which then require grad: "
     "an in-place op on one fails; clone it first, or return an nn.Module with parameters"),
    ("does not support sparse gradients",
     "the model's gradients are sparse (an nn.Embedding(sparse=True)): of profsweep's optimizers, optimizer=sgd "
     "and optimizer=adagrad update them"),
)


INFERENCE_GRAD_HINT = ("profsweep runs an inference step under torch.no_grad(): a forward that takes gradients "
                      "itself (forces from an energy, torch.autograd.grad) wraps that in torch.enable_grad()")


def autograd_hint(said: str, config: JobConfig) -> str:
    """` (profsweep: what to change)`, where a step failed in autograd for a reason of the
    workload's own code ('' otherwise)."""
    if not config.train:
        return f" (profsweep: {INFERENCE_GRAD_HINT})" if "does not require grad" in said else ""
    return next((f" (profsweep: {hint})" for words, hint in AUTOGRAD_HINTS if words in said), "")


@contextmanager
def _noting_interrupts(signalled: list[int]) -> Iterator[None]:
    """SIGINT while the job runs is noted in `signalled`, then handled as before (Python's
    KeyboardInterrupt, or the sweep's own handler): a KeyboardInterrupt the workload raises
    itself is then told from a stop. Only the main thread may set a handler; elsewhere nothing."""
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous in (signal.SIG_IGN, None):
        yield
        return

    def note(signum: int, frame: Any) -> None:
        signalled.append(signum)
        if not callable(previous):  # SIG_DFL: the process would end; here as Python's own handler does
            raise KeyboardInterrupt
        previous(signum, frame)  # Python's (it raises), or the sweep's own (it may note the stop and go on)

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# Exceptions that say the code is wrong, not the machine or the data: a call with the wrong
# arguments, a name or attribute that is not there, an import that fails, code left unwritten.
CODE_ERRORS = (TypeError, AttributeError, NameError, ImportError, SyntaxError, NotImplementedError)


def final_failure(exc: BaseException) -> bool:
    """A failure that no other process of the grid point can change: the factory's return value or
    settings (seam.WorkloadError), a step that cannot be made (steps.StepError), a configuration
    refused (ConfigError), a refusal of what the job was given (records.Refusal), or an error in the
    code itself (CODE_ERRORS: a TypeError repeats in every process; not one raised inside the
    compiler's or profsweep's own code, MACHINERY). A timeout, running out of memory, a signal, a
    lost lock or any other exception of the workload may change: not final."""
    if isinstance(exc, (seam.WorkloadError, ConfigError, records.Refusal)):
        return True
    return isinstance(exc, CODE_ERRORS) and not _raised_in(exc, MACHINERY)


# Where an error of CODE_ERRORS says nothing certain about the workload's code: the compiler's
# generated modules and caches (one job may read what another still writes), and profsweep's own.
MACHINERY = ("torch/_inductor/", "torch/_dynamo/", "triton/", *(f"/{Path(__file__).parent.name}/{name}" for name in
                                                                 ("job.py", "twin.py", "profiling.py", "counting.py",
                                                                  "placement.py", "allocator.py", "provenance.py")))


def _raised_in(exc: BaseException, places: tuple[str, ...]) -> bool:
    """Whether the innermost Python frame of the exception's traceback is in one of `places`."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
    return any(place in where for place in places)


DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass
class Prepared:
    """What the parts of a job share once it is prepared: the device, the workload built on it,
    its step (compiled when asked), and the cost model's numbers (None: counted after profiling)."""

    config: JobConfig
    device: str
    free: int | None  # memory available where the tensors live, when the job started
    workload: seam.Workload
    modules: list[Any]  # the nn.Modules the step runs (steps.modules_of)
    step: Step
    cost: seam.Cost | None
    sync: Callable[[], None]  # synchronise the device before reading a clock
    graphs: int = 0  # Dynamo's graphs compiled in this process when the step was made, then once it was warm
    # what the memory estimate before the first call held of the weights: the modules' tensors,
    # and the trained parameters (whose gradients and state it guessed); lazy ones were not made yet
    guessed: tuple[int, int] = (0, 0)
    limits: int = 0  # the frames Dynamo had given up recompiling in this process when the step was made
    frames: int = 0  # the frames Dynamo had compiled in this process when `graphs` was last set

    def warm(self) -> None:
        """What Dynamo compiles from here on is a recompilation of the warm step."""
        self.graphs, self.frames = dynamo_graphs()[0], dynamo_frames()

    def recompiles(self) -> int:
        """The compilations Dynamo made since `warm`: recompilations of a warm step, each a new graph
        or a frame compiled again without one (a resumed frame after a graph break guarding on a
        Python number: helper-56's `.item()` of a changing buffer recompiled 8 times, 0 graphs)."""
        return max(dynamo_graphs()[0] - self.graphs, dynamo_frames() - self.frames)

    def grad_mode(self) -> Any:
        import torch

        return torch.enable_grad() if self.config.train else torch.no_grad()


def _phase(text: str) -> None:
    """Say in the job's log which part of its work starts (records.PHASE_MARK): a timeout then
    names it. Only in a job process a sweep launched (its log is a file; never in a measured window)."""
    if os.environ.get(PARENT_ENV):
        sys.stderr.flush()  # after what the workload wrote; to fd 2, whatever it made of sys.stderr
        try:
            os.write(2, f"\n{records.PHASE_MARK}{text}\n".encode("utf-8", errors="replace"))
        except OSError:  # a log that cannot be written: the phase goes unsaid
            pass


def _profile(config: JobConfig, job_dir: Path, out: dict[str, Any], twin_allowed: bool = False) -> None:
    """Do the job's work in its parts, each adding its measurements to `out` as soon as they are
    known: prepare, first call, warm-up, the profiled steps, the export, the post-counts, and the
    un-profiled timing where no profiler has been (timed_in)."""
    _settle_process(config)
    # before the twin's fork: it inherits the thresholds; the record says what the process ran with
    out["allocator"], unheld = allocator.hold(config.run.allocator)
    if unheld:
        print(f"warning: {unheld}", file=sys.stderr, flush=True)
    import threading

    threads = threading.active_count()  # a process is not forked beside running threads
    twin = _fork_twin(config) if twin_allowed else None
    unforked = twin_allowed and twin is None and not config.warmup
    traced = None
    try:
        # after the twin's fork: the twin compiles as the user's code would, untraced
        traced = provenance.start(config)
        _phase(f"building the workload ({config.workload.target})")
        job = _prepare(config, out)
        built = _built(job) if twin is not None else None
        if unheld:
            out["warnings"].append(unheld)
        if unforked:
            why = (f"{threads} threads ran in the job's process before it measured anything (one the workload's "
                   "module started when it was imported?), and a process is not forked beside running threads"
                   if threads > 1 else "this process could not fork one (not Linux, or no process left)")
            _warn(out, f"no twin: {why}; its un-profiled steps were timed in this process after its profiled ones, "
                       "which the profiler has changed")
        with job.grad_mode():
            if job.cost is None:
                _guard_memory_of_what_was_built(job, out)
            # As in the article, no call is added to time the first one: cold, it is the profiler's
            # first wait step (never recorded); warm, the first of the run.warmup_iters warm-up calls.
            first_in_profiler = not config.warmup and config.profiler.wait >= 1
            if not first_in_profiler:
                _phase("the first call")
                _first_call(job, out)
            window_start = None
            if config.warmup:
                _phase("the warm-up calls, then the un-profiled steps")
                _warm_up(job, out)
                window_start = machine.read()
                _time_unprofiled(job, out, "this process, before the profiler")
            _phase("the profiled steps" + (" (the first call is the first)" if first_in_profiler else ""))
            session = _profiled_steps(job, job_dir, out, first_in_profiler)
            window_start = window_start or session.window_start
            if not config.warmup and twin is None:
                _phase("the un-profiled steps, in this process")
                _time_unprofiled(job, out, AFTER_PROFILER)  # before the export changes the process
            out["recompiles"] = job.recompiles()  # during the profiled (and this process's timed) steps
            # what else the machine did while this process measured (a twin says its own)
            out.update(machine.between(window_start, machine.read()) if window_start else {})
            _phase("writing the trace")
            session.export()
            _phase("the extra calls after the profiled steps (peak memory, FLOPs and bytes)")
            _peak_memory(job, out)
            _untrained(job, out)
            if job.cost is None:
                _count_flops_and_bytes(job, out)
        _cycle_totals(config, job.device, session.cycles, out)
        if twin is not None:
            del session  # the profiler's events
            _release(job)
            _phase("the un-profiled steps in the twin process, which builds the workload a second time "
                   "(run.job_timeout_s covers both builds)")
            _twin_timing(twin, out, built)
            twin = None
        _recompiled(job, out)
        _threads_changed(out)
        out["loadavg_1m"] = machine.loadavg()
        provenance.finish(traced, job_dir, out)  # every measurement is done: read it, turn it off
        traced = None
    finally:
        if twin is not None:
            twin.close()
        provenance.discard(traced)


# Where a job timed its un-profiled steps (`timed_in`): a warm job before its profiler starts; a
# cold job, whose profiled steps must come first, in its twin (experiments.twin); a cold job in a
# process that is not its own (run.isolation=none, a test) after its profiled steps, before the
# trace export.
TWIN = "a twin process that never profiled"
AFTER_PROFILER = "this process, after the profiled steps (no twin)"


TWIN_WARMUP_CALLS = 2  # before the twin times: its first call (compiling, if compiled) and one more
# What a twin may fail with that is not the workload's own failure: the job stays ok without
# un-profiled timing (its memory guard, a refusal, running out of memory beside the job, Ctrl-C).
TWIN_SOFT = ("JobError", "Refusal", "ConfigError", "MemoryError", "OutOfMemoryError", "KeyboardInterrupt")


def _fork_twin(config: JobConfig) -> Any:
    """A cold job's twin, forked before the job runs anything, that will time the un-profiled
    steps once the job is done (None for a warm job, or where it cannot fork)."""
    if config.warmup:
        return None
    from experiments.twin import Twin

    return Twin.fork(lambda: _time_in_twin(config))


def _time_in_twin(config: JobConfig) -> dict[str, Any]:
    """The twin's work: build the workload as the job did, call it twice (the first call compiles
    when compiled; the timed median over many steps leaves any later warm-up out), time it."""
    if config.compile:
        # No compile worker pool beside the timed steps (Inductor starts one for Triton): the
        # twin finds the job's graph in its cache (compile_threads is not part of the cache key).
        # A private module on purpose, as _compiler's: torch.compile has no public option for it.
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
        provenance.same_cache_key(config)
    job = _prepare(config, {}, quiet=True)
    built = _built(job)  # as the job's, before the first call (which makes a lazy module's weights)
    with job.grad_mode():
        for _ in range(TWIN_WARMUP_CALLS):
            job.step.call()
        job.sync()
        job.warm()
        start = machine.read()
        timed = _timed(job.step.call, job.sync)
        timed.update(_side_by_side(job, timed["timed_us_per_step"]))
        return {**timed, "window": machine.between(start, machine.read()), "timed_recompiles": job.recompiles(),
                "timed_recompile_limit": int(dynamo_graphs()[1] > job.limits), "built": built}


BUILT_SHOWN = 64  # the input and weight shapes a job and its twin compare one by one (beyond: their hash)


def _built(job: Prepared) -> dict[str, Any] | None:
    """What a job built, by shape: its inputs' tensors and its weights', each as `(8, 62, 256)
    fp32`, sorted (a factory's modules kept in a set come in another order in each process), the
    first BUILT_SHOWN of each and a hash of all. A twin that built otherwise timed another
    workload than the one the job profiled and counted. None where they cannot be read (the
    check is then not made: it never fails a job)."""
    import hashlib

    from experiments import counting
    from experiments.placement import dtype_name
    from torch.nn.parameter import is_lazy

    def shape(t: Any) -> str:
        if is_lazy(t):  # a lazy module's weight has none until the first call
            return "lazy"
        try:
            return f"{tuple(t.shape)} {dtype_name(t.dtype)}"
        except (RuntimeError, NotImplementedError, TypeError, ValueError):  # a strided nested tensor: no sizes
            return f"{t.layout} {dtype_name(t.dtype)}"

    try:
        inputs = sorted(shape(t) for t in counting.tensors(job.workload.inputs, objects=True))
        weights = sorted(shape(t) for t in _module_tensors(job.modules))
    except Exception:  # noqa: BLE001 (a tensor subclass that cannot say even that: no check)
        return None
    digest = hashlib.sha256("\n".join([*inputs, "|", *weights]).encode()).hexdigest()
    return {"inputs": inputs[:BUILT_SHOWN], "weights": weights[:BUILT_SHOWN], "counts": [len(inputs), len(weights)],
            "hash": digest}


def _built_apart(job: dict[str, Any], twin: Any) -> str | None:
    """How what the twin built differs from what the job built (None: alike, by their hash, or
    either could not say)."""
    if not isinstance(twin, dict) or twin.get("hash") == job["hash"]:
        return None
    counts = twin.get("counts") or [None, None]
    for index, kind in enumerate(("input", "weight")):
        shapes = zip(job[f"{kind}s"], twin.get(f"{kind}s") or [])
        apart = next((f"{a} in the job where the twin has {b}" for a, b in shapes if a != b), None)
        if apart is not None:
            return f"{kind} tensors: {apart}"
        if job["counts"][index] != counts[index]:
            return f"{job['counts'][index]} {kind} tensors in the job, {counts[index]} in the twin"
    return f"their shapes differ past the first {BUILT_SHOWN} tensors"


def _twin_timing(twin: Any, out: dict[str, Any], built: dict[str, Any] | None = None) -> None:
    """The twin's timing into the record; a twin that failed, or that built another workload
    than the job (`built`, the job's), leaves the job ok, without un-profiled timing (`timed_error`
    says why: the analysis then reads the profiled step)."""
    from experiments.twin import TwinError

    try:
        found = twin.result()
        apart = _built_apart(built, found.pop("built", None)) if built is not None else None
        if apart is not None:
            raise TwinError(f"the twin built another workload than the job ({apart}): the factory draws what it "
                            "builds from something two processes do not share (np.random.default_rng() or "
                            "random.Random() unseeded, os.urandom, the time, the process id); the un-profiled "
                            "step would time another workload than the one profiled and counted: seed what it "
                            "draws (docs/numbers.md, the twin)")
        window = found.pop("window", {})
        out["recompiles"] = (out.get("recompiles") or 0) + int(found.pop("timed_recompiles", 0) or 0)
        # the twin's timed steps past Dynamo's recompile limit ran eagerly: said as the job's own (_recompiled)
        if found.pop("timed_recompile_limit", 0):
            out["recompile_limit"] = 1
        out.update(found, timed_in=TWIN)
        # the machine over both windows: the job's profiled steps and the twin's timed ones
        for key in ("other_cpus", "cpu_pressure"):
            values = [v for v in (out.get(key), window.get(key)) if v is not None]
            out[key] = max(values) if values else None
        out["measured_s"] = (out.get("measured_s") or 0.0) + (window.get("measured_s") or 0.0)
    except TwinError as exc:
        if exc.raised is not None and exc.raised not in TWIN_SOFT and not exc.memory:
            # the workload's own exception, in the same calls the job made: a failure of the job
            raise JobError(f"the workload raised in the job's twin (the process that builds and calls it again to "
                           f"time its un-profiled steps): {exc}") from None
        out["timed_error"] = str(exc)
        print(f"warning: no un-profiled timing: {exc}", file=sys.stderr, flush=True)


def _release(job: Prepared) -> None:
    """Let go of what the job built (its workload, compiled graphs) before its twin builds its own:
    both must fit in memory at once otherwise."""
    import gc

    import torch

    job.workload = job.step = None  # type: ignore[assignment]
    job.modules.clear()
    if job.config.compile:
        torch.compiler.reset()
    gc.collect()
    if job.device == "cuda":
        torch.cuda.empty_cache()


# --- prepare: device, cost, memory guard, build, compile ----------------------------------------


_AUTO_THREADS: int | None = None  # run.threads=auto: the threads torch chose in this process


def _prepare(config: JobConfig, out: dict[str, Any], quiet: bool = False) -> Prepared:
    """Everything before the first call (the process settled as a fresh interpreter's first,
    _settle_process): the device and machine recorded, the memory guarded (by the cost model before building, by the workload's
    own cost after), the workload built and placed, its step made (compiled when asked)."""
    import torch

    from experiments.steps import make_step, modules_of

    device = resolve_device(config.device)
    global _AUTO_THREADS
    if _AUTO_THREADS is None:
        _AUTO_THREADS = torch.get_num_threads()  # torch's own choice, before any job's workload ran here
    if config.run.threads != AUTO:
        torch.set_num_threads(int(config.run.threads))  # before the job's first op
    elif torch.get_num_threads() != _AUTO_THREADS:  # run.isolation=none: an earlier job's workload set them
        torch.set_num_threads(_AUTO_THREADS)
    w = config.workload
    grid = {"size": config.size, "dtype": getattr(torch, DTYPES[config.dtype]), "device": torch.device(device)}
    cost = seam.estimate(w.target, w.settings, **grid)
    free = available_memory_bytes(device)
    out.update(_machine_fields(device, free))
    _add_cost(out, cost, config)
    _check_memory(out, config, device, free)
    sync = _synchroniser(device)
    with torch.no_grad():  # the weights and inputs it makes carry no autograd graph into the steps
        try:
            workload = seam.build(w.target, w.settings, **grid)
        except RuntimeError as exc:
            if "does not require grad" not in str(exc):
                raise
            raise seam.WorkloadError(f"{w.target} raised {type(exc).__name__}: {first_line(exc)} (profsweep calls the "
                                     "factory under torch.no_grad(): code in it that trains or takes gradients "
                                     "runs inside `with torch.enable_grad():`)") from exc
    modules = modules_of(workload.fn, workload.args, workload.kwargs)
    _place(config, workload, modules, grid, device, out, quiet)
    if cost is None and workload.cost is not None:
        cost = workload.cost
        _add_cost(out, cost, config)
        _check_memory(out, config, device, free)
    step = make_step(workload, train=config.train, optimizer=config.optimizer, name=w.name,
                     compile_fn=_compiler(config, device))
    graphs, limits = dynamo_graphs()
    return Prepared(config, device, free, workload, modules, step, cost, sync, graphs=graphs, limits=limits,
                    frames=dynamo_frames())


def _settle_process(config: JobConfig) -> None:
    """Import what the job runs, then settle the garbage collector: a forked job and a fresh
    interpreter start their work from the same state (forkserver.settle_garbage_collector)."""
    import torch  # noqa: F401
    import torch.profiler  # noqa: F401

    from experiments import counting, placement, profiling, steps  # noqa: F401
    from experiments.forkserver import COMPILER_MODULES, settle_garbage_collector

    if config.compile:  # what a forked job's template imported (with a CPU-only torch) before settling
        for name in COMPILER_MODULES:
            importlib.import_module(name)
    settle_garbage_collector()  # the collector's state of a fresh interpreter, however the job started


def _machine_fields(device: str, free: int | None) -> dict[str, Any]:
    """Where the job runs: device, versions, memory, threads, CPUs, the wait for its device slot."""
    import torch

    return dict(
        device=device,
        device_name=device_name(device),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        memory_available_bytes=free,
        torch_threads=torch.get_num_threads(),
        cpu_count=machine.cpus(),
        lock_wait_s=_float(os.environ.get(records.LOCK_WAIT_ENV)),
        ran_dtype=None,  # what the factory's parameters and inputs turn out to be (placement.py)
        ran_device=None,
        warnings=[],
    )


def _synchroniser(device: str) -> Callable[[], None]:
    """A call that waits for the device's queued work (nothing to wait for on the CPU)."""
    import torch

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    return sync


def _place(config: JobConfig, workload: seam.Workload, modules: list[Any], grid: dict[str, Any], device: str,
           out: dict[str, Any], quiet: bool = False) -> None:
    """Record the dtype and device the factory's parameters and inputs turned out to have; refuse
    what cannot be profiled (meta tensors), say the rest as warnings."""
    from experiments import placement

    held = placement.of(modules, workload.inputs, dtype=grid["dtype"], device=device,
                        requested_device=config.device, target=config.workload.target)
    out.update(ran_dtype=held.dtype, ran_device=held.device, warnings=held.warnings)
    if held.refusal:
        raise records.Refusal(held.refusal)
    for warning in ([] if quiet else held.warnings):
        print(f"warning: {warning}", file=sys.stderr, flush=True)


_RECOMPILES_LOGGED = False  # this process has Dynamo log its recompile reasons (into job.log)


def _log_recompiles(config: JobConfig) -> None:
    """Dynamo's reasons for every recompilation (the guard that failed, the line that set it) into
    job.log, which the recompilation warning points to, for a job in its own process (whose
    output is job.log) where the user has not chosen what torch logs (TORCH_LOGS); nothing is
    logged where nothing recompiles. set_logs sets all of torch's logs at once: called before the
    workload's module is imported, so that what its code sets replaces this."""
    global _RECOMPILES_LOGGED
    if config.run.isolation != "process" or os.environ.get("TORCH_LOGS"):
        return
    try:
        import torch._logging

        torch._logging.set_logs(recompiles=True)
        _RECOMPILES_LOGGED = True
    except (ImportError, AttributeError, TypeError, ValueError):  # a torch without this log: the warning says how
        pass


def _compiler(config: JobConfig, device: str) -> Callable[[Any], Any] | None:
    """torch.compile with the job's settings (None for an eager job)."""
    if not config.compile:
        return None
    import torch

    if device == "cpu":
        # Name Inductor's generated C++ kernels in the trace (graph_0_cpp_fused_...), so
        # their time shows as compute instead of hiding in the compiled graph's call.
        # A private module on purpose: torch.compile's public `options=` would carry this, but it
        # may not be given with `mode=` (torch refuses both), and compiler.mode is a grid key.
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True

    def compile_fn(fn: Any) -> Any:
        return torch.compile(fn, mode=config.compiler.mode, backend=config.compiler.backend,
                             dynamic=config.compiler.dynamic)

    return compile_fn


def _guard_memory_of_what_was_built(job: Prepared, out: dict[str, Any]) -> None:
    """Without a cost model, a lower bound before the first call: the tensors the factory made,
    their gradients and optimizer state; the first call's activations are not known yet."""
    from experiments import counting
    from experiments.steps import optimizer_slots

    config, step = job.config, job.step
    resident = counting.storage_bytes([*counting.tensors(job.workload.inputs), *step.parameters,
                                       *_module_tensors(job.modules)])
    job.guessed = (counting.storage_bytes([*step.parameters, *_module_tensors(job.modules)]),
                   counting.storage_bytes(step.parameters))
    grads = job.guessed[1] * (1 + optimizer_slots(config.optimizer))
    out["memory_estimate_bytes"] = resident + (grads if config.train else 0)
    _check_memory(out, config, job.device, job.free)


# --- first call, warm-up, the profiled steps ---------------------------------------------------


# What a step returns when its work has not run yet: a generator's body, map's and filter's
# function, a coroutine's. (Not every iterator: a file object or reversed() of results is done work.)
LAZY = (types.GeneratorType, map, filter, itertools.starmap, collections.abc.Coroutine,
        collections.abc.AsyncIterator)


def _first_call(job: Prepared, out: dict[str, Any]) -> None:
    """Timed on its own: compilation included, device synchronized before and after."""
    from experiments import counting

    config = job.config
    job.sync()
    start = time.perf_counter()
    result = job.step.call()
    job.sync()
    out["first_call_ms"] = (time.perf_counter() - start) * 1e3
    if any(t.is_meta for t in counting.tensors([result], objects=True)):  # meta tensors the factory hid from the check
        raise records.Refusal(f"meta tensors are refused: {config.workload.target}'s step returned a tensor on device "
                       "'meta' (no data: nothing ran); build the model and its inputs on the device the "
                       "factory is given")
    if isinstance(result, LAZY):
        kind = "a coroutine" if isinstance(result, collections.abc.Coroutine) else f"a lazy {type(result).__name__}"
        if isinstance(result, collections.abc.Coroutine):
            result.close()  # never awaited, by design: no warning for it
        raise records.Refusal(f"{config.workload.target}'s step returned {kind}: its work runs only when something "
                              "consumes it, so the step timed nothing; return the results themselves (a tensor, "
                              "or list(...) of them)")
    inside = dynamo_graphs()[0] - job.graphs  # the graphs of the first call (a frame Dynamo skipped makes none)
    job.warm()  # a warm step's recompilations count from here
    if inside and not config.compile:
        _warn(out, f"torch.compile ran inside the workload ({inside} graph{'s' if inside > 1 else ''} on its first "
                   "call: a factory that returns a compiled model, or torch.compile in its code): this eager job "
                   "measured compiled code, and compile against eager compares compiled with compiled")
    if config.compile and not inside and config.run.isolation == "process":  # a fresh process: nothing cached
        out["compiled_nothing"] = True  # the analysis compares nothing with it
        _warn(out, "torch.compile compiled nothing: Dynamo made no graph of the step on its first call (it skipped "
                   "all of its code: an op or a construct it does not trace, as an RNN module's); this compiled job "
                   "ran eagerly, and compile against eager compares eager with eager")
    if config.compile:
        out.update(_compile_counters())
        if not config.warmup and out.get("inductor_cache_hits"):
            # run=fast (or compile_cache=shared): an earlier job compiled this graph
            out["not_cold"] = ("the compiled graph came from Inductor's cache, not a cold compilation "
                               "(run.isolation=none or run.compile_cache=shared)")


def _warm_up(job: Prepared, out: dict[str, Any]) -> None:
    """The rest of the run.warmup_iters warm-up calls (the first call was the first of them)."""
    start = time.perf_counter()
    for _ in range(job.config.run.warmup_iters - 1):
        job.step.call()
    job.sync()
    out["warmup_ms"] = (time.perf_counter() - start) * 1e3
    job.warm()  # what it compiles from here on is a recompilation


def _profiled_steps(job: Prepared, job_dir: Path, out: dict[str, Any], first_in_profiler: bool
                    ) -> ProfilingSession:
    """The configured schedule's steps, each under the workload's record_function, given to the
    profiling session (experiments.profiling); the first is the timed first call when it is the
    profiler's first wait step. Returns the session, ended, its cycles not yet exported."""
    from torch.profiler import record_function

    from experiments.profiling import ProfilingSession

    call, name = job.step.call, job.config.workload.name
    with ProfilingSession(job.config, job_dir, job.device, job.sync) as session:
        for i in range(job.config.profiler.total_steps):
            with record_function(name):
                if i == 0 and first_in_profiler:
                    _first_call(job, out)
                else:
                    call()
            session.step()
    return session


# --- after profiling: un-profiled timing, peak memory, FLOPs and bytes -------------------------


def _time_unprofiled(job: Prepared, out: dict[str, Any], where: str) -> None:
    """Steps without the profiler (_timed), in this process; `where` is said in `timed_in`."""
    job.sync()
    out.update(_timed(job.step.call, job.sync), timed_in=where)
    if where != AFTER_PROFILER:  # after them, CUDA's peak still to be read would hold the eager step's
        out.update(_side_by_side(job, out["timed_us_per_step"]))


def _peak_memory(job: Prepared, out: dict[str, Any]) -> None:
    """CUDA's allocator peak over the recorded steps; on the CPU, one extra call after the profiled
    steps: the live tensors plus the allocator's peak."""
    import torch

    from experiments import counting

    if job.device == "cuda":
        out["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated())
        out["peak_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    else:
        transient, largest = counting.allocations(job.step.call)
        resident = counting.live_tensor_bytes(torch.device(job.device))
        out["peak_memory_bytes"] = resident + transient if transient is not None else None
        if out.get("allocator") == allocator.FIXED and largest and allocator.GLIBC_MMAP_MAX <= largest < allocator.MMAP_THRESHOLD:
            _warn(out, f"the step allocates buffers of up to {largest / 2**20:,.0f} MiB, 32 MiB or more, which glibc "
                       "never keeps in its heap: run.allocator=fixed keeps them there, where a plain process maps "
                       "them anew and faults their pages in on every step, so these steps are faster here than "
                       "in your own script (matmul_add 4096 bf16: 47-48 ms fixed, 64-71 ms steady and system); "
                       "run.allocator=steady (the default) times them as a plain process does")
    out["peak_memory_source"] = "cuda allocator" if job.device == "cuda" else "live tensors + cpu allocator events"


def _untrained(job: Prepared, out: dict[str, Any]) -> None:
    """A training step whose loss reaches only some of the parameters (an output mapping without a
    "loss", summed from its first tensor) times a step that trains part of the model: said in
    `warnings`, from one more eager forward and backward after everything is measured."""
    import torch

    if not job.config.train or job.step.unreached is None:
        return
    params = job.step.parameters
    try:
        with torch.enable_grad():
            missed = job.step.unreached()
    except Exception as exc:  # noqa: BLE001 (a check after the measurements: the job stays ok)
        print(f"warning: train=true: whether every parameter gets a gradient was not checked "
              f"({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
        return
    if missed:
        unused = "the forward does not use them, or uses them under torch.no_grad() or detached"
        why = (f"the loss the factory gives does not reach them, or {unused}" if job.step.loss_given else
               f"the default loss is the output's own loss, else its first tensor summed, or {unused}: where the "
               "loss is what misses them, return Workload(fn, args, loss=...) from the factory to train the whole "
               "model")
        said = (f"train=true: {missed} of {len(params)} trained tensors (parameters, or a function's float inputs) "
                f"got no gradient, so the step does not train them: {why}")
        _warn(out, said)


def _count_flops_and_bytes(job: Prepared, out: dict[str, Any]) -> None:
    """No cost model: count FLOPs on one eager call, and the bytes it must move."""
    from experiments import counting
    from experiments.steps import optimizer_slots

    step = job.step
    try:
        flops, uncounted = counting.count_flops(step.eager)
    except Exception as exc:  # noqa: BLE001 (torch's counter, after every measurement: the job stays ok)
        flops, uncounted = None, []
        said = (f"FLOPs not counted: one eager call under torch.utils.flop_counter raised ({type(exc).__name__}: "
                f"{first_line(exc)}; the counter, or the workload itself on that call); achieved FLOP/s and "
                "intensity are left out and the series' model uses the bytes moved: a cost model gives the FLOPs "
                "(docs/own-model.md)")
        _warn(out, said)
    out["flops_per_call"] = flops if not uncounted else None
    if uncounted:  # a count without their matrix products would make every FLOP figure wrong, not just low
        out["flops_uncounted"] = ", ".join(uncounted)
        said = (f"FLOPs not counted: {', '.join(uncounted)} ran, and torch.utils.flop_counter has no formula for "
                f"the arithmetic (matrix products, FFTs, factorizations and solves, a custom or quantized op's) inside {'it' if len(uncounted) == 1 else 'them'} (the other ops count "
                f"{flops:,}); achieved FLOP/s and intensity are left out and the series' model uses the bytes "
                "moved: a cost model gives the FLOPs (docs/own-model.md)")
        print(f"warning: {said}", file=sys.stderr, flush=True)  # the report says it per series
    # Inputs read and the output written once; weights read once (what the call reads of them: an
    # embedding's rows looked up), and in training also the trained ones' gradients written and
    # read, and their optimizer state read and written.
    inputs = list(counting.tensors(job.workload.inputs))
    # tensors inside the inputs' own objects (a graph's Data(x, edge_index)) and mappings (a batch
    # as a dict, which may hold what the step never reads: helper-58): counted where read
    plain = {counting.storage_key(t) for t in counting.tensors(job.workload.inputs, mappings=False)}
    held = [t for t in counting.tensors(job.workload.inputs, objects=True) if counting.storage_key(t) not in plain]
    try:
        reads = counting.weight_reads(step.eager, [*step.parameters, *_module_tensors(job.modules)],
                                      trained=step.parameters, inputs=inputs, held=held)
        _products_ran_in(out, reads.products)
        slots = optimizer_slots(job.config.optimizer)
        trained = reads.trained * (2 + 2 * slots)
        out["bytes_per_call"] = (counting.moved_bytes(job.workload.inputs, [], _written(job, reads.output))
                                 + reads.weights + trained + reads.held)
        if out.get("memory_estimate_bytes") is not None:
            # weights the first call made (lazy modules: nn.LazyLinear's), which the estimate missed
            made = counting.storage_bytes([*step.parameters, *_module_tensors(job.modules)]) - job.guessed[0]
            out["memory_estimate_bytes"] += max(made, 0)
        if job.config.train and out.get("memory_estimate_bytes") is not None:
            # the estimate before the first call held a gradient and state for every trained weight: now
            # known, a gradient for those that got one (a sparse one's rows), state for each of them
            guessed = job.guessed[1] * (1 + slots)
            out["memory_estimate_bytes"] += reads.trained + slots * reads.graded - guessed
        if reads.unseen and reads.unseen >= 0.05 * out["bytes_per_call"]:
            _warn(out, f"bytes_per_call counts {reads.unseen:,} bytes of weights whole that no op was seen reading "
                       f"({reads.unseen / out['bytes_per_call']:.0%} of it): a submodule the step does not call, experts "
                       "not routed to, or a kernel outside torch's dispatcher (Triton, a pybind extension) that reads "
                       "them; where the step does not read them, bandwidth and intensity from it are overstated "
                       "(a cost model gives the bytes: docs/own-model.md)")
        if reads.wrote_inputs:
            _warn(out, f"the step writes into its own inputs ({', '.join(reads.wrote_inputs[:3])}): every step runs on "
                       "what the one before left, so the steps timed are not one step repeated (a value that grows "
                       "reaches inf and NaN, one that shrinks denormals and zero, whose paths can be slower or "
                       "faster); write into a copy, or return fresh inputs from the factory for each call")
    except Exception as exc:  # noqa: BLE001 (a tensor whose storage cannot be read, e.g. a nested one)
        out["bytes_per_call"] = None
        _warn(out, f"bytes moved not counted: one more eager call to count them raised ({type(exc).__name__}: "
                   f"{first_line(exc)}; a tensor whose storage cannot be read, or the workload itself on that call)")
    out["flops_source"] = "counted" if flops is not None and not uncounted else "not counted"


def _cycle_totals(config: JobConfig, device: str, cycles: list[dict[str, Any]], out: dict[str, Any]) -> None:
    """The profiled steps, the footer totals summed over the cycles, and each cycle's files."""
    p = config.profiler
    if len(cycles) != p.repeat:
        raise JobError(f"the profiler delivered {len(cycles)} of {p.repeat} traces")
    self_device = [c["self_device_total_us"] for c in cycles]
    out.update(
        steps=p.active * p.repeat,
        self_cpu_total_us=sum(c["self_cpu_total_us"] for c in cycles),
        self_device_total_us=None if device != "cuda" else sum(self_device),
        trace_file=";".join(c["trace_file"] for c in cycles),
        trace_sizes=";".join(c["trace_sizes"] for c in cycles),  # each trace's bytes: resume sees one cut short
        table_file=";".join(c["table_file"] for c in cycles),
    )


def _timed(call: Callable[[], Any], sync: Callable[[], None]) -> dict[str, Any]:
    """Steps without the profiler, each timed on its own with the device synchronised (as
    torch.utils.benchmark times them): `timed_us_per_step` (their median), `timed_samples_us`
    (the steps, or TIMED_SAMPLES_KEPT evenly spaced order statistics of them when there were
    more: the same median), `timed_slow_steps` (steps that waited for a busy core) and
    `timed_minor_faults_per_step` (the process's minor page faults over the timed steps, per step:
    a warm step that faults is allocating fresh pages from the system every time)."""
    from profsweep.stats import median, quantiles, slow_steps

    samples: list[float] = []
    before = {kind: speed_probe(kind) for kind in PROBE_KINDS}
    faults = _minor_faults()
    start = time.perf_counter()
    while True:
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        end = time.perf_counter()
        samples.append((end - t0) * 1e6)
        elapsed, n = end - start, len(samples)
        if (n >= TIMED_MAX_STEPS or (n >= TIMED_MIN_STEPS and elapsed >= TIMED_MIN_S)
                or (n >= TIMED_FLOOR and elapsed >= TIMED_MAX_S)):
            break
    after = _minor_faults()
    after_probes = {kind: speed_probe(kind) for kind in PROBE_KINDS}
    kept = [round(v, 3) for v in (samples if len(samples) <= TIMED_SAMPLES_KEPT else quantiles(samples, TIMED_SAMPLES_KEPT))]
    # the median of what is kept (the kept order statistics hold the median): the record agrees with itself
    return {"timed_us_per_step": median(kept), "timed_steps": len(samples),
            "timed_samples_us": kept, "timed_slow_steps": slow_steps(samples),
            "timed_minor_faults_per_step": (after - faults) / len(samples) if None not in (faults, after) else None,
            "speed_probe_before_us": before["speed"], "speed_probe_after_us": after_probes["speed"],
            **{f"{kind}_probe_us": math.sqrt(before[kind] * after_probes[kind])  # type: ignore[operator]
               if before[kind] and after_probes[kind] else None for kind in PROBE_KINDS}}


def _side_by_side(job: Prepared, step_us: float | None = None) -> dict[str, Any]:
    """compile=true: the compiled step and the same step eager, timed in turn in this one process
    right after its un-profiled steps (`step_us`: their median), each step on its own
    (`side_by_side_eager_us` and `side_by_side_compiled_us`, each side's median;
    `side_by_side_steps` a side). What a process draws for itself (where its threads run, its
    heap's layout) moves a step by more than compile changes it (matmul_add 1024 bf16 on this
    project's 2-core machine: compiled over eager from one round's processes to the next 0.96,
    1.20, 1.13): compile against eager is judged on this ratio, one per process. The two take
    turns in blocks of about SIDE_BLOCK_S of the slower one (steps one by one in turn slow a 20 us
    step by up to 14%, eager's more than compiled's; blocks of 2 ms, one 1.5 ms step, up to 8%),
    eager first in every other pair of blocks. `side_by_side_ratio`: the median over the pairs of
    blocks of each pair's compiled median over its eager median, what the process's verdict rests
    on: a burst that slows a few blocks slows their neighbours of the other side too (matmul_add
    4096, 5 pairs of one step each: the two sides' medians 1.29x apart in one process, 0.74-0.87x
    in the other 8). A side that raises
    leaves the job as it was, without them (`side_by_side_error` says why)."""
    from profsweep.stats import median

    if not job.config.compile or job.step.eager is job.step.call:
        return {}
    compiled, eager, sync = job.step.call, job.step.eager, job.sync
    compiled_us: list[float] = []
    eager_us: list[float] = []
    ratios: list[float] = []  # each pair of blocks' compiled median over its eager median
    try:
        # the eager step's own first calls, not kept: they size the blocks with the compiled step's,
        # by the slower of the two (eager may be far slower: a loop compile removed); a second call
        # where the first, slower than the compiled step, may only have been a first call
        first = _once(eager, sync)
        if step_us and first > step_us and step_us < SIDE_BLOCK_S * 1e6:
            first = min(first, _once(eager, sync))
        slower = max(step_us or 0.0, first)
        block = max(1, min(SIDE_BLOCK_MAX, int(SIDE_BLOCK_S * 1e6 / slower))) if slower > 0 else 1
        floor = 1 if 2 * SIDE_FLOOR * slower / 1e6 > SIDE_LONG_S else SIDE_FLOOR
        start, pairs = time.perf_counter(), 0
        while True:
            blocks: dict[str, list[float]] = {"eager": [], "compiled": []}
            turns = (("eager", eager), ("compiled", compiled))
            for side, call in turns if pairs % 2 == 0 else turns[::-1]:
                blocks[side] = [_once(call, sync) for _ in range(block)]
            eager_us += blocks["eager"]
            compiled_us += blocks["compiled"]
            ratios.append(median(blocks["compiled"]) / median(blocks["eager"]))
            elapsed, pairs = time.perf_counter() - start, pairs + 1
            if (len(eager_us) >= TIMED_MAX_STEPS // 2 or (pairs >= SIDE_MIN_PAIRS and elapsed >= SIDE_MIN_S)
                    or (pairs >= floor and elapsed >= SIDE_MAX_S)):
                break
        compiled()  # the process's last step is the compiled one again, as before this comparison
    except Exception as exc:  # noqa: BLE001 (a comparison beside the measurements: the job stays ok)
        said = f"{type(exc).__name__}: {first_line(exc)}"
        print(f"warning: compile against eager not timed side by side: the eager step raised ({said})",
              file=sys.stderr, flush=True)
        return {"side_by_side_error": f"the eager step raised: {said}"}
    finally:
        _let_go_of_eager(job)
    return {"side_by_side_eager_us": round(median(eager_us), 3), "side_by_side_compiled_us": round(median(compiled_us), 3),
            "side_by_side_ratio": float(f"{median(ratios):.6g}"), "side_by_side_steps": len(eager_us)}


def _once(call: Callable[[], Any], sync: Callable[[], None]) -> float:
    """One call's time in microseconds, the device synchronised before and after."""
    sync()
    t0 = time.perf_counter()
    call()
    sync()
    return (time.perf_counter() - t0) * 1e6


def _let_go_of_eager(job: Prepared) -> None:
    """After the eager steps beside the compiled ones: their garbage collected and, on CUDA, the
    blocks they left cached given back, so that what the job measures next (a warm job's profiled
    steps, its reserved peak) starts where it did without them."""
    import gc

    gc.collect()
    if job.device == "cuda":
        import torch

        torch.cuda.empty_cache()


# The machine's speed right before and right after the un-profiled steps, outside their window: a
# 64x64 fp32 matmul on the CPU, the median of PROBE_CALLS calls each timed on its own. A virtual
# machine shares its cores with other tenants; while one of them is busy, every step here runs
# slower alike (measured on this project's 2-core VM: the probe 6.9 -> 9.4 us and matmul_add 64
# 19.4 -> 26.5 us, both 1.36x, in runs of consecutive processes lasting seconds). No interval over
# one sweep's processes can see that; compare and history can, from the probe.
# On a loaded machine a call can wait for a core (16 ms seen beside a test suite): the probe stops
# after PROBE_BUDGET_S once it has PROBE_MIN_CALLS calls.
PROBE_SIZE, PROBE_WARMUP, PROBE_CALLS, PROBE_MIN_CALLS, PROBE_BUDGET_S = 64, 20, 300, 11, 0.03
# The overhead probe, beside it: a one-element torch.add, the Python call and torch's dispatch that
# an overhead-bound step spends its time on. In an A/A pair of the main command (2026-12-07 23:26)
# matmul_add 64's steps ran 1.4-1.6x as long in the second sweep while the matmul probe, in a
# core's L1 cache, read 1.06x: what slows the interpreter's front end need not slow a small matmul.
# The cache probe: one thread adding 1.5 MiB (CACHE_CHUNKS adds of CACHE_CHUNK floats, each below
# torch's grain for splitting work between threads), past a core's own caches into the cache and
# memory the host shares with other tenants. On this project's 2-core VM (2026-12-08 01:19-01:21,
# one process, nothing else running) that add took 16-18 us for 45 s and 28-36 us after, and the
# compiled matmul_add 64 step 39-53 us and 67-78 us with it, while the matmul probe read 4.7-5.1 us
# throughout and the overhead probe 0.86-0.98 us: the two modes of matmul_add 64 between sweeps
# (58 and 93 us, docs/numbers.md), which the other two probes did not see either.
CACHE_CHUNK, CACHE_CHUNKS = 1 << 14, 8
PROBE_KINDS = ("speed", "overhead", "cache")  # each job's record: <kind>_probe_us


def speed_probe(kind: str = "speed") -> float | None:
    """The probe's median time a call, in microseconds (the comments above): the matmul, the
    one-element add (`overhead`) or the one-thread add over 1.5 MiB (`cache`); None where it
    cannot run (a measurement of the machine never fails a job)."""
    try:
        return _probe(kind)
    except Exception as exc:  # noqa: BLE001 (any failure of a side measurement)
        print(f"warning: no {kind} probe: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return None


def _probe(kind: str = "speed") -> float:
    import torch

    n = {"speed": PROBE_SIZE, "overhead": 1}.get(kind, CACHE_CHUNK)
    rows = CACHE_CHUNKS if kind == "cache" else n
    a = torch.full((rows, n), 0.5, dtype=torch.float32, device="cpu")
    out = torch.empty_like(a)
    if kind == "cache":
        chunks = list(zip(a, torch.full_like(a, 0.25), out))

        def op() -> None:
            for x, y, into in chunks:
                torch.add(x, y, out=into)
    else:
        call = torch.mm if kind == "speed" else torch.add

        def op() -> None:
            call(a, a, out=out)
    for _ in range(PROBE_WARMUP):
        op()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < PROBE_CALLS and (len(times) < PROBE_MIN_CALLS or time.perf_counter() - start < PROBE_BUDGET_S):
        t0 = time.perf_counter()
        op()
        times.append(time.perf_counter() - t0)
    times.sort()
    return round(times[len(times) // 2] * 1e6, 3)


def _minor_faults() -> int | None:
    """Minor page faults of this process so far, all its threads (getrusage; None where there is none)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _module_tensors(modules: list[Any]) -> list[Any]:
    """The parameters and buffers of the modules a step runs (steps.modules_of)."""
    return [t for m in modules for t in (*m.parameters(), *m.buffers())]


def _products_ran_in(out: dict[str, Any], products: dict[Any, int]) -> None:
    """Where every matrix product of the step ran in one dtype that is not `ran_dtype` (the
    parameters' and inputs'): torch.autocast in the step, or a cast in it. `ran_dtype` then says
    the products' dtype, the one whose peak the roofline holds the step against, with a warning
    (an fp32 model under autocast to bf16 was held against the fp32 peak)."""
    from experiments.placement import dtype_name

    if len(products) != 1:  # none, or several: the parameters' dtype stands
        return
    dtype = next(iter(products))
    ran = dtype_name(dtype)
    if ran == out.get("ran_dtype"):
        return
    if ran in str(out.get("ran_dtype") or "").split("+"):  # one of the dtypes it holds (fp32+complex64): no cast
        out["ran_dtype"] = ran  # the products' peak is the one it is held against
        return
    if not (dtype.is_floating_point or dtype.is_complex):  # integer arithmetic: no floating-point peak holds it
        _warn(out, f"the step's matrix products ran in {ran}, integer arithmetic: ran_dtype says {ran}, held against "
                   "no floating-point matmul peak (the memory bandwidth only), whatever the grid's dtype")
    else:
        _warn(out, f"the step's matrix products ran in {ran} (torch.autocast in the step, or a cast), its parameters "
                   f"and inputs are {out.get('ran_dtype')}: ran_dtype says {ran}, the dtype whose peak it is held against")
    out["ran_dtype"] = ran


def _written(job: Prepared, returned: Any) -> list[Any]:
    """What one step writes as its output, each byte once: what it returns; in training also what
    its forward pass returns (logits, a model's output), written as an inference call's output is
    (the step returns only its loss, and without these bytes a training step counted less than
    inference; a cost model's training bytes hold them too), the loss only where that output
    holds none. The forward is one more call of the workload, without gradients, after every
    measurement; where it fails, the loss alone."""
    import torch

    from experiments import counting

    if not job.config.train:
        return [returned]
    try:
        with torch.no_grad():
            forward = job.workload.fn(*job.workload.args, **job.workload.kwargs)
    except Exception:  # noqa: BLE001 (the step's own loss then stands for its output)
        return [returned]
    has_loss = any(t.numel() == 1 for t in counting.tensors([forward], objects=True))
    return [forward] if has_loss else [forward, returned]


def _add_cost(out: dict[str, Any], cost: seam.Cost | None, config: JobConfig) -> None:
    """The cost model's numbers; a training step adds the backward pass (twice the forward's
    FLOPs), gradients and optimizer state, and activations kept for the backward pass."""
    from experiments.steps import optimizer_slots

    if cost is None:
        out.update(flops_per_call=None, bytes_per_call=None, memory_estimate_bytes=None, flops_source=None)
        return
    flops, moved, memory = cost.flops, cost.bytes, cost.memory_bytes
    if config.train:
        slots = optimizer_slots(config.optimizer)
        flops = 3 * flops
        moved = moved + (2 + 2 * slots) * cost.param_bytes  # gradients written and read, state read and written
        memory = 2 * memory + (1 + slots) * cost.param_bytes
    out.update(flops_per_call=flops, bytes_per_call=moved, memory_estimate_bytes=memory, flops_source="model")


def _check_memory(out: dict[str, Any], config: JobConfig, device: str, free: int | None) -> None:
    """Refuse a job whose memory estimate exceeds what is free; for good (`failure_is_final`: its
    later repeats are not run) where it exceeds all the device has, which no process frees."""
    need = out.get("memory_estimate_bytes")
    if free is not None and need is not None and need > MEMORY_HEADROOM * free:
        total = total_memory_bytes(device)
        hopeless = total is not None and need > total
        said = (f"memory: {config.label} needs about {_gib(need)} (estimate of inputs, weights"
                f"{', gradients, optimizer state' if config.train else ''} and live intermediates) but only "
                f"{_gib(free)} is available on {device}")
        if hopeless:
            raise records.Refusal(f"{said}, of {_gib(total)} in all: a smaller size fits")
        raise JobError(said)


def dynamo_graphs() -> tuple[int, int]:
    """The graphs Dynamo has compiled in this process, and how many times it gave up recompiling a
    frame (its recompile limit: that code then runs eagerly). From Dynamo's counters, a private
    module (torch has no public count of compilations), which only grow in a process; (0, 0) where
    Dynamo was never imported."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return 0, 0
    try:
        graphs = int(counters["stats"]["unique_graphs"])
        limit = sum(int(n) for k, n in counters["unimplemented"].items()
                    if "recompile limit" in str(k).lower() or "recompile_limit" in str(k))
    except (KeyError, TypeError, ValueError):
        return 0, 0
    return graphs, limit


def dynamo_frames() -> int:
    """The frames Dynamo has compiled in this process (its counters' frames total: a recompiled
    frame counts again, with or without a graph); 0 where Dynamo was never imported."""
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    try:
        return int(counters["frames"]["total"]) if counters is not None else 0
    except (KeyError, TypeError, ValueError):
        return 0


def _recompiled(job: Prepared, out: dict[str, Any]) -> None:
    """Say where the warm step compiled again while it was measured: its times then hold
    compilations, or (past Dynamo's recompile limit) eager code under a compiled label. Counted
    from this job's start: an earlier job of the process (run.isolation=none) is not its."""
    graphs, limit = out.get("recompiles") or 0, dynamo_graphs()[1] > job.limits or bool(out.get("recompile_limit"))
    if out.get("compile"):
        out["recompile_limit"] = int(limit)  # 1: some of the step runs eagerly under a compiled label
    if graphs > 0 or (limit and out.get("compile")):
        why = ("a guard failed once after the first call (a Python number, a shape or a global the step reads "
               "differed from the first call's): one step's time holds that compilation, which a median sets aside"
               if graphs == 1 and not limit else
               "a guard keeps failing (a Python number the step changes, a shape that changes): its step times hold "
               "compilations")
        _warn(out, f"the step was compiled again while it was measured ({graphs} time{'' if graphs == 1 else 's'} "
                   "after its first call" + ("; Dynamo reached its recompile limit and runs the rest eagerly" if limit
                                             else "") + f"): {why}; "
                   + ("job.log has Dynamo's reasons" if _RECOMPILES_LOGGED
                      else "TORCH_LOGS=recompiles shows Dynamo's reasons"))


def _threads_changed(out: dict[str, Any]) -> None:
    """torch_threads as the steps ran: the workload may have set them (torch.set_num_threads in
    its factory or its step), after the job recorded what it started with."""
    import torch

    now, before = torch.get_num_threads(), out.get("torch_threads")
    if before is not None and now != before:
        out["torch_threads"] = now
        _warn(out, f"the workload set torch's threads to {now} (the job started with {before}, run.threads="
                   f"{out.get('threads')}): its steps ran on {now}")


def _warn(out: dict[str, Any], said: str) -> None:
    print(f"warning: {said}", file=sys.stderr, flush=True)
    out.setdefault("warnings", []).append(said)


def _compile_counters() -> dict[str, Any]:
    """Inductor's FX graph cache hits and misses in this process: a miss is a real compilation.
    Read from Dynamo's counters, a private module: torch has no public API for them (its
    torch.compiler namespace exposes no cache statistics); absent in a torch without them."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    return {
        "inductor_cache_misses": int(counters["inductor"]["fxgraph_cache_miss"]),
        "inductor_cache_hits": int(counters["inductor"]["fxgraph_cache_hit"]),
    }


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError(cuda_unavailable_message())
    return requested


def cuda_unavailable_message() -> str:
    import torch

    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return (
        f"device='cuda' is not allowed here: torch {torch.__version__} ({build}) sees no CUDA "
        "device; choose device=cpu or device=auto"
    )


def available_memory_bytes(device: str) -> int | None:
    """Free memory where the tensors will live: the GPU's free memory, or MemAvailable."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def total_memory_bytes(device: str) -> int | None:
    """All the memory of the device: the GPU's, or the machine's RAM."""
    try:
        if device == "cuda":
            import torch

            return int(torch.cuda.mem_get_info()[1])
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def device_name(device: str) -> str | None:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return records.cpu_model()


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB"


def main(argv: list[str]) -> int:
    die_with_parent()  # started by a sweep: never outlive it
    faulthandler.enable()  # a crash in native code leaves the Python stacks in the job's log
    if len(argv) != 1:
        print("usage: python -m experiments.job <job_dir>/job_config.json", file=sys.stderr)
        return 2
    path = Path(argv[0])
    config = config_from_dict(read_json(path))
    try:
        record = run_job(config, path.parent, own_process=True)
    except OSError as exc:  # not even metrics.json could be written
        if not records.disk_full(exc):
            raise
        print(f"{records.DISK_FULL}: {exc}", file=sys.stderr, flush=True)
        return records.EXIT_DISK_FULL
    if str(record.get("error") or "").startswith(records.DISK_FULL):
        return records.EXIT_DISK_FULL
    return 0 if record["status"] == "ok" else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--template"]:  # forkserver.TEMPLATE_FLAG: a template jobs fork from
        from experiments.forkserver import run_child, template_main

        ended = template_main(int(sys.argv[2]), int(sys.argv[3]))
        if isinstance(ended, int):  # the template ends
            sys.exit(ended)
        # a forked child, back at the top of this module: run its job here, at the depth a fresh
        # `python -m experiments.job CONFIG` runs it (template_main says why)
        if ended[:2] != ["-m", "experiments.job"]:
            run_child(ended)
        sys.argv = [sys.argv[0], *ended[2:]]
    code = main(sys.argv[1:])
    # Everything is written and closed: the job is done. End the process now, whatever the
    # workload left running (a non-daemon thread would keep it alive until the sweep's timeout,
    # which would then overwrite an ok record), and without the interpreter's last garbage
    # collection over torch's and Inductor's objects (about 1.3 s after a compiled job).
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
