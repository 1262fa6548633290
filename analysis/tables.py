"""A sweep (or single-run) folder -> summary.csv/.parquet (one row per grid point), repeats.csv
(one row per job), steps.csv, kernels.csv, ops.csv, crossovers.csv.

Reads only the artifact files: each job's metrics.json and the traces it names.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from analysis import points as grid_points
from profsweep.fit import FIT_COLUMNS, fit_series
from analysis.fusion import kernel_sources
from analysis.peaks import Ceilings
from analysis.trace import PHASES, TraceError, analyse_trace, flat
from profsweep import contract, stats
from profsweep.decide import ABOVE, BELOW, SAME, Decision, current_band, decide
from profsweep.columns import (
    KERNEL_COLUMNS, NUMBER_SUFFIXES, OP_COLUMNS, TEXT_COLUMNS, TEXT_FIELDS, WORKLOAD_PREFIX,
)
from profsweep.contract import (METRICS_FILE, PROVENANCE_FILE, REPEATS_FILE, SCHEMA_VERSION, SUMMARY_FILE, TIMED,
                               TIMED_SAMPLES, GridPoint, Job, table_files, timed_samples, trace_files)

SERIES_KEYS = list(contract.SERIES_KEYS)


@dataclass
class SweepTables:
    """What the sweep's analysis found; plain lists of rows, turned into tables by `write`."""

    folder: Path
    jobs: list[Job] = field(default_factory=list)  # one per job (repeats.csv)
    points: list[GridPoint] = field(default_factory=list)  # one per grid point (summary.csv)
    steps: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    ops: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # job -> its ops, costliest first
    crossovers: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)  # memory over each job's last step (profile_memory)
    provenance: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # job -> kernel -> its source nodes
    ceilings: Ceilings = field(default_factory=lambda: Ceilings("table"))  # environment.json's
    processes: dict[tuple[str, ...], str] = field(default_factory=dict)  # a finished process's marks -> its job
    settings: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> the settings its record says it ran

    @property
    def problems(self) -> list[tuple[str, str]]:
        """(job, what went wrong) for failed jobs and unreadable traces."""

        out = []
        for row in self.jobs:
            if row.get("status") == "skipped":  # left out on purpose (run.unavailable=skip)
                continue
            if row.get("status") == contract.COPY:
                out.append((row["job"], str(row.get("error"))))
                continue
            if row.get("status") != "ok":
                out.append((row["job"], f"{row.get('status')}: {row.get('error') or 'its record says no error'}"))
            elif row.get("trace_error"):
                out.append((row["job"], f"trace: {row['trace_error']}"))
            if row.get("status") == "ok" and row.get("timed_error"):  # its grid point's step time lacks it
                out.append((row["job"], f"no un-profiled timing ({row['timed_error']}): its grid point's step "
                                        "time comes from its other processes; rerun the same command to redo it"))
            if row.get("record_error"):
                out.append((row["job"], f"record: {row['record_error']}"))
        never = never_ran(self.folder, len(self.jobs))
        mixed = more_points_than_planned(self.folder, len(self.points), self.jobs)
        return out + ([("sweep", never)] if never else []) + ([("sweep", mixed)] if mixed else [])


def never_ran(folder: Path, found: int) -> str | None:
    """How many of the jobs the sweep planned (sweep.json's `jobs`) have no folder: a sweep stopped
    before them (Ctrl-C, a kill, a full disk) is not a whole sweep, whatever its jobs say."""
    if contract.live_sweep(Path(folder)) is not None:  # still running: its later jobs are to come (the caller warns)
        return None
    planned = contract.read_plan(folder).get("jobs")
    if isinstance(planned, bool) or not isinstance(planned, int) or planned < 0:
        if (Path(folder) / contract.PLAN_FILE).exists():
            return (f"{Path(folder) / contract.PLAN_FILE} is damaged (not a JSON object with the number of jobs "
                    "planned): whether every planned job ran is unknown")
        return None
    if planned <= found:
        return None
    return (f"{planned - found} of {planned} planned jobs never ran: the sweep was stopped before them; "
            "rerun its command into this folder to finish (jobs already ok are skipped)")


def stopped_before_jobs(folder: Path) -> str | None:
    """Why a folder without a job folder is still a sweep of ours, in words: its sweep.json plans
    jobs and none ran (stopped or killed before its first job, while the ceilings were measured or
    it waited for the device); None otherwise, and while a sweep still writes it."""
    planned = contract.read_plan(folder).get("jobs")
    if isinstance(planned, bool) or not isinstance(planned, int) or planned <= 0 or job_folders(folder):
        return None
    return never_ran(folder, 0)


def more_points_than_planned(folder: Path, found: int, jobs: Sequence[dict[str, Any]] = ()) -> str | None:
    """Where the folder holds more grid points than its sweep planned (sweep.json's
    `grid_points`): jobs measured with other settings share it, left by a rerun into the folder
    with changed settings (profiler.active=2) that did not redo them (stopped before it did, or
    planned fewer repeats: its later repeats' folders stay); their grid points stand apart, each
    with part of the repeats. Names those jobs: of the jobs of one folder name (less its number and
    repeat), the ones of another configuration than the last one finished."""
    if contract.live_sweep(Path(folder)) is not None:
        return None
    planned = contract.read_plan(folder).get("grid_points")
    if isinstance(planned, bool) or not isinstance(planned, int) or planned <= 0 or found <= planned:
        return None
    by_name: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        if job.get("config_hash") and job.get("status") not in (MISSING, contract.COPY):
            stem = _REPEAT_SUFFIX.sub("", str(job.get("job")).split("_", 1)[-1])
            by_name.setdefault(stem, []).append(job)
    others = []
    for same in by_name.values():
        latest = max(same, key=lambda j: str(j.get("finished_at") or ""))["config_hash"]
        others += [str(j["job"]) for j in same if j["config_hash"] != latest]
    named = (f": {', '.join(others[:5])}{f' and {len(others) - 5} more' if len(others) > 5 else ''} were measured "
             "with other settings than the rest of their grid point's" if others else
             ": jobs measured with other settings share it")
    return (f"{found} grid points in this folder where its sweep planned {planned}{named} (a rerun into this folder "
            "with changed settings that did not redo them: stopped before it did, or one that planned fewer "
            "repeats); rerun the last command into this folder to redo them, or remove their folders")


_REPEAT_SUFFIX = re.compile(r"_r\d+$")


def unreadable(folder: Path) -> str | None:
    """Why `folder` cannot be read as a sweep (None when it can): a folder this user may not list
    or enter reads as empty, which would say "not a sweep" or leave its jobs out unsaid."""
    return None if _readable(folder) else f"{folder}: cannot read this folder (permission denied)"


def _readable(folder: Path) -> bool:
    """Whether this user may list and enter `folder`."""
    return os.access(folder, os.R_OK | os.X_OK)


def job_folders(folder: Path) -> list[Path]:
    """The job folders of a sweep folder in job order, or the folder itself for a single run; a
    job's folder this user cannot enter (named as jobs are, `<n>_...`) is one, so that its job is
    named as a problem, not left out."""
    try:
        if (folder / METRICS_FILE).is_file():
            return [folder]
    except OSError:  # cannot look inside: unreadable() says why
        return []
    found = {p.parent for p in folder.glob(f"*/{METRICS_FILE}")}
    found |= {p.parent for p in folder.glob("*/.hydra") if p.is_dir()}  # started, maybe unfinished
    found |= {p for p in folder.glob("[0-9]*_*") if p.is_dir() and p.name.split("_", 1)[0].isdigit()
              and not _readable(p)}

    def order(p: Path) -> tuple[int, str]:
        head = p.name.split("_", 1)[0]
        return (int(head) if head.isdigit() else 1 << 30, p.name)

    return sorted(found, key=order)


def analyse_sweep(folder: Path, progress: Callable[[str], None] | None = None) -> SweepTables:
    folder = Path(folder)
    tables = SweepTables(folder, ceilings=Ceilings.of(environment_of(folder)))
    dirs = job_folders(folder)
    report = progress or (lambda line: None)
    last = time.perf_counter()
    for i, job_dir in enumerate(dirs, 1):
        _add_job(tables, job_dir)
        now = time.perf_counter()
        if len(dirs) > 10 and (now - last > 2 or i == len(dirs)):
            report(f"analysed {i}/{len(dirs)} jobs")
            last = now
    name_variants(tables)
    disagreeing(tables.jobs, tables.settings)
    tables.jobs = [Job(row) for row in tables.jobs]  # complete: from here on read-only
    points = grid_points.points(tables.jobs, tables.steps)
    for point in points:
        if contract.usable(point):
            derive(point, tables.ceilings)
    tables.crossovers = crossovers(points)  # (its model sets each point's regime where it fits)
    tables.points = [GridPoint(point) for point in points]  # complete: from here on read-only
    return tables


def name_variants(tables: SweepTables) -> None:
    """Give every job and step row its `variant`: the workload, plus the workload settings that
    differ between that workload's jobs in this sweep (`bmm batch=1`, `attention backend=flash`)
    or that the job's folder and label name (its `variant_settings`: the settings given on the
    command line or by a preset's grid), so that a sweep over them gives one series each instead
    of one mixed series, named as its progress lines name it."""
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for row in tables.jobs:
        if row.get("workload") is not None:
            by_workload.setdefault(str(row["workload"]), []).append(row)
    for name, rows in by_workload.items():
        keys = sorted({k for row in rows for k in row if k.startswith(WORKLOAD_PREFIX)})
        varying = {k for k in keys if len({repr(row.get(k)) for row in rows}) > 1}
        for row in rows:  # and the settings the job's folder and label name (run.variant_settings)
            named = {WORKLOAD_PREFIX + k for k in str(row.get("variant_settings") or "").split() if k}
            shown = sorted((varying | named) & set(row))
            row["variant"] = " ".join([name] + [f"{k[len(WORKLOAD_PREFIX):]}={row.get(k)}" for k in shown])
    variant_of = {row["job"]: row.get("variant") for row in tables.jobs}
    for step in tables.steps:
        step["variant"] = variant_of.get(step["job"])


# What a metrics.json's fields must be: the analysis reads every record as untrusted input.
FLAG_FIELDS = ("compile", "warmup", "train", "failure_is_final", "compiled_nothing")
COUNT_FIELDS = ("size", "steps", "repeat", "schema_version", "timed_steps", "timed_slow_steps", "side_by_side_steps", "recompiles", "recompile_limit", "torch_threads",
                "cpu_count", "warmup_iters")
LIST_FIELDS = ("timed_samples_us",)
NUMBER_FIELDS = ("other_cpus", "cpu_pressure", "loadavg_1m", "exit_code")
# What a job measured of the machine's load while it ran: one that is there but not a number
# leaves the load unknown, never quiet (LOAD_UNREADABLE names them; helper-59: other_cpus="1.5" made
# a loaded side's 2x a verdict)
LOAD_FIELDS = ("other_cpus", "cpu_pressure", "timed_slow_steps", "timed_steps")
LOAD_UNREADABLE = grid_points.LOAD_UNREADABLE
SIGNED = ("exit_code",)  # the one measured number that may be below 0 (-9: killed by SIGKILL)
MISSING = contract.MISSING  # a job folder without metrics.json: not run, or stopped before it wrote one
# Durations a job measured: never 0 (a clock that read 0 measured nothing).
POSITIVE = (TIMED, "side_by_side_eager_us", "side_by_side_compiled_us", "side_by_side_ratio", "speed_probe_us",
            "speed_probe_before_us", "speed_probe_after_us", "overhead_probe_us", "cache_probe_us", "size")
BIGGEST = 2 ** 62  # a count or a measurement beyond this is not one (and would overflow a float's use)


def _cut(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _shown(value: Any) -> str:
    return _cut(repr(value))


def untrusted(record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A metrics.json record made safe to analyse: each field of the wrong kind is left out (set
    to None) and named; lists and objects where one value belongs become their JSON text (a
    workload setting may be a list); numbers must be finite and below 2**62; a trace or table
    file must be a name in the job's folder. Returns (row, what was wrong)."""
    row: dict[str, Any] = {}
    bad: list[str] = []

    def drop(key: str, why: str) -> None:
        row[key] = None
        bad.append(f"{key}={_shown(record[key])} {why}")
        if key in LOAD_FIELDS:  # the load it ran under is unknown, not none (analysis.points.noise_reasons)
            row[LOAD_UNREADABLE] = ", ".join(filter(None, (row.get(LOAD_UNREADABLE), key)))

    for key, value in record.items():
        key = str(key)
        row[key] = value
        if value is None:
            continue
        if key in LIST_FIELDS:
            if not isinstance(value, list):
                drop(key, "is not a list")
            elif not value:  # no sample in it: as a record that kept only the median
                row[key] = None
            elif len(kept := [x for x in stats.clean(value) if 0 < x <= BIGGEST]) < len(value):
                drop(key, f"holds {len(value) - len(kept)} of {len(value)} values that are not positive numbers "
                     "of a sensible size")
            continue
        if isinstance(value, (list, dict)):
            row[key] = json.dumps(value, sort_keys=True, default=str)[:1000]
            if key in TEXT_FIELDS + FLAG_FIELDS + COUNT_FIELDS:
                drop(key, "is not a single value")
            continue
        if key in FLAG_FIELDS and not isinstance(value, bool):
            drop(key, "is not true or false")
        elif key in COUNT_FIELDS and (isinstance(value, bool) or not isinstance(value, int) or abs(value) > BIGGEST):
            drop(key, "is not an integer of a sensible size")
        elif key in TEXT_FIELDS and not isinstance(value, str):
            drop(key, "is not text")
        elif ((key.endswith(NUMBER_SUFFIXES) or key in NUMBER_FIELDS) and not key.startswith(("workload_", "compile_"))
              and (isinstance(value, bool) or not isinstance(value, (int, float)))):
            drop(key, "is not a number")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and (
                abs(value) > BIGGEST or (isinstance(value, float) and not math.isfinite(value))):
            drop(key, "is not a finite number of a sensible size")
        elif ((key in POSITIVE and isinstance(value, (int, float)) and not value > 0)
              or (isinstance(value, (int, float)) and value < 0 and key not in SIGNED
                  and (key in COUNT_FIELDS or key in NUMBER_FIELDS or key.endswith(NUMBER_SUFFIXES))
                  and not key.startswith(("workload_", "compile_")))):
            drop(key, "is not a positive number" if key in POSITIVE else "is below 0")
        elif isinstance(value, str) and len(value) > 100_000:
            row[key] = value[:100_000]
    for key in ("trace_file", "table_file"):
        names = trace_files(row) if key == "trace_file" else table_files(row)
        if any("/" in n or "\\" in n or n in (".", "..") for n in names):
            row[key] = None
            bad.append(f"{key}={_shown(record[key])} is not a file name in the job's folder")
    if row.get("status") not in (None, "ok", "failed", "skipped", MISSING):
        drop("status", "is not ok, failed or skipped")
    lost = [key for key in grid_points.REQUIRED if row.get(key) is None]
    if row.get("status") == "ok" and lost:
        row["status"], row["config_hash"] = "failed", None  # placed in no grid point
        row["error"] = f"its record has no usable {', '.join(lost)}: what it measured is unknown"
        bad.append(f"no usable {', '.join(lost)}")
    return row, bad


def job_name(job_dir: Path) -> str:
    """The job's name in the tables: its folder's, with bytes that are no UTF-8 text escaped (\\xff)."""
    return job_dir.name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _add_job(tables: SweepTables, job_dir: Path) -> None:
    shown = job_name(job_dir)
    if shown != job_dir.name:  # bytes the file system holds that are no text: no table can name it
        tables.jobs.append({"job": shown, "status": "failed", "trace_error": None,
                            "record_error": f"{tables.folder / shown}: its name is not UTF-8 text: not read",
                            "error": f"{METRICS_FILE} not read: its folder's name is not UTF-8 text"})
        return
    out_of = next((p for p in (job_dir, job_dir / METRICS_FILE) if contract.leads_out(p, tables.folder)), None)
    if out_of is not None:
        tables.jobs.append({"job": job_dir.name, "status": "failed", "trace_error": None,
                            "record_error": f"{out_of} is a link out of the sweep folder: not read",
                            "error": f"{METRICS_FILE} not read: a link out of the sweep folder"})
        return
    if not _readable(job_dir):
        tables.jobs.append({"job": job_dir.name, "status": "failed", "trace_error": None,
                            "record_error": unreadable(job_dir),
                            "error": f"{METRICS_FILE} not read: its folder cannot be read"})
        return
    if not (job_dir / METRICS_FILE).exists():
        tables.jobs.append({"job": job_dir.name, "status": MISSING, "trace_error": None, "record_error": None,
                            "error": f"no {METRICS_FILE}: the job was not run or did not finish"})
        return
    try:
        if not (job_dir / METRICS_FILE).is_file():  # a pipe or a device would block or never end
            raise ValueError("not a regular file")
        record = contract.read_json(job_dir / METRICS_FILE)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:  # (read_json: nested past the parser's depth too)
        tables.jobs.append({"job": job_dir.name, "status": "failed", "trace_error": None,
                            "record_error": f"{job_dir / METRICS_FILE}: unreadable ({exc})",
                            "error": f"unreadable {METRICS_FILE}"})
        return
    row, bad = untrusted(record)
    row["job"] = job_dir.name
    original = _copy_of(tables, row)
    if original is not None:
        tables.jobs.append({"job": job_dir.name, "status": contract.COPY, "trace_error": None, "record_error": None,
                            "config_hash": row.get("config_hash"), "repeat": row.get("repeat"),
                            "error": f"a copy of {original} (the same grid point, started and finished at the same "
                                     "millisecond): one process, counted once"})
        return
    if row.get("status") is None:
        row["status"] = "failed"
    row["trace_error"] = None
    row["record_error"] = (f"{job_dir / METRICS_FILE}: {'; '.join(bad[:5])}{'; ...' if len(bad) > 5 else ''}; "
                           "those fields were left out" if bad else None)
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        said = (f"{job_dir / METRICS_FILE}: schema {_shown(version)} (this analysis reads "
                f"schema {SCHEMA_VERSION}); analysed as far as its fields allow")
        row["record_error"] = f"{row['record_error']}; {said}" if row["record_error"] else said
    checked = version == SCHEMA_VERSION and row["status"] == "ok" and _by_a_job(record)
    lacking = _lacking(record) if checked else []
    if lacking:
        row.update(status="failed", error=(
            f"its record lacks {', '.join(lacking)}, which every ok record of schema {SCHEMA_VERSION} has (edited, or "
            "written by another program): what it measured is unclear, left out"))
    elif checked and (said := _contradicted(row)):
        row.update(status="failed", error=f"{said} (edited by hand?): what it measured is unclear, left out")
    tables.settings[row["job"]] = {k: contract.without_address(json.dumps(v, sort_keys=True, default=repr))
                                   for k, v in row.items() if v is not None and configured(k)}
    if row["status"] == "ok":
        names = trace_files(row)
        try:
            out = next((job_dir / n for n in [*names, *table_files(row)]
                        if contract.leads_out(job_dir / n, tables.folder)), None)
            if out is not None:
                raise TraceError(f"{out} is a link out of the sweep folder: not read")
            row["trace_bytes"] = sum((job_dir / n).stat().st_size for n in names if (job_dir / n).is_file())
            if not names:
                raise TraceError(f"{job_dir / METRICS_FILE}: names no trace file")
            m = analyse_trace([job_dir / n for n in names])
            _add_trace(tables, row, m)
        except TraceError as exc:
            row["trace_error"] = str(exc)
        except Exception as exc:  # one odd job never stops the analysis of the others
            row["trace_error"] = f"{job_dir}: analysis failed ({type(exc).__name__}: {exc})"
        if not row["trace_error"] and not contract.leads_out(job_dir / PROVENANCE_FILE, tables.folder):
            tables.provenance[row["job"]] = kernel_sources(job_dir / PROVENANCE_FILE)
    tables.jobs.append(row)


# What every ok record of this schema holds (the job writes them, a None where a count failed):
# one that bears a job's marks (JOB_MARKS) without them was edited by hand. (A record without the
# marks, made by another program or by hand as the tests make theirs, or by a job of before
# 2026-12-06, which wrote no trace_sizes and not always these fields, is read as far as its fields
# allow: without its un-profiled step, its profiled steps give the step time.)
JOB_MARKS = ("started_at", "finished_at", "torch_version", "trace_sizes")
OK_FIELDS = ("workload", "size", "dtype", "compile", "warmup", "train", "device", "config_hash", "repeat", "steps",
             "self_cpu_total_us", "trace_file")


def _by_a_job(record: dict[str, Any]) -> bool:
    return all(record.get(k) is not None for k in JOB_MARKS)


def _contradicted(row: dict[str, Any]) -> str | None:
    """Where a job's un-profiled step is not the median of its own samples (a job writes it as
    exactly that): the record was edited, and which of the two to believe is unknown."""
    median, samples = stats.number(row.get(TIMED)), row.get(TIMED_SAMPLES)
    if median is None or not samples:
        return None
    of_samples = stats.median(samples)
    # (1%: a job of an earlier version kept order statistics of its steps beside their own median)
    if abs(of_samples - median) <= 0.01 * median:
        return None
    return (f"its {TIMED}={median:g} is not the median of its {TIMED_SAMPLES} ({of_samples:g}), which a job "
            "writes it as")


def _lacking(record: dict[str, Any]) -> list[str]:
    """The fields an ok record of this schema always has that `record` lacks; its un-profiled
    step too, unless `timed_error` says why it has none."""
    lacking = [k for k in OK_FIELDS if k not in record]
    if record.get(TIMED) is None and not record.get("timed_error"):
        lacking.append(TIMED)
    return lacking


RAN_WITH = ("allocator", "device")  # set by the job to what its process ran with, which may not be what was asked


def configured(key: str) -> bool:
    """A record's field that holds a setting as configured, the same in every process of a grid
    point: not what the job found (RAN_WITH), nor a column the trace adds (read before it)."""
    return (key in grid_points.PAIR_KEYS or key.startswith(grid_points.PAIR_PREFIXES)) and key not in RAN_WITH


ABSENT = "(no such setting)"  # what a record that lacks a setting the others have says of it


def disagreeing(jobs: list[dict[str, Any]], settings: dict[str, dict[str, str]]) -> None:
    """Fail the records whose settings are not those of the other processes of their grid point
    (one config_hash: the same settings, by how records are made): one record edited, or a
    stranger's with a hash that is not its own. What such a job measured is unclear; it is named,
    and placed in no grid point (its label would be taken from whichever job came first). The
    settings most of the point's processes agree on stand; with no majority, none does."""
    by_point: dict[str, list[dict[str, Any]]] = {}
    for row in jobs:
        if isinstance(row.get("config_hash"), str) and row.get("status") in ("ok", "failed"):
            by_point.setdefault(row["config_hash"], []).append(row)
    for rows in by_point.values():
        if len(rows) < 2:
            continue
        said = [settings.get(str(r["job"]), {}) for r in rows]
        # among ok records a setting one lacks and the others have (or has and they lack) disagrees
        # too (helper-59: a record without `isolation` took its point out of compare's and history's
        # gate); a failed job's record may have stopped before it wrote them all
        keys = sorted({k for s, r in zip(said, rows) if r.get("status") == "ok" for k in s})
        failing = []  # judged on the records as they were, then failed together
        for row, mine in zip(rows, said):
            others = [theirs for theirs, r in zip(said, rows) if r is not row]
            ok = [theirs for theirs, r in zip(said, rows) if r is not row and r.get("status") == "ok"]
            if row.get("status") == "ok" and ok:
                wrong = {k: mine.get(k, ABSENT) for k in keys
                         if sum(1 for t in ok if t.get(k, ABSENT) != mine.get(k, ABSENT)) * 2 > len(ok)}
            else:
                wrong = {k: v for k, v in mine.items() if sum(1 for t in others if t.get(k, v) != v) * 2 > len(others)}
            if not wrong:
                continue
            k, v = sorted(wrong.items())[0]
            theirs = sorted({_cut(t.get(k, ABSENT)) for t in others if t.get(k, ABSENT) != v})
            failing.append((row, dict(status="failed", config_hash=None, error=(
                f"its record says {k}={_cut(v)} where the other {len(others)} of its grid point's processes say "
                f"{' or '.join(theirs)}" + (f" (and {len(wrong) - 1} more settings)" if len(wrong) > 1 else "")
                + ": what it measured is unclear, left out"))))
        for row, failed in failing:
            row.update(failed)


def _copy_of(tables: SweepTables, row: dict[str, Any]) -> str | None:
    """The job whose record this one repeats (a job folder copied by hand, two sweeps merged): the
    same grid point, started and finished at the same millisecond, with the same un-profiled
    step. One process measured once; as a second repeat it would narrow every interval of its
    grid point for nothing. None for the first of them, and for a record without those marks."""
    if row.get("config_hash") is None or row.get("started_at") is None or row.get("finished_at") is None:
        return None
    marks = tuple(str(row.get(k)) for k in ("config_hash", "started_at", "finished_at", TIMED, "status"))
    if marks in tables.processes:
        return tables.processes[marks]
    tables.processes[marks] = str(row["job"])
    return None


def environment_of(folder: Path) -> Any:
    """The sweep's environment.json (a single run's is in its own folder), or None."""
    try:
        return contract.read_json(folder / contract.ENVIRONMENT_FILE)
    except (OSError, ValueError):
        return None


def _add_trace(tables: SweepTables, row: dict[str, Any], m: dict[str, Any]) -> None:
    for key, value in flat(m).items():
        # The job's own numbers (torch's footer) stay; the trace fills everything else.
        if row.get(key) is None:
            row[key] = value
    values = m["per_step_values"]
    # Every "per step" figure is the median over the job's steps, never a mean.
    row["host_us_per_step"] = stats.median(values["self_cpu_us"])
    row["device_us_per_step"] = stats.median(values["device_us"]) if row.get("self_device_total_us") is not None else None
    row["compute_us_per_step"] = stats.median(values["compute_us"])
    row["overhead_us_per_step"] = stats.median(values["overhead_us"])
    profiled, timed = row.get("step_host_us_median"), stats.number(row.get("timed_us_per_step"))
    row["profiler_overhead_ratio"] = profiled / timed if profiled and timed else None
    row["platform"] = m["platform"]
    row[grid_points.RATIO] = stats.median(grid_points.samples(row, grid_points.RATIO, [
        {k: values[k][i] for k in ("device_us", "self_cpu_us", "compute_us", "overhead_us")}
        for i in range(len(values["self_cpu_us"]))]))
    derive(row, tables.ceilings)

    job = row["job"]
    tables.memory += [{"job": job, "t_us": t, "allocated_bytes": b} for t, b in m.get("memory_timeline") or []]
    for i, name in enumerate(m["step_names"] or ["whole trace"]):
        step = {"job": job, **{k: row.get(k) for k in SERIES_KEYS + ["size", "repeat"]}, "step": i + 1,
                "step_name": name}
        for key in ("host_us", "body_us", "outside_us", "self_cpu_us", "device_us", "compute_us", "overhead_us", "kernels",
                    "launches", "memcpys", "occupancy_queries", "aten_ops", "gpu_busy", "top_kernel_us",
                    *(k for k in values if k.split("_", 1)[0] in PHASES)):
            series = values.get(key) or []
            step[key] = series[i] if i < len(series) else None
        tables.steps.append(step)
    for k in m["kernels"]:
        tables.kernels.append({"job": job, **k})
    tables.ops[job] = m["top_ops"]


def step_time(row: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(value, low, high) of what one step takes: the un-profiled step where it was timed, else
    the profiled step (its host duration, or device time when that is longer)."""
    number = stats.number
    if number(row.get("timed_us_per_step")):
        key = "timed_us_per_step"
    elif (number(row.get("step_device_us_median")) or 0) > (number(row.get("step_host_us_median")) or 0):
        key = "step_device_us_median"
    else:
        key = "step_host_us_median"
    value = number(row.get(key))
    return value, number(row.get(f"{key}_low")) or value, number(row.get(f"{key}_high")) or value


def derive(row: dict[str, Any], ceilings: Ceilings | None = None) -> None:
    """What follows from a job's (or grid point's) medians: achieved FLOP/s and bytes/s with
    their intervals, the ceilings they are held against (this machine's measured ones, else a
    GPU's datasheet peak: `peak_source`) and the fractions of them reached, and the regime by
    measured time: overhead-bound when work / host within a step is below 1, else compute-bound
    (compute- or memory-bound by the roofline's ridge where the ceilings are known), with
    `regime_uncertain` when that ratio's interval holds 1."""
    flops, moved = row.get("flops_per_call"), row.get("bytes_per_call")
    step, low, high = step_time(row)
    for key, amount in (("achieved_flops_per_s", flops), ("achieved_bytes_per_s", moved)):
        row[key] = amount / (step * 1e-6) if amount and step else None
        row[f"{key}_low"] = amount / (high * 1e-6) if amount and high else None
        row[f"{key}_high"] = amount / (low * 1e-6) if amount and low else None
    peak_f, peak_b, source = (ceilings or Ceilings("table")).peak(row)
    row["peak_flops_per_s"], row["peak_bytes_per_s"], row["peak_source"] = peak_f, peak_b, source
    for frac, achieved, peak in (("achieved_flops_frac", "achieved_flops_per_s", peak_f),
                                 ("achieved_bandwidth_frac", "achieved_bytes_per_s", peak_b)):
        for end in ("", "_low", "_high"):
            value = row.get(achieved + end)
            row[frac + end] = value / peak if value and peak else None
    row["fraction_of_peak_flops"] = row["achieved_flops_frac"]  # its name before the measured ceilings
    # only a known device's ridge: an assumed one would make the regime a guess about intensity
    ridge = (ceilings or Ceilings("table")).ridge(row) if peak_f and peak_b else None
    for end, value in zip(("", "_low", "_high"), ridge or (None, None, None)):
        row["ridge_flops_per_byte" + end] = value
    row["arithmetic_intensity"] = flops / moved if flops and moved else None
    ratio = _work_over_host(row, *_curves(row))
    if ratio is None:
        row["regime"], row["regime_uncertain"] = None, None
        return
    low = stats.number(row.get(f"{grid_points.RATIO}_low"))
    high = stats.number(row.get(f"{grid_points.RATIO}_high"))
    if low is None or high is None:  # a job's own row: no interval to decide by, the value says it
        set_regime(row, Decision(SAME, ratio, None, None, 0.0), PROFILED_SPLIT)
        row["regime_uncertain"] = None
        return
    repeats = int(stats.number(row.get("repeats")) or 1)
    # one process: its interval covers its own steps, not what the next process would draw, and the
    # one rule decides nothing from one process (as compare's ratio of one process a side)
    set_regime(row, decide(ratio, low, high, repeats) if repeats >= 2 else decide(ratio, None, None, 1),
               PROFILED_SPLIT)


# Where a grid point's regime comes from (`regime_source`).
FITTED = "fit of the un-profiled steps"  # the series' model (profsweep.fit): b * work / a at its size
PROFILED_SPLIT = "split of the profiled steps"  # work / host within each profiled step (one size, or no fit)


def set_regime(row: dict[str, Any], d: Decision, source: str) -> None:
    """A grid point's regime from the verdict on its work / overhead ratio (profsweep.decide):
    overhead-bound below 1, else compute-bound (or memory-bound by the roofline where the device's
    ridge is known: `ridge_flops_per_byte`); `regime_uncertain` unless the verdict is decided past
    the band; and where the roofline says which, `regime_at_ridge` when the arithmetic intensity
    is within the band of the ridge or its range (the one rule on intensity / ridge): compute- and
    memory-bound are alike within what the ceilings' measurement can tell."""
    flops, moved = stats.number(row.get("flops_per_call")), stats.number(row.get("bytes_per_call"))
    ridge = stats.number(row.get("ridge_flops_per_byte"))
    row["regime_at_ridge"] = None
    if d.ratio is not None and d.ratio < 1:
        row["regime"] = "overhead-bound"
    elif flops is not None and flops >= 0 and moved and ridge:  # the work dominates: the roofline says which
        # limit it meets (no FLOPs at all, an embedding's lookup: memory)
        intensity = flops / moved
        row["regime"] = "compute-bound" if intensity >= ridge else "memory-bound"
        low = stats.number(row.get("ridge_flops_per_byte_low")) or ridge
        high = stats.number(row.get("ridge_flops_per_byte_high")) or ridge
        at_ridge = decide(intensity / ridge, intensity / high, intensity / low, band=d.band or current_band())
        row["regime_at_ridge"] = intensity > 0 and at_ridge.outcome not in (ABOVE, BELOW)
    else:  # the work dominates, judged by measured time as the article does
        row["regime"] = "compute-bound"
    row["regime_uncertain"] = not d.decided or d.outcome == SAME
    row["regime_processes_needed"] = d.processes_needed
    row["regime_source"] = source


def regime_doubt(row: dict[str, Any]) -> str:
    """Why a grid point's regime is uncertain, in words: work / host may be either side of 1
    (`regime_uncertain`), or the intensity lies at the ridge (`regime_at_ridge`)."""
    if contract.flag(row.get("regime_at_ridge")) and not contract.flag(row.get("regime_uncertain")):
        flops, moved = stats.number(row.get("flops_per_call")), stats.number(row.get("bytes_per_call"))
        ridge = stats.number(row.get("ridge_flops_per_byte"))
        low, high = stats.number(row.get("ridge_flops_per_byte_low")), stats.number(row.get("ridge_flops_per_byte_high"))
        if flops and moved and ridge:
            span = f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None and low < high else ""
            return (f"arithmetic intensity {flops / moved:.3g} FLOP/byte is at the roofline's ridge, {ridge:.3g}{span}: "
                    "compute- and memory-bound alike; a size further from it decides")
    return "the interval of work / host holds 1"


def straddles_one(row: dict[str, Any]) -> bool:
    """Whether the interval of a row's work / host ratio holds 1: host or work may be the larger
    (False without an interval)."""
    low = stats.number(row.get(f"{grid_points.RATIO}_low"))
    high = stats.number(row.get(f"{grid_points.RATIO}_high"))
    return low is not None and high is not None and low <= 1 <= high


# --- crossovers --------------------------------------------------------------------------------


def _curves(row: dict[str, Any]) -> tuple[str, str]:
    """(host metric, work metric): host vs device time on a GPU, overhead vs compute on a CPU."""
    if row.get("device_us_per_step") is not None:
        return "host_us_per_step", "device_us_per_step"
    return "overhead_us_per_step", "compute_us_per_step"


def crossovers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per series over size: where work overtakes host, interpolated on log axes, from the grid
    points' medians of work / host within a step; `uncertain` when the interval of that ratio
    holds 1 at either size that brackets it. Also from un-profiled timing
    (`crossover_size_unprofiled`): the host (or overhead) time less what the profiler added to a
    step (profiled minus un-profiled step)."""
    settings = grid_points.series_settings(rows)
    series: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if contract.usable(row) and row.get("host_us_per_step") is not None and row.get("size") is not None:
            series.setdefault(contract.series_key(row, grid_points.settings_text(row, settings)), []).append(row)
    out = []
    for found in series.values():
        found.sort(key=lambda r: r["size"])
        host_key, work_key = _curves(found[0])
        sizes = [r["size"] for r in found]
        host = [r.get(host_key) for r in found]
        work = [r.get(work_key) for r in found]
        ratios = [_work_over_host(r, host_key, work_key) for r in found]
        size, status = crossover(sizes, [1.0] * len(sizes), ratios)
        uncertain = None
        i = crossing(sizes, [1.0] * len(sizes), ratios)
        if size is not None and i is not None:
            uncertain = straddles_one(found[i]) or straddles_one(found[i + 1])
            if uncertain:
                status += " (uncertain: the interval of work / host holds 1 there)"
        added = [_profiler_added(r) for r in found]
        bare = [h - a if h is not None and a is not None else None for h, a in zip(host, added)]
        fit = _fit(found)
        if not found[0].get("warmup"):
            unprofiled, status_unprofiled = None, ("cold series: its profiled steps hold the cold start's "
                                                   "excess; see fit_crossover_size (the un-profiled steps' model)")
        elif all(a is not None for a in added):
            unprofiled, status_unprofiled = crossover(sizes, bare, work)
        else:
            unprofiled, status_unprofiled = None, "no un-profiled timing"
        out.append({
            **{k: found[0].get(k) for k in SERIES_KEYS}, "settings": grid_points.settings_text(found[0], settings),
            "host_metric": host_key, "work_metric": work_key,
            "sizes": ";".join(str(s) for s in sizes),
            "crossover_size": size, "status": status, "uncertain": uncertain,
            "crossover_size_unprofiled": unprofiled, "status_unprofiled": status_unprofiled,
            **(fit.columns() if fit is not None else {}),
        })
    return out


def _fit(rows: list[dict[str, Any]]) -> Any:
    """The series' model (profsweep.fit) over its un-profiled steps and their work: FLOPs, or the
    bytes moved where the roofline calls most of it memory-bound, past the band of its ridge (or
    no FLOPs were counted). Where the model fits, each grid point's regime is the model's
    (`regime_source`); else the profiled steps' split stays."""
    memory = sum(1 for r in rows if r.get("regime") == "memory-bound"  # by the roofline, not at its ridge
                 and not contract.flag(r.get("regime_at_ridge"))) > len(rows) / 2
    kind = "bytes" if memory or not all(stats.number(r.get("flops_per_call")) for r in rows) else "flops"
    key = "bytes_per_call" if kind == "bytes" else "flops_per_call"
    usable = []
    for r in rows:
        value, low, high = step_time(r)
        work = stats.number(r.get(key))
        if value and work and value > 0 and work > 0:
            usable.append((r, value, low, high, work))
    if len(usable) < 2:
        return None
    fit = fit_series([float(r["size"]) for r, *_ in usable], [w for *_, w in usable], [v for _, v, *_ in usable],
                     [lo for _, _, lo, _, _ in usable], [hi for _, _, _, hi, _ in usable],
                     [int(stats.number(r.get("repeats")) or 1) for r, *_ in usable], kind=kind)
    if fit is None:
        return None
    fit = _fixed_floor(fit, sorted((r for r, *_ in usable), key=lambda r: float(r["size"])))
    for (r, *_), d in zip(sorted(usable, key=lambda u: float(u[0]["size"])), fit.ratios):
        r["work_overhead_ratio"], r["work_overhead_ratio_low"], r["work_overhead_ratio_high"] = d.ratio, d.low, d.high
        if fit.fits:
            set_regime(r, d, FITTED)
    return fit


OPS_GROWTH = 2.0  # aten ops per step growing past this across a series: its overhead is no fixed floor


def _fixed_floor(fit: Any, rows: list[dict[str, Any]]) -> Any:
    """The model a + b·work holds the overhead fixed: where the profiled step's aten ops grow with
    size (a Python loop over it: helper-33's model was called compute-bound at 145× by a fit that
    put the loop's overhead into its work), it does not describe the series."""
    ops = [(float(r["size"]), stats.number(r.get("step_aten_ops_median"))) for r in rows]
    ops = [(size, n) for size, n in ops if n]
    if not fit.fits or len(ops) < 2 or ops[-1][1] <= OPS_GROWTH * ops[0][1]:
        return fit
    (s0, n0), (s1, n1) = ops[0], ops[-1]
    return dataclasses.replace(fit, fits=False, check=(
        f"does not fit: the step's aten ops grow with size ({n0:g} at {s0:g} -> {n1:g} at {s1:g}): its overhead "
        "is no fixed floor (a loop over size?)"))


def _work_over_host(row: dict[str, Any], host_key: str, work_key: str) -> float | None:
    """The row's work / host within a step, or of its two medians where it has no such ratio."""
    number = stats.number
    ratio = number(row.get(grid_points.RATIO))
    if ratio is not None:
        return ratio
    host, work = number(row.get(host_key)), number(row.get(work_key))
    return work / host if host and work is not None else None


def _profiler_added(row: dict[str, Any]) -> float | None:
    """What the profiler added to one step: the profiled step's duration less the un-profiled
    one (never below zero); None without un-profiled timing."""
    profiled = stats.number(row.get("step_host_us_median"))
    timed = stats.number(row.get("timed_us_per_step"))
    return max(0.0, profiled - timed) if profiled is not None and timed is not None else None


def crossing(sizes: list[float], host: list[float], work: list[float]) -> int | None:
    """The index i of the pair (sizes[i], sizes[i + 1]) where `work` first overtakes `host`."""
    logs = _log_gaps(sizes, host, work)
    for i, (a, b) in enumerate(zip(logs, logs[1:])):
        if a is not None and b is not None and a[1] < 0 <= b[1]:
            return i
    return None


def _log_gaps(sizes: list[float], host: list[float], work: list[float]) -> list[tuple[float, float] | None]:
    logs: list[tuple[float, float] | None] = []
    for s, h, w in zip(sizes, host, work):
        if s <= 0 or h is None or w is None or h <= 0 or w <= 0:
            logs.append(None)
        else:
            logs.append((math.log(s), math.log(w) - math.log(h)))
    return logs


def crossover(sizes: list[float], host: list[float], work: list[float]) -> tuple[float | None, str]:
    """The size where `work` first overtakes `host`, interpolated linearly in log-log space."""
    if len(sizes) < 2:
        return None, "not reached: one size only"
    logs = []
    for s, h, w in zip(sizes, host, work):
        if s <= 0 or h is None or w is None or h <= 0 or w <= 0:
            logs.append(None)
        else:
            logs.append((math.log(s), math.log(w) - math.log(h)))
    for a, b in zip(logs, logs[1:]):
        if a is None or b is None:
            continue
        (x0, d0), (x1, d1) = a, b
        if d0 < 0 <= d1:
            t = d0 / (d0 - d1)
            size = math.exp(x0 + t * (x1 - x0))
            return size, f"crossed between {math.exp(x0):.0f} and {math.exp(x1):.0f}"
    if all(w is not None and h is not None and w >= h for w, h in zip(work, host)):
        return None, "not reached: work exceeds host at every size"
    return None, "not reached: host exceeds work at every size swept"


# --- writing ------------------------------------------------------------------------------------


INTEGERS = "integer_columns"  # a frame's attrs: its columns of integers that pandas holds as floats (an empty cell)


def frame(rows: list[dict[str, Any]], columns: list[str] | None = None, empty: Sequence[str] = ()) -> Any:
    """A table's rows as a DataFrame that remembers its columns of integers (attrs[INTEGERS]):
    pandas holds one with an empty cell as floats, write_tables writes it as integers. `empty`:
    the columns of a table without rows whose columns come from its rows (a header, not a file
    that nothing reads)."""
    import pandas as pd

    rows = [r if type(r) is dict else dict(r) for r in rows]  # (pandas 2 sorts the columns of other mappings)
    table = pd.DataFrame(rows, columns=columns if columns is not None or rows else list(empty) or None)
    table.attrs[INTEGERS] = [c for c in table.columns if table[c].isna().any() and table[c].notna().any() and all(
        isinstance(v, int) and not isinstance(v, bool) and abs(v) <= 2 ** 53  # exact as a float on the way
        for v in (r.get(c) for r in rows) if v is not None)]
    return table


def frames(tables: SweepTables) -> dict[str, Any]:
    """The tables as DataFrames, keyed by their file stem (summary, repeats, steps, timed_samples,
    kernels, ops, crossovers, memory_timeline). A column of integers stays one where a row has
    none (a failed job's size is written `8`, not `8.0`)."""
    point = ["job", "status", *SERIES_KEYS, "size"]  # the columns of tables without rows: no job finished
    return {
        "summary": frame(tables.points, empty=point),
        "repeats": frame([{k: v for k, v in job.items() if k != grid_points.TIMED_SAMPLES} for job in tables.jobs],
                         empty=point),
        "steps": frame(tables.steps, empty=["job", *SERIES_KEYS, "size", "repeat", "step", "step_name", "host_us"]),
        "timed_samples": frame(samples_rows(tables.jobs), ["job", "sample", "us"]),
        "kernels": frame(tables.kernels, empty=["job", "name", *KERNEL_COLUMNS]),
        "ops": frame([{"job": job, **op} for job, ops in tables.ops.items() for op in ops], ["job", "name", *OP_COLUMNS]),
        "crossovers": frame(tables.crossovers, [
            *SERIES_KEYS, "settings", "host_metric", "work_metric", "sizes", "crossover_size", "status", "uncertain",
            "crossover_size_unprofiled", "status_unprofiled", *FIT_COLUMNS]),
        **({"memory_timeline": frame(tables.memory, ["job", "t_us", "allocated_bytes"])} if tables.memory else {}),
    }


def samples_rows(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """timed_samples.csv: each job's un-profiled steps, one row per step in the order timed (the
    samples of compare's verdicts; repeats.csv holds only their median)."""
    return [{"job": job["job"], "sample": i, "us": us} for job in jobs
            for i, us in enumerate(timed_samples(job) if isinstance(job.get(grid_points.TIMED_SAMPLES), list) else [])]


def read_table(path: Path) -> list[dict[str, Any]]:
    """The rows of a table the analysis wrote, each cell typed as it was written (numbers, flags,
    an empty cell None; the text columns and the settings stay text: a job named 7, a setting "007")."""
    from analysis.files import read_csv_rows

    return read_csv_rows(path, TEXT_COLUMNS, COUNT_FIELDS, grid_points.PAIR_PREFIXES)


def read_points(folder: Path) -> list[GridPoint]:
    """The grid points of an analysed sweep (summary.csv), typed."""
    return [GridPoint(row) for row in read_table(Path(folder) / SUMMARY_FILE)]


def read_jobs(folder: Path) -> list[Job]:
    """The jobs of an analysed sweep (repeats.csv), typed."""
    return [Job(row) for row in read_table(Path(folder) / REPEATS_FILE)]


def _as_written(table: Any) -> Any:
    """The frame with its columns of integers as integers (pandas' Int64: an empty cell stays one)."""
    integers = [c for c in table.attrs.get(INTEGERS, []) if c in table]
    return table.astype({c: "Int64" for c in integers}) if integers else table


def write_tables(folder: Path, tables: dict[str, Any], records: Sequence[str] = ()) -> list[Path]:
    """<stem>.csv for every table, and summary.parquet; atomically; then their checksums and the
    job records' they were made from (`records`, relative to the folder: tables.sha256), which
    tell an edit since."""
    import io

    from analysis.files import atomic_write_bytes, atomic_write_text, forget_checksums, write_checksums

    forget_checksums(folder)
    written = []
    for name, table in tables.items():
        atomic_write_text(folder / f"{name}.csv", _as_written(table).to_csv(index=False))
        written.append(folder / f"{name}.csv")
    summary = _as_written(tables["summary"])  # integers as integers there too (an empty cell stays one)
    if not len(summary.columns):  # no grid point: a parquet file without columns is one nothing reads
        (folder / "summary.parquet").unlink(missing_ok=True)
        write_checksums(folder, written, records)
        return written
    try:
        buffer = io.BytesIO()
        summary.astype({c: "string" for c in summary.columns if summary[c].dtype == object}).to_parquet(buffer, index=False)
        atomic_write_bytes(folder / "summary.parquet", buffer.getvalue())
        written.append(folder / "summary.parquet")
    except ImportError as exc:  # no parquet engine installed: no older one left to be read as this analysis
        (folder / "summary.parquet").unlink(missing_ok=True)
        print(f"warning: summary.parquet not written ({exc})", file=sys.stderr)
    write_checksums(folder, written, records)
    return written
