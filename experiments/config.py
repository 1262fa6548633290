"""The typed configuration of one job: dataclasses are the schema, YAML files only fill values.

`register_configs()` puts the schema into Hydra's ConfigStore; `config_from_dict` and
`config_to_dict` move a job's configuration across the process boundary as plain JSON, so the
child process that profiles a job never needs Hydra.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, List, Mapping, NamedTuple

from experiments import allocator
from experiments.seam import RESERVED, short_name, shown_name
from profsweep.ceilings import MODES
from profsweep.contract import Job


class ConfigError(ValueError):
    """A configuration value that is not allowed; the message names key, value and what is allowed."""


DTYPES = ("bf16", "fp16", "fp32")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
ISOLATIONS = ("process", "none")
STARTS = ("fork", "fresh")
UNAVAILABLE = ("refuse", "skip")  # a grid point this machine cannot run: refuse the sweep, or skip it
COMPILE_CACHES = ("fresh", "shared")
CEILINGS = MODES  # run.ceilings (profsweep.ceilings)
ALLOCATORS = (allocator.STEADY, allocator.FIXED, allocator.SYSTEM)  # run.allocator
AUTO = "auto"
# Settings of the sweep as a whole, not of what a job measures: they never change a job's
# config_hash, so a rerun with more repeats adds only the missing ones.
SWEEP_ONLY = ("repeat", "repeats", "precision", "max_repeats", "variant_settings", "ceilings")


class Optimizer(NamedTuple):
    """A training step's optimizer: its class in torch.optim, and how many tensors of state it
    keeps per parameter (the cost counts them: read and written every step)."""

    torch_class: str
    state_slots: int


# The optimizers a training step may use, one declaration each: the config check, the cost and
# the step (experiments.steps) read it. Each with torch's defaults but lr: AdamW, Adam, NAdam,
# RAdam and Adamax keep two moments a parameter, Adadelta two running averages, RMSprop and
# Adagrad one, plain SGD (no momentum) none (tests/test_steps.py counts them in torch's state).
OPTIMIZERS = {
    "adamw": Optimizer("AdamW", state_slots=2),
    "adam": Optimizer("Adam", state_slots=2),
    "nadam": Optimizer("NAdam", state_slots=2),
    "radam": Optimizer("RAdam", state_slots=2),
    "adamax": Optimizer("Adamax", state_slots=2),
    "adadelta": Optimizer("Adadelta", state_slots=2),
    "rmsprop": Optimizer("RMSprop", state_slots=1),
    "adagrad": Optimizer("Adagrad", state_slots=1),
    "sgd": Optimizer("SGD", state_slots=0),
}


def _require_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed: choose one of {', '.join(allowed)}")


def _require_positive_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key}={value!r} is not allowed: {key} must be an integer > 0")


def _require_nonnegative_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key}={value!r} is not allowed: {key} must be an integer >= 0")


def _require_bool(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} is not allowed: {key} must be true or false")


# --- the workload: a factory named by import path, and its own settings ------------------------

BUILTIN_WORKLOADS = ("matmul_add", "bmm", "linear", "mlp", "attention")  # conf/workload/, experiments/workloads.py
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # it names job folders and series
SETTING_TYPES = (bool, int, float, str, type(None))


@dataclass
class WorkloadConfig:
    """What a grid point profiles: `target`, the factory's import path (`_target_` in the YAML
    and on the command line), `name` (folder names, series, the step's record_function) and the
    workload's own settings, free keys passed to the factory as keyword arguments.

    Whether the factory exists and takes these settings is checked by experiments.seam before
    any job runs (it imports the factory's module); here only their form is checked."""

    target: str = "experiments.workloads.matmul_add"
    name: str = "matmul_add"
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        module, _, function = (self.target.rpartition(":") if ":" in self.target else self.target.rpartition(".")) \
            if isinstance(self.target, str) else ("", "", "")
        if not module.strip() or not function.strip():  # (before the name, which a custom one takes from it)
            raise ConfigError(f"workload._target_={self.target!r} is not allowed: name a factory as "
                              "package.module:function")
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise ConfigError(f"workload.name={self.name!r} is not allowed: use letters, digits, "
                              "'_', '.' or '-' (it names the job folders)")
        if self.name in BUILTIN_WORKLOADS and self.target != f"experiments.workloads.{self.name}":
            raise ConfigError(
                f"workload._target_={self.target!r} is not allowed under the name {self.name}, a built-in workload's: "
                f"the jobs would run your factory under the name, folders and claims of the built-in {self.name}; "
                f"give workload=custom (the jobs are then named after the factory), e.g. workload=custom "
                f"workload._target_={self.target}, and no workload.name={self.name} (or another name, e.g. "
                f"workload.name=my_{self.name})")
        for key, value in self.settings.items():
            if key == "target":
                raise ConfigError("workload.target is not allowed: the factory is workload._target_")
            values = value if isinstance(value, list) else [value]
            if not key.isidentifier() or not all(isinstance(v, SETTING_TYPES) for v in values):
                raise ConfigError(f"workload.{key}={value!r} is not allowed: a workload setting is a "
                                  "keyword argument of the factory with a number, string, bool or list value")

    def as_node(self) -> dict[str, Any]:
        """The form of the YAML files and of job_config.json: `_target_`, `name`, the settings."""
        return {"_target_": self.target, "name": self.name, **self.settings}

    @classmethod
    def builtin(cls, name: str, **settings: Any) -> "WorkloadConfig":
        """One of the series' workloads (experiments/workloads.py) by its name."""
        return cls(target=f"experiments.workloads.{name}", name=name, settings=settings)

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> "WorkloadConfig":
        node = dict(node)
        target = node.pop("_target_", None)
        name = node.pop("name", None)
        if target is None and isinstance(name, str):  # a job_config.json from before the seam
            return cls.builtin(name, **node)
        if name is None and isinstance(target, str):
            name = short_name(target)
        return cls(target=target, name=name, settings=node)


# --- settings groups ---------------------------------------------------------------------------


@dataclass
class ProfilerConfig:
    """torch.profiler.schedule(wait, warmup, active, repeat) and what the profiler records."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    record_shapes: bool = False
    with_stack: bool = False
    profile_memory: bool = False
    row_limit: int = 15
    gzip: bool = False  # write the Chrome trace as .json.gz (Perfetto and the analysis read it)

    def __post_init__(self) -> None:
        for f in ("wait", "warmup"):
            _require_nonnegative_int(f"profiler.{f}", getattr(self, f))
        for f in ("active", "repeat", "row_limit"):
            _require_positive_int(f"profiler.{f}", getattr(self, f))
        for f in ("record_shapes", "with_stack", "profile_memory", "gzip"):
            _require_bool(f"profiler.{f}", getattr(self, f))

    @property
    def total_steps(self) -> int:
        return (self.wait + self.warmup + self.active) * self.repeat


@dataclass
class CompilerConfig:
    """Arguments of torch.compile, used when `compile=true`."""

    mode: str = "default"
    backend: str = "inductor"
    dynamic: bool = False
    provenance: bool = True  # Inductor's kernel-to-node provenance into provenance.json (experiments.provenance)

    def __post_init__(self) -> None:
        _require_choice("compiler.mode", self.mode, COMPILE_MODES)
        if not isinstance(self.backend, str) or not self.backend:
            raise ConfigError(f"compiler.backend={self.backend!r} is not allowed: name a backend")
        _require_bool("compiler.dynamic", self.dynamic)
        _require_bool("compiler.provenance", self.provenance)


# torch.set_num_threads(100000) ends the process (SIGSEGV, as its pool cannot start them); no machine
# this runs on has more cores than this (the check runs where the sweep starts, not where the job runs)
MAX_THREADS = 1024
# processes per grid point: a million (a typo's) planned 1,484 hours of jobs and started them
MAX_REPEATS = 1000


@dataclass
class RunConfig:
    """How each job is run: its own interpreter (honest cold starts) and its own Inductor cache;
    how many processes measure each grid point (repeats) and with how many threads."""

    isolation: str = "process"
    compile_cache: str = "fresh"
    warmup_iters: int = 3
    job_timeout_s: int = 3600  # an isolated job still running after this is killed; 0: no limit
    unavailable: str = "refuse"  # a grid point that needs CUDA on a machine without: refuse | skip
    start: str = "fork"  # an isolated job's process: fork (from a template that imported torch) | fresh
    # Every grid point is measured in this many job processes, round by round over the grid
    # (`auto`: two rounds, then more for the points whose interval is wider than `precision` or
    # whose compile against eager is undecided, up to `max_repeats`). Three: the fewest that give
    # verdicts on this project's 2-core machine
    # (docs/numbers.md).
    repeats: Any = 3
    precision: float = 0.025  # half the one rule's band (profsweep.decide): two such points that measure the same usually come out "same"
    max_repeats: int = 10
    repeat: int = 1  # which repeat a job is: set by the sweep
    threads: Any = AUTO  # torch's intra-op threads: auto (what torch chooses) or a count
    # glibc's allocator: thresholds held where a plain process's end up (steady), or higher (fixed),
    # so a step's buffers stay in the heap alike in every process (experiments.allocator), or the
    # system's (whether they do depends on the heap's layout).
    allocator: str = "steady"
    # This machine's matmul FLOP/s and memory bandwidth for the roofline (profsweep.ceilings):
    # measure (once per machine, then cached) | table (datasheet peaks, GPUs only) | off.
    ceilings: str = "measure"
    # The workload settings that name each job's variant in its folder and progress line,
    # space-separated: those the sweep sets (conf/config.yaml: `${variant_settings:}`).
    variant_settings: str = ""

    def __post_init__(self) -> None:
        if not (self.repeats == AUTO or (isinstance(self.repeats, int) and not isinstance(self.repeats, bool)
                                         and 1 <= self.repeats <= MAX_REPEATS)):
            raise ConfigError(f"run.repeats={self.repeats!r} is not allowed: give a count of processes "
                              f"per grid point from 1 to {MAX_REPEATS}, or auto")
        if not (self.threads == AUTO or (isinstance(self.threads, int) and not isinstance(self.threads, bool)
                                         and 1 <= self.threads <= MAX_THREADS)):
            raise ConfigError(f"run.threads={self.threads!r} is not allowed: give a thread count from 1 to "
                              f"{MAX_THREADS}, or auto")
        if isinstance(self.precision, bool) or not isinstance(self.precision, (int, float)) \
                or not 0 < self.precision < 1:
            raise ConfigError(f"run.precision={self.precision!r} is not allowed: give the interval's "
                              "half-width as a fraction of the value, between 0 and 1 (0.05: within 5%)")
        _require_positive_int("run.repeat", self.repeat)
        _require_positive_int("run.max_repeats", self.max_repeats)
        if not 2 <= self.max_repeats <= MAX_REPEATS:
            raise ConfigError(f"run.max_repeats={self.max_repeats!r} is not allowed: give from 2 (run.repeats=auto "
                              f"needs at least 2 repeats) to {MAX_REPEATS}")
        _require_choice("run.unavailable", self.unavailable, UNAVAILABLE)
        _require_choice("run.start", self.start, STARTS)
        _require_choice("run.isolation", self.isolation, ISOLATIONS)
        _require_choice("run.compile_cache", self.compile_cache, COMPILE_CACHES)
        _require_choice("run.ceilings", self.ceilings, CEILINGS)
        _require_choice("run.allocator", self.allocator, ALLOCATORS)
        _require_positive_int("run.warmup_iters", self.warmup_iters)
        _require_nonnegative_int("run.job_timeout_s", self.job_timeout_s)
        if not (isinstance(self.variant_settings, str)
                and all(key.isidentifier() for key in self.variant_settings.split())):
            raise ConfigError(f"run.variant_settings={self.variant_settings!r} is not allowed: name workload "
                              "settings, separated by spaces (e.g. 'hidden dim')")


@dataclass
class JobConfig:
    """One grid point: the user-facing keys plus the settings groups."""

    workload: Any = field(default_factory=WorkloadConfig)  # Any: Hydra's node is open (free keys)
    size: int = 64
    dtype: str = "bf16"
    compile: bool = False
    warmup: bool = False
    device: str = "auto"
    train: bool = False
    optimizer: str = "adamw"
    # What the person expects the traces to show (analysis/report/expect.py); checked by the analysis,
    # not part of what a job measures (nor of its config_hash).
    expect: List[str] = field(default_factory=list)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    compiler: CompilerConfig = field(default_factory=CompilerConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.workload, WorkloadConfig):
            raise ConfigError(f"workload={self.workload!r} is not allowed: choose a workload config group "
                              "(matmul_add, bmm, linear, mlp, attention, custom)")
        _require_positive_int("size", self.size)
        _require_choice("dtype", self.dtype, DTYPES)
        _require_choice("device", self.device, DEVICES)
        _require_bool("compile", self.compile)
        _require_bool("warmup", self.warmup)
        _require_bool("train", self.train)
        _require_choice("optimizer", self.optimizer, tuple(OPTIMIZERS))

    @property
    def phase(self) -> str:
        return "warm" if self.warmup else "cold"

    @property
    def mode(self) -> str:
        return "compile" if self.compile else "eager"

    @property
    def label(self) -> str:
        """The grid values in words, as the progress lines show them: the workload and the
        settings the sweep sets, whatever their values (`run.variant_settings`: `attention
        backend=flash size=512 bf16 warm eager`), the same settings for every job of a sweep."""
        named = [f"{key}={value}" for key, value in named_settings(self.workload.settings, self.run.variant_settings)]
        repeat = [f"repeat {self.run.repeat}"] if self.run.repeat > 1 else []
        shown = shown_name(self.workload.target, self.workload.name)
        point = {"variant": " ".join([shown, *named]), "size": self.size, "dtype": self.dtype,
                 "warmup": self.warmup, "compile": self.compile, "train": self.train, "optimizer": self.optimizer}
        return " ".join([Job(point).label(), *repeat])


# --- plain-data round trip (the child process reads this, not Hydra) --------------------------


def config_to_dict(config: JobConfig) -> dict[str, Any]:
    """A JSON-ready nested dict, the inverse of `config_from_dict`; the workload in its YAML form."""
    data = dataclasses.asdict(config)
    data["workload"] = config.workload.as_node()
    return data


def known_keys(key: str) -> str:
    """What to say of a key this configuration does not have (`sise`, `run.thread`): the nearest
    key of its group, and the group's keys."""
    import difflib

    groups = {"profiler": ProfilerConfig, "compiler": CompilerConfig, "run": RunConfig}
    where, _, _ = key.rpartition(".")
    if where == "workload":
        return "a workload's settings are its factory's keyword arguments, as conf/workload/<name>.yaml lists them"
    if where and where not in groups:
        return f"the groups are {', '.join(['workload', *groups])}"
    cls = groups.get(where, JobConfig)
    keys = [f"{where + '.' if where else ''}{f.name}" for f in dataclasses.fields(cls)
            if f.name not in ("workload", "profiler", "compiler", "run", "expect")]
    if not where:
        keys += ["expect", "workload", "workload.<its setting>", *(f"{g}.<key>" for g in groups)]
    near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    return (f"did you mean {near[0]}? " if near else "") + f"the keys: {', '.join(keys)}"


def config_from_dict(data: Mapping[str, Any]) -> JobConfig:
    """Rebuild and validate a JobConfig from `config_to_dict` output (or a resolved Hydra config)."""
    data = dict(data)
    workload = data.pop("workload", None)
    try:
        return JobConfig(
            workload=(WorkloadConfig() if workload is None
                      else WorkloadConfig.from_node(workload) if isinstance(workload, Mapping) else workload),
            profiler=ProfilerConfig(**data.pop("profiler", {})),
            compiler=CompilerConfig(**data.pop("compiler", {})),
            run=RunConfig(**data.pop("run", {})),
            **data,
        )
    except TypeError as exc:  # an unknown key: named, with the keys there are (not the dataclass's words)
        import dataclasses
        import re

        found = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
        if found is None:
            raise ConfigError(f"unknown configuration key: {exc}") from exc
        groups = {"profiler": ProfilerConfig, "compiler": CompilerConfig, "run": RunConfig}
        where = next((g for g, cls in groups.items() if found.group(1) not in {f.name for f in dataclasses.fields(cls)}
                      and f"{cls.__name__}.__init__" in str(exc)), None)
        cls = groups[where] if where else JobConfig
        key = f"{where}.{found.group(1)}" if where else found.group(1)
        keys = ", ".join(f"{where + '.' if where else ''}{f.name}" for f in dataclasses.fields(cls)
                         if f.name not in ("workload", "profiler", "compiler", "run", "expect"))
        raise ConfigError(f"{key} is not allowed: it is not a key of this configuration (the keys: {keys}; "
                          "a workload's own settings are workload.<name>)") from exc


# --- Hydra -------------------------------------------------------------------------------------


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore; conf/*.yaml extend them."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    cs = ConfigStore.instance()
    # The workload is chosen by its config group; its node is open: its own settings are free
    # keys (workload.hidden=512 needs no +), checked against the factory's signature instead.
    schema = OmegaConf.structured(JobConfig)
    schema.workload = "???"
    cs.store(name="schema", node=schema)
    workload = OmegaConf.create({})
    OmegaConf.set_struct(workload, False)
    cs.store(group="schema", name="workload", node=workload)
    register_resolvers()


def register_resolvers() -> None:
    """`${cold_warm:...}`, `${eager_compile:...}`, `${train_suffix:...}`, `${repeat_suffix:...}`,
    `${variant_settings:}` and `${variant:...}` (readable job folder names) and `${short_name:...}`
    (a custom workload is named after its factory)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("cold_warm", lambda warm: "warm" if warm else "cold", replace=True)
    OmegaConf.register_new_resolver(
        "eager_compile", lambda compiled: "compile" if compiled else "eager", replace=True
    )
    OmegaConf.register_new_resolver("short_name", short_name, replace=True)
    OmegaConf.register_new_resolver("train_suffix", lambda train: "_train" if train else "", replace=True)
    OmegaConf.register_new_resolver("repeat_suffix", repeat_suffix, replace=True)
    OmegaConf.register_new_resolver("variant_settings", variant_settings_of_sweep, replace=True)
    OmegaConf.register_new_resolver("variant", variant_folder_name, replace=True)


def repeat_suffix(repeat: Any) -> str:
    """A job folder's name ends in `_r2`, `_r3`, ... for the second repeat on (nothing for the first)."""
    try:
        return f"_r{int(repeat)}" if int(repeat) > 1 else ""
    except (TypeError, ValueError):
        return ""


# --- the variant: the workload settings a sweep sets name its jobs -----------------------------

NOT_SETTINGS = RESERVED  # keys of workload. that are not the factory's settings


def overridden_settings(overrides: Any) -> list[str]:
    """The workload settings among a job's overrides (`workload.hidden=1024`, a preset's swept
    `workload.backend`), sorted, each once; not `workload._target_` or `workload.name`, and not a
    deleted one (`~workload.x`)."""
    found = set()
    for override in overrides or []:
        key = str(override).split("=", 1)[0]
        if key.startswith("~"):
            continue
        group, _, setting = key.lstrip("+").partition(".")
        if group == "workload" and setting.isidentifier() and setting not in NOT_SETTINGS:
            found.add(setting)
    return sorted(found)


def variant_settings_of_sweep(*, _root_: Any) -> str:
    """`${variant_settings:}`: the workload settings this job's overrides set (the command line's
    and the preset's swept ones), space-separated. Every job of a grid has the same overrides'
    keys, so every job names the same settings, whatever their values (a value equal to the
    factory's default too). Read from the config's own `hydra` node where it has one (Hydra's
    job folder names, the sweep's preflight), else from the running job's Hydra config."""
    from omegaconf import OmegaConf

    overrides = OmegaConf.select(_root_, "hydra.overrides.task", default=None)
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
    return " ".join(overridden_settings(overrides))


def named_settings(settings: Mapping[str, Any], names: str) -> list[tuple[str, Any]]:
    """The named settings with their values, in the order named (a name the workload does not
    have is left out)."""
    return [(key, settings[key]) for key in names.split() if key in settings]


FOLDER_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")  # a folder name's characters, as NAME_PATTERN's
FOLDER_WORD_MAX = 40


def folder_word(key: str, value: Any) -> str:
    """One setting in a job folder's name: a string by its value (`flash`), a flag by its key
    (`causal`, `nocausal`), any other value after its key (`hidden1024`, `shape64x128`); only
    letters, digits, `_`, `.` and `-`."""
    if isinstance(value, bool):
        return key if value else f"no{key}"
    if isinstance(value, (list, tuple)):
        text = "x".join(str(v) for v in value)
    else:
        text = str(value)
    text = FOLDER_UNSAFE.sub("_", text)[:FOLDER_WORD_MAX]
    return text if isinstance(value, str) and text else f"{key}{text or 'empty'}"


def variant_folder_name(workload: Any, names: str) -> str:
    """`${variant:${workload},${run.variant_settings}}`: the workload's name and its named
    settings, joined by `-` (`attention-flash`, `make_block-hidden1024`; `matmul_add` alone when
    the sweep sets none)."""
    from omegaconf import OmegaConf

    w = WorkloadConfig.from_node(OmegaConf.to_container(workload, resolve=True))
    return "-".join([shown_name(w.target, w.name),
                     *(folder_word(key, value) for key, value in named_settings(w.settings, str(names)))])


# Launchers that run jobs in other processes (submitit, joblib) resolve each job's folder name
# there, after importing this module through the task function: the resolvers must exist then.
register_resolvers()
