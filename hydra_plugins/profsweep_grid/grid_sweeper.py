"""Hydra's sweeper for profsweep: the basic sweeper's grid, launched so that the first job of any
grid starts at once.

The basic sweeper composes every job of a batch to check it before launching any (about 0.08 s a
job: a minute for a grid of 1,000). Here the sweep's preflight (experiments.sweep.SweepCallback)
has checked every key's values before this runs, so with Hydra's basic launcher the jobs are
launched one at a time, each composed just before it runs, and launching stops as soon as the
sweep was interrupted or the disk filled. Launchers that send jobs elsewhere (joblib, submitit)
get batches of max_batch_size (all jobs by default), checked first, as the basic sweeper does.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.profsweep_grid import grid

log = logging.getLogger(__name__)

# Compared as a string: importing it would be importing hydra._internal.
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class GridSweeper(Sweeper):
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.hydra_context: Optional[HydraContext] = None
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config,
        )

    def sweep(self, arguments: List[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        axes = grid.axes(grid.arguments(self.params, arguments), self.hydra_context.config_loader)
        jobs = list(grid.jobs(axes))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        one_by_one = self.config.hydra.launcher.get("_target_") == BASIC_LAUNCHER
        returns: List[List[JobReturn]] = []
        done = 0
        try:
            self._launch(jobs, one_by_one, returns)
        finally:
            from experiments.forkserver import shutdown

            shutdown()  # the jobs are done: no template, and no thread watching it, for the analysis
        return returns

    def _launch(self, jobs: List[List[str]], one_by_one: bool, returns: List[List[JobReturn]]) -> None:
        assert self.launcher is not None
        done = 0
        for batch in grid.batches(jobs, 1 if one_by_one else self.max_batch_size):
            if stopped():
                not_started(len(jobs) - done)
                break
            if not one_by_one:  # composed again elsewhere: catch a composition error here first
                self.validate_batch_is_legal(batch)
            try:
                results = self.launcher.launch(batch, initial_job_idx=done)
            except OSError as exc:
                if exc.errno not in DISK_FULL:
                    raise
                disk_full(exc)  # Hydra's own files of the next job (.hydra/*.yaml) did not fit
                not_started(len(jobs) - done)
                break
            for result in results:
                _ = result.return_value  # re-raises a job's exception, as the basic sweeper does
            done += len(batch)
            returns.append(list(results))


def stopped() -> bool:
    """The sweep was interrupted (Ctrl-C, SIGTERM) or found the disk full: start no more jobs."""
    from experiments.launch import Interrupted

    return bool(Interrupted.seen)


def not_started(left: int) -> None:
    from experiments.launch import Interrupted

    print(f"not started: {left} job{'s' if left != 1 else ''} ({Interrupted.why()})", flush=True)


def disk_full(exc: OSError) -> None:
    from experiments.launch import Interrupted

    Interrupted.seen = True
    Interrupted.disk_error = f"disk full: {exc.filename or 'a file of the next job'}: {exc.strerror or exc}"
