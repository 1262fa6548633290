"""profsweep in Python, for notebooks: a sweep folder as DataFrames, figures and sentences.

    import profsweep
    sweep = profsweep.load("outputs/multirun/2026-12-04/10-00-00")   # analysed first if need be
    sweep.summary            # one row per grid point (summary.csv)
    sweep.conclusions        # the report's sentences
    sweep.figure("crossover")                       # a matplotlib Figure
    sweep.compare(profsweep.load(other)).table      # compare's pairs, with their verdicts
    profsweep.history([folder_a, folder_b, ...]).changes
    profsweep.run(["size=64,1024", "compile=true,false"])   # a sweep in a subprocess -> Sweep

Everything here reads the files a sweep and its analysis leave (profsweep.contract): nothing of
the job side is imported, and a notebook's kernel never imports torch through it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from profsweep.columns import TEXT_COLUMNS
from profsweep.contract import CONCLUSIONS_FILE, REPEATS_FILE, REPORT_FILE, SUMMARY_FILE, amount, not_a_folder, read_json

ROOT = Path(__file__).resolve().parent.parent
TABLES = {"summary": SUMMARY_FILE, "repeats": REPEATS_FILE, "steps": "steps.csv", "ops": "ops.csv",
          "top_ops": "top_ops.csv", "kernels": "kernels.csv", "crossovers": "crossovers.csv", "claims": "claims.csv",
          "memory_timeline": "memory_timeline.csv", "fusion": "fusion.csv"}


class ProfsweepError(ValueError):
    """A folder or argument the API cannot use; the message names it."""


@dataclass
class Sweep:
    """An analysed sweep (or single run) folder. Tables are read when first used."""

    folder: Path
    _tables: dict[str, Any] = field(default_factory=dict, repr=False)

    def table(self, name: str) -> Any:
        """One of the analysis's tables as a DataFrame (empty where the sweep has none)."""
        import pandas as pd


        if name not in TABLES:
            raise ProfsweepError(f"table {name!r} is not one of the analysis's: choose one of {', '.join(TABLES)}")
        if name not in self._tables:
            path = self.folder / TABLES[name]
            try:
                found = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS})  # a job named 7 is "7"
            except (FileNotFoundError, pd.errors.EmptyDataError):  # none, or no row and no header (no job had any)
                found = pd.DataFrame()
            except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:  # helper-59: a bare PermissionError
                raise ProfsweepError(f"{path}: unreadable ({getattr(exc, 'strerror', None) or exc}); python -m "
                                     f"analysis {self.folder} writes it again") from None
            self._tables[name] = found
        return self._tables[name]

    @property
    def summary(self) -> Any:
        return self.table("summary")

    @property
    def points(self) -> list[Any]:
        """The grid points (summary.csv's rows) as profsweep.contract.GridPoint: typed, read-only,
        each with its `usable`, `label()`, `identity(columns)` and `series_key(settings)`."""
        from analysis.tables import read_points

        return read_points(self.folder) if (self.folder / SUMMARY_FILE).is_file() else []

    @property
    def jobs(self) -> list[Any]:
        """The jobs (repeats.csv's rows) as profsweep.contract.Job, typed and read-only."""
        from analysis.tables import read_jobs

        return read_jobs(self.folder) if (self.folder / TABLES["repeats"]).is_file() else []

    @property
    def repeats(self) -> Any:
        return self.table("repeats")

    @property
    def ops(self) -> Any:
        return self.table("ops")

    @property
    def top_ops(self) -> Any:
        return self.table("top_ops")

    @property
    def crossovers(self) -> Any:
        return self.table("crossovers")

    @property
    def conclusions(self) -> list[str]:
        """The report's conclusions, one sentence each, most telling first."""
        path = self.folder / CONCLUSIONS_FILE
        if not path.is_file():
            return []
        again = f"python -m analysis {self.folder} writes it again"
        try:
            found = read_json(path)
        except (OSError, ValueError) as exc:
            raise ProfsweepError(f"{path}: unreadable ({exc}); {again}") from None
        if not isinstance(found, list) or not all(isinstance(c, dict) and isinstance(c.get("text"), str) for c in found):
            raise ProfsweepError(f"{path} is not the report's conclusions (a list of objects with a text each); {again}")
        return [c["text"] for c in found]

    def figure(self, name: str) -> Any:
        """One of the report's plots (crossover, launches, steps, kernels, throughput, memory, roofline, ...)
        drawn afresh as a matplotlib Figure from the tables."""
        from analysis.report.plots import draw_figures

        if not any(p.usable for p in self.points):
            jobs = self.jobs
            raise ProfsweepError(f"no figure: no job of {self.folder} finished with a readable trace "
                                 f"({amount(len(jobs), 'job')}, {sum(1 for j in jobs if j.get('status') != 'ok')} "
                                 "failed: repeats.csv and report.html say why)")
        memory = self.table("memory_timeline")
        drawn = draw_figures(self.summary, self.table("steps"), self.crossovers, memory if len(memory) else None)
        if name not in drawn:
            raise ProfsweepError(f"figure {name!r} is not one this sweep draws: choose one of {', '.join(drawn)}")
        import matplotlib.pyplot as plt

        for figure in drawn.values():  # none left in pyplot's registry (20 open figures warn); the Figure still draws
            plt.close(figure)
        return drawn[name]

    def compare(self, other: "Sweep | str | Path", ignore: Sequence[str] = (), band: float | None = None
                ) -> "Comparison":
        """This sweep as BASE against `other` as NEW, grid point by grid point (compare's verdicts;
        `band`: what counts as the same, ±5% by default, as compare's --band)."""
        from analysis.compare.engine import compare_sides
        from analysis.compare.side import CompareError, load_side

        band = _band(band)
        new = other if isinstance(other, Sweep) else load(other)
        try:
            result = compare_sides(load_side(self.folder), load_side(new.folder), _keys(ignore), band=band)
        except (CompareError, OSError) as exc:
            raise ProfsweepError(str(exc)) from None
        return Comparison(self, new, result)

    def _repr_html_(self) -> str:
        """In Jupyter: the conclusions, and the crossover plot where the analysis drew one."""
        import base64
        from html import escape

        try:
            said = self.conclusions[:12]
        except ProfsweepError as exc:
            said = [str(exc)]
        parts = [f"<h3>profsweep: {escape(str(self.folder))}</h3><ul>"
                 + "".join(f"<li>{escape(c)}</li>" for c in said) + "</ul>"]
        plot = self.folder / "plots" / "crossover.png"
        if plot.is_file():
            data = base64.b64encode(plot.read_bytes()).decode("ascii")
            parts.append(f"<img src='data:image/png;base64,{data}' style='max-width:640px'>")
        return "\n".join(parts)


@dataclass
class Comparison:
    """Two sweeps compared: `table` one row per pair of grid points, `verdicts` their counts,
    `failed` the grid points measured on one side that failed on the other (no pair, no verdict:
    compare's gate fails on one that failed in NEW), `unmatched` those the other side has not."""

    base: Sweep
    new: Sweep
    result: dict[str, Any] = field(repr=False)

    @property
    def table(self) -> Any:
        import pandas as pd

        drop = ("ops_diff", "kernels_diff")
        return pd.DataFrame([{k: v for k, v in p.items() if k not in drop} for p in self.result["pairs"]])

    @property
    def failed(self) -> Any:
        """side (the one where it failed), measured_job, failed_job, error: one row each."""
        import pandas as pd

        rows = [{"side": side, **f} for side, key in (("NEW", "failed_new"), ("BASE", "failed_base"))
                for f in self.result.get(key, [])]
        return pd.DataFrame(rows, columns=["side", "measured_job", "failed_job", "error"])

    @property
    def shift(self) -> str | None:
        """What compare says when every pair moved one way by one factor (drift of the machine
        between the sweeps, or a change that moves every point alike), else None."""
        return self.result.get("grid_shift")

    @property
    def unmatched(self) -> dict[str, list[str]]:
        """{"BASE": jobs measured in BASE only, "NEW": jobs measured in NEW only}."""
        return {"BASE": list(self.result.get("unmatched_base", [])), "NEW": list(self.result.get("unmatched_new", []))}

    @property
    def not_judged(self) -> Any:
        """side, job, judged_job, why: a second grid point of a side that pairs as another of it
        does (jobs of other settings left in its folder by a rerun), not judged; compare's gate
        fails on NEW's."""
        import pandas as pd

        rows = [{"side": side, **t} for side, key in (("BASE", "twice_base"), ("NEW", "twice_new"))
                for t in self.result.get(key, [])]
        return pd.DataFrame(rows, columns=["side", "job", "judged_job", "why"])

    @property
    def incomplete(self) -> dict[str, str | None]:
        """{"BASE": ..., "NEW": ...}: why a side is not a whole sweep (stopped before jobs it
        planned), or None; compare's gate fails on NEW's."""
        return {"BASE": self.result.get("incomplete_base"), "NEW": self.result.get("incomplete_new")}

    @property
    def verdicts(self) -> dict[str, int]:
        counts = {v: 0 for v in ("slower", "faster", "same", "inconclusive")}
        for p in self.result["pairs"]:
            counts[p["verdict"]] = counts.get(p["verdict"], 0) + 1
        return counts


@dataclass
class History:
    """Many sweeps over time: `changes` (regressions.csv) and `trends` (trends.csv) as DataFrames."""

    folder: Path
    changes: Any
    trends: Any


def load(folder: str | Path, analyse: bool = True) -> Sweep:
    """The sweep (or single run) in `folder`; analysed now when it has no summary.csv yet, or its
    analysis is older than some of its job records (a sweep resumed or rerun since: a stop before
    its analysis left the old one), as `python -m analysis FOLDER` would; with `analyse=False`,
    or while a sweep still writes it, the written analysis with a warning that says so."""
    path = Path(folder)
    if not path.is_dir():
        raise ProfsweepError(f"{not_a_folder(path)} (give a sweep folder, e.g. outputs/multirun/<date>/<time>)")
    from analysis.tables import unreadable

    if unreadable(path):
        raise ProfsweepError(str(unreadable(path)))
    if not (path / SUMMARY_FILE).is_file() or not (path / CONCLUSIONS_FILE).is_file():
        if not analyse:
            missing = " or ".join(name for name in (SUMMARY_FILE, CONCLUSIONS_FILE) if not (path / name).is_file())
            whole = "not analysed yet" if not (path / SUMMARY_FILE).is_file() else "its analysis did not finish"
            raise ProfsweepError(f"{path}: {whole} (no {missing}): load(folder, analyse=True)")
        from analysis import NotWritten, analyse_folder
        from analysis.tables import METRICS_FILE, job_folders, stopped_before_jobs

        from profsweep.contract import foreign

        if not job_folders(path) and not stopped_before_jobs(path):
            raise ProfsweepError(f"{path}: not a sweep or a run: no job folder with a {METRICS_FILE} in it")
        wrong = foreign(path)
        if wrong is not None:
            raise ProfsweepError(f"{path} {wrong}")
        try:
            analyse_folder(path, progress=lambda line: None)
        except NotWritten as exc:
            raise ProfsweepError(str(exc)) from None
        return Sweep(path)
    from analysis.store import newer_records, older_than_records
    from profsweep.contract import live_sweep

    import warnings

    from analysis.files import edited_tables, named_edits
    from analysis.tables import METRICS_FILE, job_folders

    newer, _ = newer_records(path)
    # tables edited since, or copied in with their checksums from another sweep (helper-59)
    edited = [] if newer else edited_tables(path, [*TABLES.values(), "summary.parquet"])
    if not newer and not edited:
        return Sweep(path)
    kept = any((job / METRICS_FILE).is_file() for job in job_folders(path))
    why = "; load(folder, analyse=True) analyses it anew" if not analyse else \
        "; a sweep still writes it" if live_sweep(path) is not None else \
        "; it keeps no job records to analyse anew from (an archive of its tables)" if not kept else ""
    named = named_edits(edited)
    if not why:
        from analysis import NotWritten, analyse_folder

        try:
            analyse_folder(path, progress=lambda line: None)
            if edited:  # said, though analysed anew: the tables as they were are replaced (helper-60)
                warnings.warn(f"{path}: its tables were not those its analysis wrote from its job records ({named} "
                              "changed since, tables.sha256): analysed anew from its job records", stacklevel=2)
            return Sweep(path)
        except OSError as exc:  # a folder this user may read but not write (an archive, another's sweep)
            why = f"; it cannot be analysed anew here ({exc})"
        except NotWritten as exc:  # (a sweep that started writing it since)
            why = f"; {exc}"
    said = (f"{older_than_records(path, newer)}: these are the tables written before them" if newer else
            f"{path}: its tables are not those its analysis wrote from its job records ({named} changed since, "
            "tables.sha256): these are the tables as they are")
    warnings.warn(f"{said}{why}", stacklevel=2)
    return Sweep(path)


class _Tee:
    """A text stream that writes to two: the terminal as it comes, and a buffer to read after."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def _keys(ignore: Sequence[str]) -> list[str]:
    """`ignore` as a list of keys; a plain string is refused (it would be read letter by letter)."""
    if isinstance(ignore, str):
        raise ProfsweepError(f"ignore={ignore!r}: give a list of keys, e.g. [{ignore!r}]")
    from analysis.points import distinct_keys

    return distinct_keys([str(k) for k in ignore])


def _band(band: float | None) -> float | None:
    """`band` checked (profsweep.decide), or ProfsweepError naming it; None: the default."""
    from profsweep.decide import check_band

    try:
        return None if band is None else check_band(band)
    except ValueError as exc:
        raise ProfsweepError(str(exc)) from None


def history(folders: Sequence[str | Path], out: str | Path | None = None, ignore: Sequence[str] = (),
            band: float | None = None) -> History:
    """The history of these sweeps (python -m analysis history), its tables read back (`band`:
    what counts as a change, ±5% by default, as history's --band)."""
    import pandas as pd

    import contextlib
    import io

    from analysis.__main__ import history_main

    if isinstance(folders, (str, Path)) or not folders:
        raise ProfsweepError(f"folders={folders!r}: give a list of sweep folders (or folders of them), "
                             "e.g. ['outputs/multirun/2026-12-06']")
    ignore, band = _keys(ignore), _band(band)
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="profsweep-history-"))
    args = [str(f) for f in folders] + ["--out", str(out)] + [a for key in ignore for a in ("--ignore", key)]
    args += ["--band", repr(band)] if band is not None else []
    said = io.StringIO()
    with contextlib.redirect_stderr(_Tee(sys.stderr, said)):  # its warnings and progress as they come, kept too
        code = history_main(args)
    lines = said.getvalue().splitlines()
    if code != 0:
        error = next((line[len("error: "):] for line in lines if line.startswith("error: ")), f"exit {code}")
        raise ProfsweepError(f"history refused {', '.join(str(f) for f in folders)}: {error}")
    read = {name: pd.read_csv(out / f"{name}.csv") if (out / f"{name}.csv").is_file() else pd.DataFrame()
            for name in ("regressions", "trends")}
    return History(out, read["regressions"], read["trends"])


def run(overrides: Sequence[str], sweep_dir: str | Path | None = None,
        progress: Callable[[str], None] | None = print) -> Sweep:
    """Run a sweep (`python experiments/run.py -m OVERRIDES`) in a subprocess, its progress lines
    passed to `progress` as they come, and return it loaded. The sweep folder is `sweep_dir`, else
    a new one under outputs/ (Hydra's default). A sweep refused before any job raises."""
    if isinstance(overrides, str):
        raise ProfsweepError(f"overrides={overrides!r}: give a list, e.g. ['size=64,1024', 'compile=true,false']")
    folder = Path(sweep_dir) if sweep_dir is not None else None
    args = [sys.executable, str(ROOT / "experiments" / "run.py"), "-m", *overrides]
    if folder is not None:
        args.append(f"hydra.sweep.dir={folder.resolve()}")
    said: list[str] = []
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line.rstrip("\n"))
            if progress is not None:
                progress(said[-1])
        code = proc.wait()
    if folder is None:
        folder = _folder_said(said)
    if code == 2 or folder is None or not folder.is_dir():
        raise ProfsweepError("the sweep did not run: " + (next((s for s in said if s.startswith("error:")), None)
                                                          or f"exit {code}"))
    return Sweep(folder) if (folder / SUMMARY_FILE).is_file() else load(folder)


def _folder_said(lines: list[str]) -> Path | None:
    """The sweep folder from the tally (`done: 4 jobs (...) in FOLDER`) or the analysis line."""
    for line in reversed(lines):
        if line.startswith("done: ") and " in " in line:
            return Path(line.rsplit(" in ", 1)[1].strip())
        if line.startswith("analysis: ") and f"/{REPORT_FILE}" in line:
            return Path(line.rsplit(" -> ", 1)[1].strip()).parent
    return None
