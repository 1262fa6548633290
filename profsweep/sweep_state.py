"""The state of the sweep that runs in this process: whether it was stopped (Ctrl-C, SIGTERM, or a
full disk: no job starts after that), its clock for the progress lines, and what is to be done
once its last job has been launched.

One object, `SWEEP`, per sweep process, reset when a sweep starts (experiments.task's
callback). The job side (experiments) and the grid sweeper (hydra_plugins) both use it and
neither imports the other: the job side registers what the grid sweeper must call when it has
launched the last job (`after_launching`: the fork server's shutdown) instead of the grid sweeper
importing the job side.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from profsweep.progress import duration


class SweepState:
    """What the sweep's jobs, its grid sweeper and its tally share within one process."""

    def __init__(self) -> None:
        self._clear()

    def reset(self) -> None:
        """A sweep starts: nothing stopped, no job done, nothing registered, the clock from now."""
        self._clear()
        self.started = time.monotonic()

    def _clear(self) -> None:
        self.stopped = False  # interrupted (Ctrl-C, SIGTERM) or the disk filled: start no more jobs
        self.stop_noted = False  # a stop after the last job was noted, the analysis going on (defer_stops)
        self.disk_error: str | None = None  # the error of the job (or write) that found the disk full
        self.compose_error: str | None = None  # Hydra could not compose the next job's configuration
        self.started: float | None = None  # monotonic clock when the jobs began
        self.durations: list[float] = []  # how long each job that ran took
        self.resumed = 0  # jobs skipped because they were already ok (resume)
        self.folder: Path | None = None  # the sweep's folder, from when it may be made (a stop before: nothing written)
        self._after_launching: list[Callable[[], None]] = []
        # How the analysis at the end went (the analysis callback notes it, the tally turns it into
        # the exit status): why it was not written, and whether it was itself stopped.
        self.analysis_failed: list[str] = []
        self.analysis_interrupted = False
        self.analysis_problems: list[tuple[str, str]] = []  # (job, what) the analysis found (analyse_folder)

    def stop(self, disk_error: str | None = None, compose_error: str | None = None) -> None:
        """Start no more jobs: the sweep was interrupted, (`disk_error`) the disk is full, or
        (`compose_error`) the next job's configuration could not be composed."""
        self.stopped = True
        if disk_error:
            self.disk_error = disk_error
        if compose_error:
            self.compose_error = compose_error

    def why(self) -> str:
        """Why jobs were not started, in words."""
        if self.disk_error:
            return "the disk is full"
        return "a job's configuration could not be composed" if self.compose_error else "the sweep was interrupted"

    def progress_line(self, index: int, total: int | None) -> str:
        """`3 min 10 s elapsed, ~14 min left` before job `index` of `total` starts ('' before
        the first job: nothing to estimate from). Jobs skipped on resume do not count."""
        if self.started is None:
            self.started = time.monotonic()
        if index <= 1:
            return ""
        text = f" {duration(time.monotonic() - self.started)} elapsed"
        if total and self.durations:
            per_job = sum(self.durations) / len(self.durations)
            text += f", ~{duration(per_job * (total - index + 1), rough=True)} left"
        return text

    def after_launching(self, hook: Callable[[], None]) -> None:
        """Call `hook` once the sweeper has launched the last job (or stopped launching)."""
        self._after_launching.append(hook)

    def launching_ended(self) -> None:
        """The sweeper launches no more jobs: run what was registered for then."""
        for hook in self._after_launching:
            try:
                hook()
            except KeyboardInterrupt:  # a stop before a hook deferred stops: noted, the analysis still runs
                if self.stop_noted:  # (a second stop, after the deferral noted one, abandons the analysis)
                    raise
                self.stop()


SWEEP = SweepState()
