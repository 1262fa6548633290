"""The preflight: every job of a run or sweep checked before any starts, with a refusal that names
the key, the value and what is allowed.

The grid is checked as the grid sweeper expands it (hydra_plugins.profsweep_grid.grid) without
composing each job: Hydra composes one job per combination of the swept keys that need it, every
other value is set into those and validated (`preflight`). Checks that need the factories or the
machine run once per distinct workload (`check_configs`); the expectations are parsed
(`check_expectations`).

Hydra turns an exception raised in a callback into a warning, so a refusal here is a
SystemExit with the message already printed (experiments.refusals.refuse).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue, OmegaConfBaseException

from experiments import refusals, seam
from experiments.config import SWEEP_ONLY, ConfigError, JobConfig, WorkloadConfig, config_from_dict
from experiments.refusals import refuse
from hydra_plugins.profsweep_grid import grid
from hydra_plugins.profsweep_grid.grid import Axis
from profsweep.contract import amount


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
        workload = cfg.get("workload") if isinstance(cfg.get("workload"), DictConfig) else None
        if workload is not None and "target" in workload and "_target_" in str(exc):  # the factory's key misspelt
            given = OmegaConf.to_container(workload, resolve=False).get("target")
            raise ConfigError(f"workload.target={given} is not allowed: the factory is workload._target_ "
                              f"(workload._target_={given})") from None
        raise missing_value(exc) from None
    except OmegaConfBaseException as exc:  # an interpolation that cannot be resolved: ${oops}
        raise unresolved(cfg, exc) from None


def unresolved(cfg: DictConfig, exc: OmegaConfBaseException) -> ConfigError:
    """A value OmegaConf cannot resolve (`size=${oops}`), in words: the key, the value as given,
    and what OmegaConf could not find."""
    key = str(getattr(exc, "full_key", None) or "a key")
    try:
        given = OmegaConf.to_container(cfg, resolve=False)
        for part in key.split("."):
            given = given[int(part)] if isinstance(given, list) else given[part]
    except (KeyError, IndexError, ValueError, TypeError):
        given = "?"
    said = str(getattr(exc, "msg", None) or exc).strip().splitlines()[0]
    return ConfigError(f"{key}={given} is not allowed: OmegaConf cannot resolve it ({said}); an interpolation "
                       "${...} names another key of the configuration (write \\${...} for the text itself)")


def missing_value(exc: Exception) -> ConfigError:
    """A `???` value left unset (workload=custom without workload._target_), in words."""
    found = re.search(r"Missing mandatory value: ?([\w.]+)", str(exc))
    key = found.group(1) if found else getattr(exc, "full_key", None) or "a mandatory key"
    hint = (": name your factory, e.g. workload._target_=mybench.blocks:make_block"
            if key.endswith("_target_") else f": set {key}=...")
    return ConfigError(f"{key} is missing{hint}")


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
        print(f"left out on this machine: {amount(left, 'grid point')} with "
              f"{', '.join(values)} (CUDA only; "
              f"{'device=cpu' if all(c.device == 'cpu' for c in skipped) else 'torch sees no CUDA device'}); "
              "they are recorded as skipped", flush=True)
        left_out = {id(c) for c in skipped}
        configs = [c for c in configs if id(c) not in left_out]
    cuda_only: list[seam.CudaOnly] = []
    seen: set[str] = set()
    warned: set[str] = set()  # factories whose hidden settings were said
    for c in configs:
        key = json.dumps([c.workload.target, c.workload.settings, c.device], sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            seam.check(c.workload.target, c.workload.settings)
            for warning in seam.shadowed(c.workload.target) if c.workload.target not in warned else []:
                print(f"warning: {warning}", flush=True)
            warned.add(c.workload.target)
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
    named = sorted({c.compiler.backend for c in configs if c.compiler.backend != "inductor"})  # eager jobs too, as
    # compiler.mode is checked: a setting that cannot run is refused wherever it is given
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
                for k in _checked(axes[i]):
                    _set(composed, axes[i], k, job, plain)
                _set(composed, axes[i], 0, job)
            for picks in itertools.product(*(_distinct(axes[i].values) for i in together)):
                for i, k in zip(together, picks):
                    _set(composed, axes[i], k, job)
                planned.append(Planned(_job_config(composed, _picked(job, axes, together, picks)), jobs_each))
    return planned


def _checked(axis: Axis) -> list[int]:
    """The values of a swept key the preflight sets and checks: each distinct one; of a range()
    (numbers of one kind, evenly apart) its ends and its second, which stand for every value in
    between: size=range(1,3000000) set three million values one by one, minutes before a word."""
    from hydra.core.override_parser.types import RangeSweep

    n = len(axis.values)
    if n > 3 and isinstance(axis.override.value(), RangeSweep):
        return [0, 1, n - 1]
    return _distinct(axis.values)


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
    try:
        value = OmegaConf.select(composed, axis.key)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
    except OmegaConfBaseException as exc:
        refuse(f"{unresolved(composed, exc)} (in the job {' '.join(_with(job, axis, k))})")
    data = dict(plain)
    node, *path = axis.key.split(".")
    if path:
        outer = data
        for part in [node, *path[:-1]]:
            outer[part] = dict(outer.get(part) or {})
            outer = outer[part]
        outer[path[-1]] = value
    else:
        data[node] = value
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


# The keys that are true or false. OmegaConf takes 2, -5, "yes" and "on" for true where the schema
# says bool; a user who wrote warmup=2 meant something else (a count of warm-up calls).
FLAG_KEYS = ("compile", "warmup", "train", "profiler.record_shapes", "profiler.with_stack",
             "profiler.profile_memory", "profiler.gzip", "compiler.dynamic", "compiler.provenance")


def refuse_loose_flags(axes: list[Axis] | None) -> None:
    """A flag given as anything but true or false on the command line is refused by name."""
    for axis in axes or []:
        key = axis.key.lstrip("+")
        if key not in FLAG_KEYS:
            continue
        for value in axis.values:
            if not isinstance(value, bool) and not str(value).startswith("${"):  # an interpolation: typed once resolved
                hint = " (warm-up calls: run.warmup_iters)" if key == "warmup" else ""
                refuse(f"{key}={value} is not allowed: {key} must be true or false{hint}")


def warn_oversubscribed(configs: list[JobConfig]) -> None:
    """A warning (run.threads is the user's to choose) where a count exceeds the CPUs this
    process may run on: the threads then take turns on them, and the steps measure the turns."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    over = sorted({c.run.threads for c in configs if isinstance(c.run.threads, int) and cpus and c.run.threads > cpus})
    if over:
        print(f"warning: run.threads={over[-1]} is more than the {cpus} CPUs this machine lets the jobs use: their "
              "threads take turns on them, and the steps measure the turns", flush=True)


def warn_unused_with_one_process(configs: list[JobConfig]) -> None:
    """A warning where run.isolation=none leaves a setting the user changed without effect: no
    job process to kill at run.job_timeout_s (a job that hangs holds the sweep), none to start
    fresh (run.start)."""
    from experiments.config import RunConfig

    default = RunConfig()
    shared = [c.run for c in configs if c.run.isolation == "none"]
    if any(r.job_timeout_s not in (default.job_timeout_s, 0) for r in shared):  # 0: no limit, as run=fast says
        print("warning: run.job_timeout_s does not apply with run.isolation=none: the jobs run in this process, "
              "which nothing stops from outside (a job that hangs holds the sweep until you stop it)", flush=True)
    if any(r.start != default.start for r in shared):
        print("warning: run.start does not apply with run.isolation=none: no job gets a process of its own",
              flush=True)


def _command_line(cfg: DictConfig) -> list[Any]:
    """The command line's overrides (hydra.overrides.task) as Hydra's parser reads them; none
    where it cannot (Hydra parsed them already: what it took is checked elsewhere)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(OmegaConf.to_container(cfg.hydra.overrides.task,
                                                                                    resolve=False)))
    except HydraException:
        return []


def refuse_repeated_keys(cfg: DictConfig) -> None:
    """A key given twice on the command line (size=16 size=32) would leave one value out without
    a word (Hydra keeps the last): refused, naming both. A delete (`~key`) before `+key=...` is
    how Hydra replaces a key, and stays allowed."""
    overrides = _command_line(cfg)
    seen: dict[str, str] = {}
    for override in overrides:
        if override.is_delete():
            continue
        key = override.get_key_element().lstrip("+~")
        said = override.input_line or key
        if key in seen:
            refuse(f"{key} is given twice on the command line ({seen[key]} and {said}): give it once "
                   f"(both values as a sweep: -m {key}=A,B)")
        seen[key] = said


def _needed_keys() -> dict[str, str]:
    """Every key a job's configuration must have (JobConfig's fields, its groups' fields under
    their names), each with where it is set; a workload's own settings and `expect` may go."""
    import dataclasses

    def walk(cls: Any, prefix: str) -> dict[str, str]:
        keys: dict[str, str] = {}
        for f in dataclasses.fields(cls):
            if f.name == "expect" or (prefix == "workload." and f.name == "settings"):
                continue
            key = prefix + f.name
            keys[key] = key
            sub = f.default_factory if f.default_factory is not dataclasses.MISSING else f.type
            if dataclasses.is_dataclass(sub):
                keys.update(walk(sub, key + "."))
        return keys

    keys = {**walk(JobConfig, ""), **walk(WorkloadConfig, "workload.")}
    keys.pop("workload.target")  # the factory's key in the configuration is workload._target_
    return {**keys, "workload._target_": "workload._target_"}


def refuse_deleted_keys(cfg: DictConfig) -> None:
    """A key every job needs, deleted on the command line (`~size`) and not given again after
    (`~size +size=64` is how Hydra replaces one): refused, naming it and what to give instead,
    before Hydra fails on it later in words about its own settings."""
    overrides = _command_line(cfg)
    needed = _needed_keys()
    deleted: dict[str, str] = {}
    for override in overrides:
        key = override.get_key_element().lstrip("+~")
        if override.is_delete():
            deleted[key] = override.input_line or f"~{key}"
        else:
            deleted.pop(key, None)
    for key, said in deleted.items():
        if key in needed:
            refuse(f"{said} is not allowed: every job needs {key}; give it a value instead ({key}=VALUE), "
                   f"or leave it out for its default")


def refuse_repeated_values(axes: list[Axis] | None) -> None:
    """A value given twice in one swept key (size=16,16) would be two grid points of one
    configuration, each job `repeat` 1 of them: refused, with the setting that repeats. A swept key
    of no value (size=range(5,5)) would be a sweep of nothing: refused too."""
    for axis in axes or []:
        if not axis.strings:
            refuse(f"{axis.override.input_line or axis.key} gives {axis.key} no value: a sweep of no grid point; "
                   f"give at least one value (e.g. {axis.key}=64,1024 or range(64,1025,64))")
        seen: set[str] = set()
        for string in axis.strings:
            if string in seen:
                value = string.partition("=")[2]
                refuse(f"{axis.key}={','.join(s.partition('=')[2] for s in axis.strings)} is not allowed: {value} "
                       f"is given twice; to measure a grid point in more processes, give run.repeats")
            seen.add(string)


def command_line_axes(cfg: DictConfig) -> list[Axis]:
    """A single run's command-line overrides, parsed as the grid sweeper parses a sweep's."""
    from hydra.errors import HydraException

    try:
        return grid.axes(list(OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)))
    except HydraException:
        return []  # Hydra parsed them already; what it took is checked by the config's own types


def refuse_swept_sweep_settings(axes: list[Axis] | None) -> None:
    """A sweep-wide setting (run.repeats, run.precision, ...) has one value: sweeping it is refused;
    run.repeat, which the sweep sets for each job, is refused on the command line."""
    for axis in axes or []:
        if axis.key.lstrip("+~") == "run.repeat":
            refuse(f"{axis.strings[0]} is not allowed: run.repeat is which of a grid point's processes a job is, "
                   "set by the sweep: give run.repeats=N for N processes per grid point")
        if axis.swept and axis.key in SWEEP_SETTINGS:
            refuse(f"{axis.key}={','.join(str(v) for v in axis.values)} is not allowed: {axis.key} is one "
                   "setting of the whole sweep, not a grid key: give one value")


def check_expectations(config: DictConfig) -> list[str]:
    """The sweep's expectations (`expect`), refused before any job when one cannot be checked."""
    from profsweep.expectations import ExpectationError, parse_all, unknown_operators

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
