"""Hydra callback: analyse the sweep (or single run) folder when it ends."""

from __future__ import annotations

import contextlib
import errno
import importlib
import sys
import threading
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf


class AnalysisCallback(Callback):
    """Writes summary.csv, crossovers.csv, plots/ and report.html at the end of every run."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _preload(config)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _preload(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        _analyse(Path(str(config.hydra.sweep.dir)))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        _analyse(Path(str(config.hydra.runtime.output_dir)))


def jobs_in_own_processes(config: DictConfig) -> bool:
    """True when every job runs in a child process: run.isolation=process and no override of
    the run group or of run.isolation, in the sweep's parameters or on the command line."""
    if OmegaConf.select(config, "run.isolation") != "process":
        return False
    keys = list(OmegaConf.select(config, "hydra.sweeper.params", default=None) or {})
    keys += [str(o).split("=", 1)[0] for o in OmegaConf.select(config, "hydra.overrides.task", default=None) or []]
    return not any(k.lstrip("+~") in ("run", "run.isolation") for k in keys)


def _preload(config: DictConfig) -> None:
    """Import what the analysis needs (pandas, seaborn, matplotlib: about 1 s on 2 cores) in a
    background thread while the jobs run in their own processes, so the analysis at the end
    does not wait for it. Never while a job may run in this process: it would share its GIL."""
    if not jobs_in_own_processes(config):
        return

    def load() -> None:
        # A failure here is not reported: the analysis imports them again and reports it.
        with contextlib.suppress(Exception):
            for module in ("analysis.tables", "analysis.report.claims", "analysis.report.plots", "analysis.report.page"):
                importlib.import_module(module)

    threading.Thread(target=load, name="analysis-preload", daemon=True).start()


def _analyse(folder: Path) -> None:
    from analysis import analyse_folder
    from profsweep.sweep_state import SWEEP

    try:
        SWEEP.analysis_problems = analyse_folder(folder)
    except KeyboardInterrupt:  # stopped while analysing: the tally says so and exits 130
        SWEEP.analysis_interrupted = True
        SWEEP.analysis_failed.append("analysis interrupted")
        print(f"analysis interrupted\n  redo it with: python -m analysis {folder}", file=sys.stderr, flush=True)
    except Exception as exc:  # the jobs' artifacts stay; say how to redo the analysis, and fail the run
        full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
        what = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        why = f"analysis {'not written: disk full' if full else 'failed'}: {what}"
        SWEEP.analysis_failed.append(why)
        print(f"{why}\n  redo it with: python -m analysis {folder}", file=sys.stderr, flush=True)
