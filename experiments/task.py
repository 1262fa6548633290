"""Hydra's side of a sweep: the task of each grid point, and the callback that checks every job
before any starts (experiments.preflight), holds the sweep folder and sums up at the end
(experiments.sweep_folder).

Hydra turns an exception raised in a callback into a warning, so a refusal here is a
SystemExit with the message already printed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from experiments import forkserver, records, refusals, seam
from experiments.config import ConfigError
from experiments.point import warm_start
from experiments.preflight import (
    check_configs, check_expectations, command_line_axes, job_config, preflight, refuse_deleted_keys,
    refuse_loose_flags, refuse_repeated_keys, refuse_repeated_values, refuse_swept_sweep_settings, skip_reason, sweep_grid,
    warn_oversubscribed, warn_unused_with_one_process,
)
from experiments.refusals import refuse
from experiments.sweep_folder import (
    defer_stops, record_ceilings, refuse_another_grid, refuse_what_is_no_sweep, start_in, tally, warn_if_short_of_space,
    write_plan,
)
from profsweep.progress import planned_jobs
from profsweep.sweep_state import SWEEP


def task(cfg: DictConfig) -> dict[str, Any] | None:
    """The Hydra task of one grid point: run its job, leave the artifacts in its folder and
    return its record (the sweeper reads it to decide on more repeats)."""
    from hydra.core.hydra_config import HydraConfig

    from experiments.point import run_task

    try:
        config = job_config(cfg)
    except ConfigError as exc:
        refuse(str(exc))
    hydra_cfg = HydraConfig.get()
    index, total = 1, 1
    if hydra_cfg.mode.name == "MULTIRUN":
        index, total = hydra_cfg.job.num + 1, planned_jobs(Path(hydra_cfg.sweep.dir))
        refuse_a_job_folder_outside(Path(hydra_cfg.runtime.output_dir), Path(hydra_cfg.sweep.dir))
    else:  # a single run is one process: no repeats are planned (-m measures run.repeats of them)
        import dataclasses

        config = dataclasses.replace(config, run=dataclasses.replace(config.run, repeats=1))
    record = run_task(config, Path(hydra_cfg.runtime.output_dir), index, total, skip=skip_reason(config))
    if hydra_cfg.mode.name != "MULTIRUN":
        defer_stops()  # a single run's job is done: a stop now waits for its analysis
    return record


def resolved_sweep_dir(config: DictConfig, mode: str = "sweep") -> Path:
    """hydra.sweep.dir (or hydra.run.dir), resolved; one whose interpolation cannot be resolved
    (`hydra.sweep.dir=/tmp/x/${oops}`) is refused in our words before anything is written."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        given = config.hydra[mode].dir
    except OmegaConfBaseException as exc:
        given = OmegaConf.to_container(config.hydra[mode], resolve=False).get("dir")
        said = str(getattr(exc, "msg", None) or exc).strip().splitlines()[0]
        refuse(f"hydra.{mode}.dir={given} is not allowed: OmegaConf cannot resolve it ({said}); "
               "an interpolation ${...} names another key, or a resolver such as ${now:%Y-%m-%d}")
    if given is None or not str(given).strip():  # Path("") is ".": the sweep would land where the command ran
        refuse(f"hydra.{mode}.dir={given!r} is not allowed: give a folder to write into, e.g. "
               f"hydra.{mode}.dir=outputs/mine")
    return Path(str(given))


# The interpolations of the job's number (Hydra's `hydra.job.id` is it, under the sweep's own launcher)
JOB_NUMBER = re.compile(r"\$\{\s*hydra[.:]job\.(num|id)\s*\}")
SUBDIR_EXAMPLE = "hydra.sweep.subdir='${hydra.job.num}_${size}'"


def refuse_a_subdir_that_shares_or_leaves(config: DictConfig) -> None:
    """hydra.sweep.subdir must give each job a folder of its own directly inside the sweep's:
    without the job's number jobs of one sweep overwrote each other's records (one of two kept);
    an absolute one, or one with `/` or `..`, wrote the jobs outside it, where neither the
    analysis nor a resume finds them (one an interpolation puts a `/` into is refused at its
    first job: refuse_a_job_folder_outside)."""
    raw = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
    text = str(raw)
    literal = re.sub(r"\$\{[^{}]*(\{[^{}]*\}[^{}]*)*\}", "", text)  # what the interpolations leave
    if not JOB_NUMBER.search(text):
        refuse(f"hydra.sweep.subdir={text} is not allowed: it must hold ${{hydra.job.num}}, which gives each job a "
               f"folder of its own (without it, jobs write into one folder and all but one record are lost), "
               f"e.g. {SUBDIR_EXAMPLE}")
    if text.startswith(("/", "~")) or "/" in literal or "\\" in literal or ".." in literal:
        refuse(f"hydra.sweep.subdir={text} is not allowed: it names one folder inside hydra.sweep.dir (no '/', "
               f"'..' or absolute path), e.g. {SUBDIR_EXAMPLE}")


def refuse_a_job_folder_outside(job_dir: Path, sweep_dir: Path) -> None:
    """A job's folder must lie directly inside its sweep's, where the analysis and a resume look
    (`${now:%H/%M}` in hydra.sweep.subdir nested it: "0 jobs, 1 missing"): refused at the first
    job, before it runs."""
    if job_dir.resolve().parent != sweep_dir.resolve():
        refuse(f"hydra.sweep.subdir put a job into {job_dir}, not into a folder directly inside "
               f"hydra.sweep.dir={sweep_dir} (an interpolation gave it a '/'?): e.g. {SUBDIR_EXAMPLE}")


SLURM_COMMANDS = ("sbatch", "srun")  # what submitit's SLURM launcher runs to submit and to detect a job


def refuse_slurm_without_slurm(config: DictConfig) -> None:
    """hydra/launcher=slurm on a machine without SLURM's commands is refused before the sweep
    starts (else submitit's traceback once the sweep folder is made)."""
    import shutil

    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    if "SlurmLauncher" not in target:
        return
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        refuse(f"hydra/launcher=slurm is not allowed here: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
               "not on PATH (SLURM's commands): run the sweep where SLURM is (a login node), or "
               "hydra/launcher=submitit_local for the same code path on this machine")


def name_factories_apart(planned: list[Any]) -> None:
    """Factories of one sweep that share a name (`a:make`, `b:make`), each named by default, are
    shown apart (`a.make`, `b.make`: seam.distinct_names) in job folders and progress lines, which
    are made from here on; their series keep the name, told apart by `target`."""
    default = [p.config.workload.target for p in planned
               if p.config.workload.name == seam.short_name(p.config.workload.target)]
    names = seam.distinct_names(default)
    if names:
        os.environ[seam.SHOWN_ENV] = json.dumps(names)
        said = ", ".join(f"{t} as {n}" for t, n in sorted(names.items()))
        print(f"note: factories with the same name are shown apart in job folders and progress lines: {said}",
              flush=True)


class SweepCallback(Callback):
    """Validates every job of a run or sweep up front and prints the final tally."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        SWEEP.reset()  # a run in a process that ran one before (a notebook, tests) starts clean
        os.environ.pop(seam.SHOWN_ENV, None)
        refuse_deleted_keys(config)
        try:  # the job's own keys first: hydra.run.dir interpolates them (workload._target_ unset: in words)
            job_config(config)
        except ConfigError as exc:
            refuse(str(exc))
        resolved_sweep_dir(config, "run")
        refuse_loose_flags(command_line_axes(config))
        refuse_repeated_keys(config)
        try:
            check_configs([job_config(config)])
        except ConfigError as exc:
            refuse(str(exc))
        warn_oversubscribed([job_config(config)])
        warn_unused_with_one_process([job_config(config)])
        expect = check_expectations(config)
        SWEEP.folder = Path(str(config.hydra.run.dir))  # from here a stop may leave the folder behind
        start_in(SWEEP.folder, "hydra.run.dir", expect)
        refusals.release()  # the input is accepted: stderr passes from now on
        record_ceilings(Path(str(config.hydra.run.dir)), [job_config(config)])
        if SWEEP.stopped:  # stopped while the ceilings were measured: the run does not start
            raise KeyboardInterrupt

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.global_hydra import GlobalHydra

        refuse_deleted_keys(config)
        resolved_sweep_dir(config)
        refuse_a_subdir_that_shares_or_leaves(config)
        axes = sweep_grid(config)
        refuse_swept_sweep_settings(axes)
        refuse_loose_flags(axes)
        refuse_repeated_values(axes)
        refuse_repeated_keys(config)
        compose = GlobalHydra.instance().config_loader().load_sweep_config
        os.environ.pop(seam.SHOWN_ENV, None)  # an earlier sweep's in this process
        planned = preflight(config, axes if axes is not None else [], compose)
        check_configs([p.config for p in planned], [p.jobs for p in planned])
        name_factories_apart(planned)
        warn_oversubscribed([p.config for p in planned])
        warn_unused_with_one_process([p.config for p in planned])
        refuse_slurm_without_slurm(config)
        expect = check_expectations(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if axes is not None:
            refuse_what_is_no_sweep(sweep_dir)
            refuse_another_grid(sweep_dir, axes)
            warn_if_short_of_space(sweep_dir, "hydra.sweep.dir", planned)
        SWEEP.folder = sweep_dir  # from here a stop may leave the folder behind
        start_in(sweep_dir, "hydra.sweep.dir", expect)
        if axes is not None:
            compiles = any(p.config.compile for p in planned) or any(
                axis.key == "compile" and any(str(v).lower() == "true" for v in axis.values) for axis in axes)
            write_plan(sweep_dir, axes, config.run, compiles)
        refusals.release()  # the input is accepted: stderr passes from now on
        SWEEP.reset()
        SWEEP.folder = sweep_dir
        # Once the grid sweeper has launched the last job: no template, and no thread watching
        # it, while the analysis runs (the sweeper calls this through SWEEP, not by importing us).
        # From the last job on, a stop waits for the analysis: deferred first, so that a stop while
        # the template shuts down is one too (it escaped the sweep, unanalysed, in a loaded test run).
        SWEEP.after_launching(defer_stops)
        SWEEP.after_launching(forkserver.shutdown)
        # This machine's ceilings first (a cache read, or a few seconds once per machine), so that
        # nothing else runs while they are measured; then the fork server imports torch while the
        # sweep starts.
        record_ceilings(sweep_dir, [p.config for p in planned], axes)
        if planned and not SWEEP.stopped:
            warm_start(planned[0].config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        job_dir = Path(str(config.hydra.runtime.output_dir))
        tally([job_dir], job_dir, expected=1)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ.pop(seam.SHOWN_ENV, None)  # this sweep's: no later code of this process shows them
        sweep_dir = Path(str(config.hydra.sweep.dir))
        job_dirs = sorted(p.parent for p in sweep_dir.glob(f"*/{records.METRICS_FILE}"))
        tally(job_dirs, sweep_dir, planned_jobs(sweep_dir))
