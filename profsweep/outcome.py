"""How the end of a run went, within the one process that runs Hydra's callbacks: the analysis
callback notes what it could not write, the sweep's tally turns it into the exit status (both
sides import this, neither imports the other)."""

from __future__ import annotations

analysis_failed: list[str] = []  # why the analysis at the end of the run was not written
interrupted = False  # the analysis itself was stopped (Ctrl-C, SIGTERM)
