"""The typed configuration of one job: dataclasses are the schema, YAML files only fill values.

`register_configs()` puts the schema into Hydra's ConfigStore; `config_from_dict` and
`config_to_dict` move a job's configuration across the process boundary as plain JSON, so the
child process that profiles a job never needs Hydra.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping


class ConfigError(ValueError):
    """A configuration value that is not allowed; the message names key, value and what is allowed."""


DTYPES = ("bf16", "fp16", "fp32")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
ISOLATIONS = ("process", "none")
COMPILE_CACHES = ("fresh", "shared")
SDPA_BACKENDS = ("auto", "math", "flash", "efficient", "cudnn")  # auto: torch chooses
CUDA_ONLY_SDPA_BACKENDS = ("efficient", "cudnn")


def cuda_kernel_refusal(backend: str, where: str, why: str = "") -> str:
    """The refusal of a CUDA-only SDPA backend `where` it cannot run, naming what can."""
    *others, last = [b for b in SDPA_BACKENDS if b not in CUDA_ONLY_SDPA_BACKENDS]
    return (f"workload.backend={backend!r} is not allowed {where}: it is a CUDA kernel{why}; "
            f"choose {', '.join(others)} or {last}")


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


def _check_fields(prefix: str, obj: Any) -> None:
    """Validate every int/bool field of a dataclass by its declared type."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.type in ("int", int):
            _require_positive_int(f"{prefix}{f.name}", value)
        elif f.type in ("bool", bool):
            _require_bool(f"{prefix}{f.name}", value)


# --- workloads: one schema per workload, selected by the `workload` config group ------------


@dataclass
class MatmulAddConfig:
    """torch.add(torch.matmul(x, w), b) with x, w, b all (size, size)."""

    name: str = "matmul_add"


@dataclass
class BmmConfig:
    """matmul_add with a leading batch axis: x, w, b all (batch, size, size)."""

    name: str = "bmm"
    batch: int = 8


@dataclass
class LinearConfig:
    """nn.Linear(in_features, out_features, bias=True) on (size, in_features) rows."""

    name: str = "linear"
    in_features: int = 32
    out_features: int = 64


@dataclass
class MLPConfig:
    """GeGLU block down(gelu_tanh(gate(x)) * up(x)), no biases, on (size, dim) rows."""

    name: str = "mlp"
    dim: int = 768
    hidden: int = 3072


@dataclass
class AttentionConfig:
    """F.scaled_dot_product_attention(q, k, v), q, k, v all (batch, heads, size, head_dim):
    size is the sequence length; backend pins SDPA's kernel (auto: torch chooses one)."""

    name: str = "attention"
    batch: int = 4
    heads: int = 8
    head_dim: int = 64
    causal: bool = False
    backend: str = "auto"

    def __post_init__(self) -> None:
        _require_choice("workload.backend", self.backend, SDPA_BACKENDS)


WORKLOADS: dict[str, type] = {
    cls().name: cls for cls in (MatmulAddConfig, BmmConfig, LinearConfig, MLPConfig, AttentionConfig)
}


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

    def __post_init__(self) -> None:
        for f in ("wait", "warmup"):
            _require_nonnegative_int(f"profiler.{f}", getattr(self, f))
        for f in ("active", "repeat", "row_limit"):
            _require_positive_int(f"profiler.{f}", getattr(self, f))
        for f in ("record_shapes", "with_stack", "profile_memory"):
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

    def __post_init__(self) -> None:
        _require_choice("compiler.mode", self.mode, COMPILE_MODES)
        if not isinstance(self.backend, str) or not self.backend:
            raise ConfigError(f"compiler.backend={self.backend!r} is not allowed: name a backend")
        _require_bool("compiler.dynamic", self.dynamic)


@dataclass
class RunConfig:
    """How each job is run: its own interpreter (honest cold starts) and its own Inductor cache."""

    isolation: str = "process"
    compile_cache: str = "fresh"
    warmup_iters: int = 3
    job_timeout_s: int = 3600  # an isolated job still running after this is killed; 0: no limit

    def __post_init__(self) -> None:
        _require_choice("run.isolation", self.isolation, ISOLATIONS)
        _require_choice("run.compile_cache", self.compile_cache, COMPILE_CACHES)
        _require_positive_int("run.warmup_iters", self.warmup_iters)
        _require_nonnegative_int("run.job_timeout_s", self.job_timeout_s)


@dataclass
class JobConfig:
    """One grid point: the user-facing keys plus the settings groups."""

    workload: Any = field(default_factory=MatmulAddConfig)
    size: int = 64
    dtype: str = "bf16"
    compile: bool = False
    warmup: bool = False
    device: str = "auto"
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    compiler: CompilerConfig = field(default_factory=CompilerConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        name = getattr(self.workload, "name", self.workload)
        if type(self.workload) not in WORKLOADS.values():
            raise ConfigError(
                f"workload={name!r} is not allowed: choose one of {', '.join(WORKLOADS)}"
            )
        _check_fields("workload.", self.workload)
        _require_positive_int("size", self.size)
        _require_choice("dtype", self.dtype, DTYPES)
        _require_choice("device", self.device, DEVICES)
        _require_bool("compile", self.compile)
        _require_bool("warmup", self.warmup)

    @property
    def phase(self) -> str:
        return "warm" if self.warmup else "cold"

    @property
    def mode(self) -> str:
        return "compile" if self.compile else "eager"

    @property
    def label(self) -> str:
        """The grid values in words, as the progress lines show them; workload settings that
        differ from their defaults are named (`attention backend=flash size=512 ...`)."""
        w = self.workload
        changed = [f"{f.name}={getattr(w, f.name)}" for f in dataclasses.fields(w)
                   if f.name != "name" and getattr(w, f.name) != f.default]
        return " ".join([w.name, *changed, f"size={self.size} {self.dtype} {self.phase} {self.mode}"])


# --- plain-data round trip (the child process reads this, not Hydra) --------------------------


def config_to_dict(config: JobConfig) -> dict[str, Any]:
    """A JSON-ready nested dict, the inverse of `config_from_dict`."""
    return dataclasses.asdict(config)


def config_from_dict(data: Mapping[str, Any]) -> JobConfig:
    """Rebuild and validate a JobConfig from `config_to_dict` output (or a resolved Hydra config)."""
    data = dict(data)
    workload = dict(data.pop("workload", {"name": "matmul_add"}))
    name = workload.get("name")
    if name not in WORKLOADS:
        raise ConfigError(f"workload={name!r} is not allowed: choose one of {', '.join(WORKLOADS)}")
    try:
        return JobConfig(
            workload=WORKLOADS[name](**workload),
            profiler=ProfilerConfig(**data.pop("profiler", {})),
            compiler=CompilerConfig(**data.pop("compiler", {})),
            run=RunConfig(**data.pop("run", {})),
            **data,
        )
    except TypeError as exc:  # an unknown key
        raise ConfigError(f"unknown configuration key: {exc}") from exc


# --- Hydra -------------------------------------------------------------------------------------


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore; conf/*.yaml extend them."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    cs = ConfigStore.instance()
    # The workload is chosen by its config group, which brings its own schema.
    schema = OmegaConf.structured(JobConfig)
    schema.workload = "???"
    cs.store(name="schema", node=schema)
    for name, cls in WORKLOADS.items():
        cs.store(group="schema/workload", name=name, node=cls)
    register_resolvers()


def register_resolvers() -> None:
    """`${cold_warm:...}` and `${eager_compile:...}`: readable job folder names."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("cold_warm", lambda warm: "warm" if warm else "cold", replace=True)
    OmegaConf.register_new_resolver(
        "eager_compile", lambda compiled: "compile" if compiled else "eager", replace=True
    )


# Launchers that run jobs in other processes (submitit, joblib) resolve each job's folder name
# there, after importing this module through the task function: the resolvers must exist then.
register_resolvers()
