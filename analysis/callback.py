"""Hydra callback: analyse the sweep (or single run) folder when it ends."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class AnalysisCallback(Callback):
    """Writes summary.csv, crossovers.csv, plots/ and report.html at the end of every run."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        _analyse(Path(str(config.hydra.sweep.dir)))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        _analyse(Path(str(config.hydra.runtime.output_dir)))


def _analyse(folder: Path) -> None:
    from analysis import analyse_folder

    try:
        analyse_folder(folder)
    except Exception as exc:  # the jobs' artifacts stay; say how to redo the analysis
        print(f"analysis failed: {type(exc).__name__}: {exc}\n"
              f"  redo it with: python -m analysis {folder}", file=sys.stderr, flush=True)
