"""Hydra's side of a sweep: the task of each grid point, and callbacks that refuse bad input
before any job starts and sum up at the end.

Hydra turns an exception raised in a callback into a warning, so a refusal here is a
SystemExit with the message already printed.
"""

from __future__ import annotations

import fcntl
import functools
import itertools
import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue, OmegaConfBaseException

from experiments import records, refusals
from experiments import seam
from profsweep.contract import ENVIRONMENT_FILE, PLAN_FILE, SWEEP_LOCK_FILE
from experiments.config import SWEEP_ONLY, ConfigError, JobConfig, config_from_dict
from experiments.launch import Interrupted, Progress, warm_start
from hydra_plugins.profsweep_grid import grid
from hydra_plugins.profsweep_grid.grid import Axis

EXIT_BAD_INPUT = 2
EXIT_FAILED_JOBS = 1
EXIT_INTERRUPTED = 130


def job_config(cfg: DictConfig) -> JobConfig:
    """The typed, validated job configuration of a composed Hydra config."""
    return config_from_dict(plain_config(cfg))


def plain_config(cfg: DictConfig) -> dict[str, Any]:
    """A composed Hydra config as plain data, resolved, without `hydra`."""
    try:
        return {
            str(key): OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
            for key in cfg
            if key != "hydra"
        }
    except (MissingMandatoryValue, InterpolationToMissingValueError) as exc:
        raise missing_value(exc) from None


def missing_value(exc: Exception) -> ConfigError:
    """A `???` value left unset (workload=custom without workload._target_), in words."""
    found = re.search(r"Missing mandatory value: ?([\w.]+)", str(exc))
    key = found.group(1) if found else getattr(exc, "full_key", None) or "a mandatory key"
    hint = (": name your factory, e.g. workload._target_=mybench.blocks:make_block"
            if key.endswith("_target_") else f": set {key}=...")
    return ConfigError(f"{key} is missing{hint}")


def task(cfg: DictConfig) -> dict[str, Any] | None:
    """The Hydra task of one grid point: run its job, leave the artifacts in its folder and
    return its record (the sweeper reads it to decide on more repeats)."""
    from hydra.core.hydra_config import HydraConfig

    from experiments.launch import run_task

    try:
        config = job_config(cfg)
    except ConfigError as exc:
        refuse(str(exc))
    hydra_cfg = HydraConfig.get()
    index, total = 1, 1
    if hydra_cfg.mode.name == "MULTIRUN":
        index, total = hydra_cfg.job.num + 1, planned_jobs(Path(hydra_cfg.sweep.dir))
    return run_task(config, Path(hydra_cfg.runtime.output_dir), index, total, skip=skip_reason(config))


def planned_jobs(sweep_dir: Path) -> int | None:
    try:
        return int(json.loads((sweep_dir / PLAN_FILE).read_text(encoding="utf-8"))["jobs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def refuse(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_BAD_INPUT)


@functools.lru_cache(maxsize=1)
def cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def skip_reason(config: JobConfig) -> str | None:
    """Why this machine leaves out a grid point with run.unavailable=skip (None: it runs it)."""
    if config.run.unavailable != "skip":
        return None
    needs = seam.needs_cuda(config.workload.target, config.workload.settings)
    if needs is None:
        return None
    if config.device == "cpu":
        return needs.left_out("the job asks for device=cpu")
    return None if cuda_visible() else needs.left_out("torch sees no CUDA device here")


def check_configs(configs: list[JobConfig], jobs: list[int] | None = None) -> None:
    """Checks that need the factories or the machine, once per distinct workload: the factory
    imports, is callable and takes the settings (experiments.seam.check); settings that run only
    on CUDA (attention's efficient and cudnn backends) need a CUDA device torch can see, and
    device=cuda too. With run.unavailable=skip such grid points are left out (said once, here)
    instead of refused. `jobs`: how many jobs of the grid each config stands for (1 each)."""
    counts = {id(c): n for c, n in zip(configs, jobs or [1] * len(configs))}
    skipped = [c for c in configs if skip_reason(c)]
    if skipped:
        left = sum(counts[id(c)] for c in skipped)
        values = sorted({seam.needs_cuda(c.workload.target, c.workload.settings).setting for c in skipped})
        print(f"left out on this machine: {left} job{'s' if left != 1 else ''} with "
              f"{', '.join(values)} (CUDA only; "
              f"{'device=cpu' if all(c.device == 'cpu' for c in skipped) else 'torch sees no CUDA device'}); "
              "they are recorded as skipped", flush=True)
        left_out = {id(c) for c in skipped}
        configs = [c for c in configs if id(c) not in left_out]
    cuda_only: list[seam.CudaOnly] = []
    seen: set[str] = set()
    for c in configs:
        key = json.dumps([c.workload.target, c.workload.settings, c.device], sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            seam.check(c.workload.target, c.workload.settings)
            needs = seam.needs_cuda(c.workload.target, c.workload.settings)
        except seam.WorkloadError as exc:
            refuse(str(exc))
        except Exception as exc:  # the factory's own hook failed: name it
            refuse(f"workload._target_={c.workload.target!r}: checking its settings failed "
                   f"({type(exc).__name__}: {exc})")
        if needs and c.device == "cpu":
            refuse(needs.refusal("with device=cpu"))
        if needs:
            cuda_only.append(needs)
    check_backends(configs)
    cuda_devices = any(c.device == "cuda" for c in configs)
    if not (cuda_devices or cuda_only):
        return
    if cuda_visible():
        return
    if cuda_devices:
        from experiments.job import cuda_unavailable_message

        refuse(cuda_unavailable_message())
    import torch

    refuse(cuda_only[0].refusal("here", f" and torch {torch.__version__} sees no CUDA device"))


SWEEP_SETTINGS = tuple(f"run.{key}" for key in SWEEP_ONLY)  # one value for the whole sweep
def check_backends(configs: list[JobConfig]) -> None:
    """A compile backend other than Inductor is checked against torch.compiler.list_backends()
    before any job (that imports Dynamo: a second or two, paid only when another is named)."""
    named = sorted({c.compiler.backend for c in configs if c.compile and c.compiler.backend != "inductor"})
    if not named:
        return
    import torch

    known = torch.compiler.list_backends(exclude_tags=())
    for backend in named:
        if backend not in known:
            refuse(f"compiler.backend={backend!r} is not allowed: choose one of {', '.join(sorted(known))}")


GRID_SWEEPER = "hydra_plugins.profsweep_grid.grid_sweeper.GridSweeper"
# Swept keys whose values decide what check_configs checks (the factory and its settings, the
# device, what is left out) or what a job writes: checked in every combination, without composing.
CHECKED_TOGETHER = ("device", "run.unavailable", "workload.", "profiler.", "compiler.backend", "compile")


class Planned:
    """A job configuration the preflight checked and how many jobs of the grid it stands for."""

    def __init__(self, config: JobConfig, jobs: int):
        self.config, self.jobs = config, jobs


def sweep_grid(cfg: DictConfig) -> list[Axis] | None:
    """The grid's axes as the grid sweeper expands them; None for other sweepers (optuna, ...)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    if cfg.hydra.sweeper.get("_target_") != GRID_SWEEPER:
        return None
    params = cfg.hydra.sweeper.get("params") or {}
    task_overrides = list(OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False))
    try:  # with the config loader, as the sweeper parses them (glob() over a config group needs it)
        return grid.axes(grid.arguments(params, task_overrides), GlobalHydra.instance().config_loader())
    except HydraException as exc:
        refuse(str(exc))


def composed_by_hydra(axis: Axis, base: DictConfig) -> bool:
    """Whether a swept key's values need Hydra's composition to check (a config group, an added
    or deleted key, a package, hydra's own settings, a list or dict) or are plain values set
    into a composed job (size, dtype, compile, workload.hidden, ...)."""
    o = axis.override
    if o.is_add() or o.is_delete() or o.is_force_add() or "/" in axis.key or "@" in axis.key:
        return True
    if axis.key == "hydra" or axis.key.startswith("hydra."):
        return True
    node = OmegaConf.select(base, axis.key, throw_on_missing=False, default=None)
    if node is None and OmegaConf.select(base, axis.key, default="absent") == "absent":
        return True
    return OmegaConf.is_config(node) or any(isinstance(v, (dict, list)) for v in axis.values)


def preflight(master: DictConfig, axes: list[Axis], compose: Any) -> list[Planned]:
    """Check every job of the grid without composing each: Hydra composes one job per combination
    of the swept keys that need it (config groups, presets: usually a handful), and every value of
    each other swept key is set once into those, then typed and validated (job_config), as Hydra
    would set it. `compose(master, overrides)` is the config loader's load_sweep_config."""
    first = [axis.strings[0] for axis in axes]
    base = _compose(compose, master, first)
    swept = [i for i, axis in enumerate(axes) if axis.swept]
    structural = [i for i in swept if composed_by_hydra(axes[i], base)]
    leaves = [i for i in swept if i not in structural]
    together = [i for i in leaves if axes[i].key.startswith(CHECKED_TOGETHER)]
    alone = [i for i in leaves if i not in together]
    jobs_each = 1
    for i in alone:
        jobs_each *= len(axes[i].strings)
    planned: list[Planned] = []
    for combination in itertools.product(*(range(len(axes[i].strings)) for i in structural)):
        job = list(first)
        for i, k in zip(structural, combination):
            job[i] = axes[i].strings[k]
        composed = base if not any(combination) else _compose(compose, master, job)
        with read_write(composed):
            plain = plain_config(composed) if alone else None
            for i in alone:  # each value once, typed by the schema, checked into the plain config
                for k in _distinct(axes[i].values):
                    _set(composed, axes[i], k, job, plain)
                _set(composed, axes[i], 0, job)
            for picks in itertools.product(*(_distinct(axes[i].values) for i in together)):
                for i, k in zip(together, picks):
                    _set(composed, axes[i], k, job)
                planned.append(Planned(_job_config(composed, _picked(job, axes, together, picks)), jobs_each))
    return planned


def _distinct(values: tuple[Any, ...]) -> list[int]:
    """The index of each distinct value's first occurrence (size=32,32 is checked once)."""
    seen: dict[str, int] = {}
    for k, v in enumerate(values):
        seen.setdefault(repr(v), k)
    return list(seen.values())


def _compose(compose: Any, master: DictConfig, job: list[str]) -> DictConfig:
    from hydra.errors import HydraException

    try:
        composed = compose(master, list(job))
        _job_config(composed, job)
        return composed
    except (MissingMandatoryValue, InterpolationToMissingValueError) as exc:
        refuse(str(missing_value(exc)))
    except HydraException as exc:
        cause = f"\n{exc.__cause__}" if exc.__cause__ else ""  # Hydra's names the key
        said = refusals.in_our_words(f"{exc}{cause}").removeprefix("error: ")
        refuse(f"{said.strip()} (in the job {' '.join(job)})")


def _set(composed: DictConfig, axis: Axis, k: int, job: list[str], plain: dict[str, Any] | None = None) -> None:
    """Set the k-th value of a swept key into a composed job as Hydra's composition sets an
    override (OmegaConf.update, typed by the schema), then check the job. With `plain` (the
    composed job as plain data, for a key nothing else interpolates), only the new value is put
    into a copy of it: a 100,000-value axis is checked in seconds, not by converting the whole
    config 100,000 times."""
    try:
        OmegaConf.update(composed, axis.key, axis.values[k], merge=True)
    except OmegaConfBaseException as exc:
        said = refusals.in_our_words(f"Error merging override {axis.strings[k]}\n{exc}").removeprefix("error: ")
        refuse(f"{said.strip()} (in the job {' '.join(_with(job, axis, k))})")
    if not k:
        return
    if plain is None:
        _job_config(composed, _with(job, axis, k))
        return
    data = dict(plain)
    node, *path = axis.key.split(".")
    if path:
        outer = data
        for part in [node, *path[:-1]]:
            outer[part] = dict(outer.get(part) or {})
            outer = outer[part]
        outer[path[-1]] = OmegaConf.select(composed, axis.key)
    else:
        data[node] = OmegaConf.select(composed, axis.key)
    try:
        config_from_dict(data)
    except ConfigError as exc:
        refuse(f"{exc} (in the job {' '.join(_with(job, axis, k))})")


def _picked(job: list[str], axes: list[Axis], at: list[int], picks: Any) -> list[str]:
    for i, k in zip(at, picks):
        job = _with(job, axes[i], k)
    return job


def _with(job: list[str], axis: Axis, k: int) -> list[str]:
    """The job with the k-th value of one swept key."""
    prefix = f"{axis.key}="
    return [axis.strings[k] if s.startswith(prefix) else s for s in job]


def _job_config(composed: DictConfig, job: list[str]) -> JobConfig:
    try:
        return job_config(composed)
    except ConfigError as exc:
        refuse(f"{exc} (in the job {' '.join(job)})")


# What a job writes, measured with du -sk on job folders of size=64 jobs on the CPU (torch 2.x):
#                         profiler.active=3   active=20
#   matmul_add eager            44 kB           80 kB
#   matmul_add compiled         48 kB          100 kB
#   mlp eager                   60 kB          176 kB
#   mlp compiled                52 kB          124 kB
#   mlp eager, profiler=detailed   176 kB          892 kB   (record_shapes, with_stack, profile_memory)
#   the same, profiler.gzip=true     44 kB           88 kB   (traces: 143 kB -> 11 kB, 880 kB -> 54 kB)
# So about 40 kB a job (.hydra, metrics, table, logs) and up to 7 kB a profiled step; with_stack
# and record_shapes make a step about 6 times bigger (42 kB); gzip makes the trace 12-16 times
# smaller. A CUDA trace adds a launch and a kernel event per op (not measured here: counted as
# twice the events).
JOB_FIXED_BYTES = 40_000
STEP_BYTES = 7_000
STACK_FACTOR = 6
GZIP_FACTOR = 10  # rounded down: a rough estimate that errs on the large side


def estimated_job_bytes(config: JobConfig, cuda: bool) -> int:
    p = config.profiler
    step = STEP_BYTES * (2 if cuda else 1) * (STACK_FACTOR if p.with_stack or p.record_shapes else 1)
    return int(JOB_FIXED_BYTES + p.active * p.repeat * step / (GZIP_FACTOR if p.gzip else 1))


def warn_if_short_of_space(folder: Path, key: str, planned: list[Planned]) -> None:
    """A warning (not a refusal: the estimate is rough) when the sweep folder's disk has less
    free space than the jobs may write."""
    jobs = sum(p.jobs for p in planned)
    if not jobs:
        return
    cuda = any(p.config.device == "cuda" for p in planned) or (
        any(p.config.device == "auto" for p in planned) and cuda_visible())
    total = sum(p.jobs * estimated_job_bytes(p.config, cuda and p.config.device != "cpu") for p in planned)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return
    if free >= total:
        return
    gzip = "" if all(p.config.profiler.gzip for p in planned) else (
        "; profiler.gzip=true writes traces several times smaller")
    print(f"warning: {key}={folder} has {_bytes(free)} free; this sweep of {jobs:,} "
          f"job{'s' if jobs != 1 else ''} may write about {_bytes(total)} "
          f"(about {_bytes(total // jobs)} a job{gzip})", file=sys.stderr, flush=True)


def _bytes(n: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "bytes" or n >= 10 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"

def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def check_expectations(config: DictConfig) -> list[str]:
    """The sweep's expectations (`expect`), refused before any job when one cannot be checked."""
    from analysis.expect import ExpectationError, parse_all, unknown_operators

    texts = OmegaConf.select(config, "expect", default=None) or []
    texts = [texts] if isinstance(texts, str) else [str(t) for t in texts]
    try:
        unknown = unknown_operators(parse_all(texts))
    except ExpectationError as exc:
        refuse(str(exc))
    if unknown:
        refuse(f"expect: torch has no operator {unknown[0]!r}: name an operator as the profiler "
               "table does, e.g. aten::copy_")
    return texts


def _start(folder: Path, key: str, expect: list[str]) -> None:
    """SIGTERM stops the sweep like Ctrl-C (the running job is recorded, the analysis still runs);
    environment.json says where and how the sweep ran, expect.json what was expected of it."""
    from analysis.expect import EXPECT_FILE

    if folder.exists() and not folder.is_dir():
        refuse(f"{key}={folder} is a file, not a folder: choose another {key}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        refuse(f"{key}={folder}: cannot create this folder ({exc.strerror or exc}): "
               f"choose a {key} you can write to")
    _claim(folder, key)
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    signal.signal(signal.SIGHUP, _terminate_as_interrupt)  # the terminal closed
    try:
        records.write_json(folder / ENVIRONMENT_FILE, records.environment_file(sys.argv))
    except OSError as exc:
        refuse(f"{key}={folder}: cannot write into this folder ({exc.strerror or exc}): "
               f"choose a {key} you can write to")
    if expect:
        records.write_json(folder / EXPECT_FILE, {"expect": expect})


LOCK_FILE = SWEEP_LOCK_FILE
_claimed: list[Any] = []  # the open lock files of this process's sweep folders


def _claim(folder: Path, key: str) -> None:
    """Hold the folder for the life of this process (a flock the OS drops when it dies, however
    it dies), so that two sweeps never write into one folder at once; the lock file names the
    holder's pid for the refusal."""
    try:
        handle = open(folder / LOCK_FILE, "a+", encoding="ascii")
    except OSError as exc:
        refuse(f"{key}={folder}: cannot write into this folder ({exc.strerror or exc}): "
               f"choose a {key} you can write to")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        refuse(f"{key}={folder} is in use by another sweep that is still running (pid {holder}): "
               f"wait for it to end or stop it, or choose another {key}")
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _claimed.append(handle)


class SweepCallback(Callback):
    """Validates every job of a run or sweep up front and prints the final tally."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_configs([job_config(config)])
        except ConfigError as exc:
            refuse(str(exc))
        expect = check_expectations(config)
        _start(Path(str(config.hydra.run.dir)), "hydra.run.dir", expect)
        refusals.release()  # the input is accepted: stderr passes from now on

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.global_hydra import GlobalHydra

        axes = sweep_grid(config)
        for axis in axes or []:
            if axis.swept and axis.key in SWEEP_SETTINGS:
                refuse(f"{axis.key}={','.join(str(v) for v in axis.values)} is not allowed: {axis.key} is one "
                       "setting of the whole sweep, not a grid key: give one value")
        compose = GlobalHydra.instance().config_loader().load_sweep_config
        planned = preflight(config, axes if axes is not None else [], compose)
        check_configs([p.config for p in planned], [p.jobs for p in planned])
        expect = check_expectations(config)
        if planned:
            warm_start(planned[0].config)  # the fork server imports torch while the sweep starts
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if axes is not None:
            warn_if_short_of_space(sweep_dir, "hydra.sweep.dir", planned)
        _start(sweep_dir, "hydra.sweep.dir", expect)
        if axes is not None:
            points = grid.size(axes)
            repeats = config.run.repeats
            total = points * grid.first_rounds(repeats)
            records.write_json(  # the grid as its axes: job i is the i-th of their product, the last axis fastest
                sweep_dir / PLAN_FILE,
                {"jobs": total, "grid_points": points, "repeats": repeats,
                 "axes": [{"key": axis.key, "overrides": list(axis.strings)} for axis in axes],
                 "command": sys.argv, "created_at": records.now_iso()},
            )
            each = ("" if repeats == 1 else f" ({points} grid points × {repeats} repeats)" if repeats != "auto"
                    else f" ({points} grid points × {grid.AUTO_ROUNDS} rounds, then more where the interval "
                         f"is wider than ±{config.run.precision * 100:g}%, up to {config.run.max_repeats})")
            print(f"sweep of {total} jobs{each} -> {sweep_dir}", flush=True)
        refusals.release()  # the input is accepted: stderr passes from now on
        Progress.reset()

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        job_dir = Path(str(config.hydra.runtime.output_dir))
        tally([job_dir], job_dir, expected=1)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        job_dirs = sorted(p.parent for p in sweep_dir.glob(f"*/{records.METRICS_FILE}"))
        tally(job_dirs, sweep_dir, planned_jobs(sweep_dir))


def tally(job_dirs: list[Path], folder: Path, expected: int | None) -> None:
    """Print counts and failed jobs from the metrics.json files; exit 1 when any job failed."""
    failed: list[tuple[str, str]] = []
    ok = skipped = 0
    for job_dir in job_dirs:
        try:
            record = json.loads((job_dir / records.METRICS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            failed.append((job_dir.name, f"unreadable {records.METRICS_FILE}: {exc}"))
            continue
        if record.get("status") == "ok":
            ok += 1
        elif record.get("status") == "skipped":
            skipped += 1
        else:
            failed.append((job_dir.name, str(record.get("error"))))
    missing = max(0, (expected or 0) - len(job_dirs))
    counts = (f"{ok} ok, {len(failed)} failed" + (f", {skipped} skipped" if skipped else "")
              + (f", {missing} missing" if missing else "")
              + (f"; {Progress.resumed} of them already ok, not run again (resume)" if Progress.resumed else ""))
    print(f"done: {len(job_dirs)} job{'s' if len(job_dirs) != 1 else ''} ({counts}) in {folder}", flush=True)
    for name, error in failed:
        print(f"  failed: {name}: {error}", flush=True)
    from profsweep import outcome

    for why in outcome.analysis_failed:
        print(f"not analysed: {why}", flush=True)
    if Interrupted.disk_error:
        print(f"stopped: {Interrupted.disk_error}\n  free some space in {folder}'s disk, then rerun the "
              f"same command into the same folder to finish (hydra.sweep.dir={folder}); jobs already ok "
              "are skipped", flush=True)
        raise SystemExit(EXIT_FAILED_JOBS)
    if Interrupted.seen or outcome.interrupted:
        print("interrupted: rerun the same command into the same folder to finish "
              f"(hydra.sweep.dir={folder}); jobs already ok are skipped", flush=True)
        raise SystemExit(EXIT_INTERRUPTED)
    if failed or missing or outcome.analysis_failed:
        raise SystemExit(EXIT_FAILED_JOBS)
