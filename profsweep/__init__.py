"""What the job side, the grid sweeper and the analysis share, none importing another: the artifact
contract, statistics of repeated measurements, the one decision rule, and (within a sweep's
process) the sweep's state and its progress lines.

It is also profsweep's Python API (analysis.api, imported only when used: the job side, which
imports this package, never loads the analysis):

    import profsweep
    sweep = profsweep.load("outputs/multirun/2026-12-04/10-00-00")
    sweep.summary, sweep.conclusions, sweep.figure("crossover"), sweep.compare(other).table
    profsweep.history([...]).changes
    profsweep.run(["size=64,1024", "compile=true,false"])
"""

from __future__ import annotations

from typing import Any


def load(folder: Any, analyse: bool = True) -> Any:
    """The sweep in `folder` (analysis.api.Sweep), analysed first if it is not yet."""
    from analysis.api import load as _load

    return _load(folder, analyse=analyse)


def history(folders: Any, out: Any = None, ignore: Any = (), band: Any = None) -> Any:
    """The history of these sweep folders (analysis.api.History: .changes, .trends)."""
    from analysis.api import history as _history

    return _history(folders, out=out, ignore=ignore, band=band)


def run(overrides: Any, sweep_dir: Any = None, progress: Any = print) -> Any:
    """Run a sweep in a subprocess, showing its progress, and return it (analysis.api.Sweep)."""
    from analysis.api import run as _run

    return _run(overrides, sweep_dir=sweep_dir, progress=progress)
