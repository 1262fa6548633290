"""Hydra's side of a sweep: the task of each grid point, and callbacks that refuse bad input
before any job starts and sum up at the end.

Hydra turns an exception raised in a callback into a warning, so a refusal here is a
SystemExit with the message already printed.
"""

from __future__ import annotations

import copy
import fcntl
import functools
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue

from experiments import records
from experiments import seam
from experiments.config import ConfigError, JobConfig, config_from_dict
from experiments.launch import Interrupted, Progress

PLAN_FILE = "sweep.json"
ENVIRONMENT_FILE = "environment.json"
EXIT_BAD_INPUT = 2
EXIT_FAILED_JOBS = 1
EXIT_INTERRUPTED = 130


def job_config(cfg: DictConfig) -> JobConfig:
    """The typed, validated job configuration of a composed Hydra config."""
    try:
        plain = {
            str(key): OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
            for key in cfg
            if key != "hydra"
        }
    except (MissingMandatoryValue, InterpolationToMissingValueError) as exc:
        raise missing_value(exc) from None
    return config_from_dict(plain)


def missing_value(exc: Exception) -> ConfigError:
    """A `???` value left unset (workload=custom without workload._target_), in words."""
    found = re.search(r"Missing mandatory value: ?([\w.]+)", str(exc))
    key = found.group(1) if found else getattr(exc, "full_key", None) or "a mandatory key"
    hint = (": name your factory, e.g. workload._target_=mybench.blocks:make_block"
            if key.endswith("_target_") else f": set {key}=...")
    return ConfigError(f"{key} is missing{hint}")


def task(cfg: DictConfig) -> None:
    """The Hydra task of one grid point: run its job and leave the artifacts in its folder."""
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
    run_task(config, Path(hydra_cfg.runtime.output_dir), index, total, skip=skip_reason(config))


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


def check_configs(configs: list[JobConfig]) -> None:
    """Checks that need the factories or the machine, once per distinct workload: the factory
    imports, is callable and takes the settings (experiments.seam.check); settings that run only
    on CUDA (attention's efficient and cudnn backends) need a CUDA device torch can see, and
    device=cuda too. With run.unavailable=skip such grid points are left out (said once, here)
    instead of refused."""
    skipped = [c for c in configs if skip_reason(c)]
    if skipped:
        values = sorted({seam.needs_cuda(c.workload.target, c.workload.settings).setting for c in skipped})
        print(f"left out on this machine: {len(skipped)} job{'s' if len(skipped) != 1 else ''} with "
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


def sweep_overrides(cfg: DictConfig) -> list[list[str]] | None:
    """Every job's overrides as the basic sweeper will expand them; None for other sweepers."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if cfg.hydra.sweeper.get("_target_") != _target(BasicSweeper):
        return None
    params = cfg.hydra.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()]
    arguments += list(OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False))
    # With the config loader, as the sweeper parses them (glob() over a config group needs it).
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    parsed = parser.parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _target(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


class ComposedOnce:
    """The config loader's load_sweep_config, answering from the configs the preflight composed.

    Hydra composes every job of a basic sweep twice more: the sweeper to check the batch, the
    launcher to run it (about 0.08 s each on 2 cores). Composition depends only on the master
    config and the job's overrides, so the preflight's result is handed out as a copy (the
    launcher writes hydra.job.num into it); any other call composes as before.
    """

    def __init__(self, load: Any, master: DictConfig, composed: dict[tuple[str, ...], DictConfig]):
        self.load, self.master, self.composed = load, master, composed

    def __call__(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        known = self.composed.get(tuple(sweep_overrides)) if master_config is self.master else None
        if known is None:
            return self.load(master_config, sweep_overrides)
        composed = copy.deepcopy(known)  # a deep copy does not keep resolved values: copy them
        OmegaConf.copy_cache(from_config=master_config, to_config=composed)  # as Hydra does
        return composed


def _reuse_compositions(master: DictConfig, composed: dict[tuple[str, ...], DictConfig]) -> None:
    """Let the basic sweeper and launcher reuse the preflight's compositions. Only for the basic
    launcher: other launchers send the loader to other processes or machines."""
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher
    from hydra.core.global_hydra import GlobalHydra

    if master.hydra.launcher.get("_target_") != _target(BasicLauncher):
        return
    loader = GlobalHydra.instance().config_loader()
    loader.load_sweep_config = ComposedOnce(loader.load_sweep_config, master, composed)


def _forget_compositions() -> None:
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        vars(GlobalHydra.instance().config_loader()).pop("load_sweep_config", None)


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
    try:
        records.write_json(folder / ENVIRONMENT_FILE, records.environment_file(sys.argv))
    except OSError as exc:
        refuse(f"{key}={folder}: cannot write into this folder ({exc.strerror or exc}): "
               f"choose a {key} you can write to")
    if expect:
        records.write_json(folder / EXPECT_FILE, {"expect": expect})


LOCK_FILE = ".profsweep.lock"
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

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.global_hydra import GlobalHydra
        from hydra.errors import HydraException

        jobs = sweep_overrides(config)
        configs = []
        composed: dict[tuple[str, ...], DictConfig] = {}
        loader = GlobalHydra.instance().config_loader()
        for overrides in jobs if jobs is not None else [[]]:
            try:
                composed[tuple(overrides)] = loader.load_sweep_config(config, list(overrides))
                configs.append(job_config(composed[tuple(overrides)]))
            except (MissingMandatoryValue, InterpolationToMissingValueError) as exc:
                refuse(str(missing_value(exc)))
            except (ConfigError, HydraException) as exc:
                cause = f"\n{exc.__cause__}" if exc.__cause__ else ""  # Hydra's names the key
                refuse(f"{exc} (in the job {' '.join(overrides)}){cause}")
        check_configs(configs)
        expect = check_expectations(config)
        _reuse_compositions(config, composed)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        _start(sweep_dir, "hydra.sweep.dir", expect)
        if jobs is not None:
            records.write_json(
                sweep_dir / PLAN_FILE,
                {"jobs": len(jobs), "overrides": jobs, "command": sys.argv, "created_at": records.now_iso()},
            )
            print(f"sweep of {len(jobs)} jobs -> {sweep_dir}", flush=True)
        Progress.reset()

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        job_dir = Path(str(config.hydra.runtime.output_dir))
        tally([job_dir], job_dir, expected=1)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        _forget_compositions()
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
              + (f", {missing} missing" if missing else ""))
    print(f"done: {len(job_dirs)} job{'s' if len(job_dirs) != 1 else ''} ({counts}) in {folder}", flush=True)
    for name, error in failed:
        print(f"  failed: {name}: {error}", flush=True)
    if Interrupted.disk_error:
        print(f"stopped: {Interrupted.disk_error}\n  free some space in {folder}'s disk, then rerun the "
              f"same command into the same folder to finish (hydra.sweep.dir={folder}); jobs already ok "
              "are skipped", flush=True)
        raise SystemExit(EXIT_FAILED_JOBS)
    if Interrupted.seen:
        print("interrupted: rerun the same command into the same folder to finish "
              f"(hydra.sweep.dir={folder}); jobs already ok are skipped", flush=True)
        raise SystemExit(EXIT_INTERRUPTED)
    if failed or missing:
        raise SystemExit(EXIT_FAILED_JOBS)
