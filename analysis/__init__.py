"""The sweep side: traces -> metrics -> tables -> plots -> report.

Reads only the artifact files a sweep leaves on disk; never imports the job side.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

PLOTS_DIR = "plots"
TERMINAL_CONCLUSIONS = 12  # the rest are in the report
OPTIONAL_TABLES = ("claims", "expectations", "fusion", "memory_timeline")  # written only when the sweep has them


def analyse_folder(folder: Path, progress: Callable[[str], None] = print,
                   out: Path | None = None) -> list[tuple[str, str]]:
    """Write summary.csv/.parquet, repeats.csv, steps.csv, timed_samples.csv, kernels.csv, ops.csv,
    crossovers.csv, claims.csv (when the sweep can test the article's claims), memory_timeline.csv
    (when it profiled memory), fusion.csv (when it compiled), plots/ and report.html into a sweep (or
    single-run) folder, or into `out`; return the problems found (job, what). An output that
    cannot be written raises analysis.files.WriteError naming it."""
    from analysis.report.claims import evaluate
    from analysis.report.conclusions import conclude, in_short
    from analysis.top_ops import TOP_OPS_COLUMNS, top_ops
    from analysis.report.expect import EXPECTATIONS_FILE, check_expectations
    from analysis.fusion import FUSION_COLUMNS, fusion_rows
    from analysis.points import noise_lines
    from profsweep.contract import COPY, amount
    from analysis.report.plots import PLOT_NAMES, write_plots
    from analysis.report.page import write_report
    from analysis.tables import MISSING, analyse_sweep, environment_of, frame, frames, write_tables
    from profsweep.contract import ENVIRONMENT_FILE, METRICS_FILE, live_sweep

    folder = Path(folder)
    target = Path(out) if out is not None else folder
    # a sweep still running (not this process's own, at its end): a job record written after this
    # time was not read, and the sweep's own analysis, of every job, is not to be overwritten with this
    started, writer = time.time_ns(), live_sweep(folder)
    watch = writer is not None and _same_folder(target, folder)
    tables = analyse_sweep(folder, progress)
    said_environment = folder / ENVIRONMENT_FILE
    if said_environment.exists() and not isinstance(environment_of(folder), dict):
        progress(f"warning: {said_environment} cannot be read as a JSON object: the report leaves out the machine "
                 "the sweep ran on and its ceilings")
    data = frames(tables)
    claims = evaluate(data["summary"], data["ops"], data["steps"], data["kernels"], data["crossovers"], folder=folder,
                      jobs=tables.jobs)
    checked = check_expectations(tables)
    expectations = frame(checked or [], ["expectation", "job", "measured", "expected", "holds"])
    top = top_ops(tables.points, tables.jobs, tables.ops, tables.kernels)
    data["top_ops"] = frame(top, TOP_OPS_COLUMNS)
    fused = fusion_rows(tables.points, tables.ops, tables.kernels, tables.provenance)
    if fused:
        data["fusion"] = frame(fused, FUSION_COLUMNS)
    extra = {"claims": claims} if len(claims) else {}
    if checked is not None:
        extra[EXPECTATIONS_FILE.removesuffix(".csv")] = expectations
    held = None
    try:
        held = _hold_for_writing(target)  # one analysis writes a folder at a time, each its whole analysis
        if watch and _records_since(folder, started):
            raise NotWritten(f"not written: jobs of {folder} finished while this analysis read it (its sweep is "
                             f"running): the sweep's own analysis at its end writes it from every job, or python -m "
                             f"analysis {folder} run again does")
        begin_writing(target)
        # the records the tables rest on, where they lie beside them (not with --out elsewhere)
        records = [f"{j['job']}/{METRICS_FILE}" for j in tables.jobs] if _same_folder(target, folder) else []
        write_tables(target, {**data, **extra}, records)
        for stem in OPTIONAL_TABLES:  # one an earlier analysis of this folder wrote, that this one does not
            if stem not in data and stem not in extra:
                (target / f"{stem}.csv").unlink(missing_ok=True)
        found = conclude(tables.points, tables.crossovers, tables.jobs, top, claims if len(claims) else None,
                         expectations if checked is not None else None, fused)
        short = in_short(tables.points, tables.crossovers, tables.jobs)
        write_conclusions(target, found)
        plots = write_plots(data["summary"], data["steps"], data["crossovers"], target / PLOTS_DIR,
                            data.get("memory_timeline"))
        for stale in set(PLOT_NAMES) - {p.stem for p in plots}:  # drawn by an earlier analysis, not by this one
            (target / PLOTS_DIR / f"{stale}.png").unlink(missing_ok=True)
        report = write_report(tables, plots, data, claims, expectations if checked is not None else None, out=target,
                              conclusions=found, short=short)
        if out is None:
            point_latest(folder)
        if checked:  # none: the sweep expected nothing of its own (a preset's claims are the article check)
            said = expectations["holds"].value_counts()
            wrong, unsure, na = (int(said.get(k, 0)) for k in ("false", "inconclusive", "n/a"))
            progress(f"expectations: {int(said.get('true', 0))} of {len(checked)} checks hold"
                     + (f", {wrong} do not (the report opens with them)" if wrong else "")
                     + (f", {unsure} inconclusive (their intervals straddle the value)" if unsure else "")
                     + (f", {na} n/a (no such value)" if na else ""))
        points = len(tables.points)
        # a copied job folder is no job; one without a record (not run, or stopped) is said apart, as
        # the sweep's tally counts it with the missing
        jobs = sum(1 for j in tables.jobs if j.get("status") not in (COPY, MISSING))
        missing = sum(1 for j in tables.jobs if j.get("status") == MISSING)
        progress(f"analysis: {amount(jobs, 'job')}" + (f", {amount(points, 'grid point')}" if points != jobs else "")
                 + (f" ({amount(missing, 'job folder')} without a result: not run or not finished)" if missing else "")
                 + f" -> {report}")
        said = [c for c in found if c.topic != "noise"]  # the noise lines come last, as before
        if short:
            progress("in short:")
            for line in short:
                progress(f"  {line}")
        if said:
            progress("conclusions (with their tables and plots in report.html):")
            for c in said[:TERMINAL_CONCLUSIONS]:
                progress(f"  - {c.text}")
            if len(said) > TERMINAL_CONCLUSIONS:
                progress(f"  ... and {len(said) - TERMINAL_CONCLUSIONS} more in the report")
        for line in noise_lines(tables.points):
            progress(line)
        return tables.problems
    finally:
        if held is not None:
            os.close(held)


ANALYSIS_LOCK_FILE = ".profsweep.analysis.lock"  # held while an analysis writes a folder (not the sweep's lock)


class NotWritten(Exception):
    """An analysis of a live sweep that wrote nothing: a job finished while it read the others (its
    view older than the folder's); the message says so and what writes it."""


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def _hold_for_writing(target: Path) -> int | None:
    """An exclusive lock on `target`'s analysis, waited for (another analysis writing it: the
    sweep's own at its end, or one run by hand), so that two never interleave their files; None
    where the folder cannot hold one (read-only: the first write names the problem)."""
    import fcntl

    try:
        target.mkdir(parents=True, exist_ok=True)  # a new --out: its first analysis holds it too
        fd = os.open(target / ANALYSIS_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    return fd


def _records_since(folder: Path, started_ns: int) -> bool:
    """Whether a job record of `folder` was written after `started_ns` (time.time_ns()): a job the
    sweep finished while this analysis read the others; its view is then older than the folder's.
    A job that started meanwhile (its placeholder record, `unfinished`) is no such job."""
    from analysis.tables import METRICS_FILE, job_folders
    from profsweep.contract import UNFINISHED, read_json

    for job in job_folders(folder):
        try:
            if (job / METRICS_FILE).stat().st_mtime_ns <= started_ns:
                continue
            record = read_json(job / METRICS_FILE)
        except (OSError, ValueError):  # gone, or being written: a job ending now
            return True
        if not (isinstance(record, dict) and record.get(UNFINISHED) is True):
            return True
    return False


def begin_writing(target: Path) -> None:
    """Before the first table: take away what an earlier analysis wrote last and what a reader
    would take for the whole of it (report.html, conclusions.json, summary.parquet, which history
    prefers to summary.csv, and its plots), so that an analysis stopped halfway leaves new tables and no report
    of the old ones beside them; tables.sha256, which vouched for the old tables; and the temporary
    files of writes that a stop cut short."""
    from profsweep.contract import CONCLUSIONS_FILE, REPORT_FILE, alive

    from analysis.files import forget_checksums
    from analysis.report.plots import PLOT_NAMES

    try:
        forget_checksums(target)  # the old tables stay until the new ones replace them: no longer vouched for
        for name in (REPORT_FILE, CONCLUSIONS_FILE, "summary.parquet"):
            (target / name).unlink(missing_ok=True)
        for name in PLOT_NAMES:  # the earlier analysis's plots: a stop while drawing left old beside new
            (target / PLOTS_DIR / f"{name}.png").unlink(missing_ok=True)
        for folder in (target, target / PLOTS_DIR):
            for tmp in folder.glob(".*.tmp") if folder.is_dir() else ():
                pid = tmp.name.rsplit(".", 2)[-2]  # .<name>.<pid>.tmp (profsweep.contract.atomic_write_bytes)
                if pid.isdigit() and not alive(int(pid)):
                    tmp.unlink(missing_ok=True)
    except OSError:  # a folder it cannot write to: the first table's write names it
        pass


def write_conclusions(folder: Path, found: list) -> Path:
    """conclusions.json: each conclusion's topic, sentence, detail and the report's anchor that
    shows it (what profsweep.load(...).conclusions reads)."""
    import json

    from analysis.files import atomic_write_text
    from profsweep.contract import CONCLUSIONS_FILE

    path = Path(folder) / CONCLUSIONS_FILE
    atomic_write_text(path, json.dumps([{"topic": c.topic, "text": c.text, "detail": c.detail, "link": c.link}
                                        for c in found], indent=1) + "\n")
    return path


def point_latest(folder: Path) -> None:
    """Make `<outputs>/latest` a relative link to `folder` when it lies under an outputs/ folder,
    and `<outputs>/previous` a link to the sweep `latest` named before: `compare outputs/previous
    outputs/latest` compares the last two sweeps. Only a sweep that started no earlier than the one
    `latest` names (analysis.store.start_time) moves them: re-analysing an older sweep must not turn
    the pair around. One analysis at a time."""
    import fcntl

    from analysis.store import start_time
    from profsweep.contract import SUMMARY_FILE

    folder = folder.resolve()
    outputs = next((p for p in folder.parents if p.name == "outputs"), None)
    if outputs is None:
        return
    link = outputs / "latest"
    try:
        with open(outputs / ".links.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            before = link.resolve() if link.is_symlink() else None
            if before is not None and before != folder and before.is_dir():
                if start_time(folder, folder / SUMMARY_FILE)[0] < start_time(before, before / SUMMARY_FILE)[0]:
                    return
                _link(outputs, "previous", before)
            _link(outputs, "latest", folder)
    except (OSError, RuntimeError):  # convenience links: a read-only outputs/ does not fail the analysis
        pass


def _link(outputs: Path, name: str, folder: Path) -> None:
    """`<outputs>/<name>` -> folder (relative), replaced in one step."""
    tmp = outputs / f".{name}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(folder, outputs), tmp)
    os.replace(tmp, outputs / name)
