"""A side of a comparison: one sweep (or run) as its analysis wrote it.

compare reads the tables `python -m analysis SWEEP` wrote (summary.csv, repeats.csv, steps.csv,
ops.csv, kernels.csv, timed_samples.csv), as history does, and opens no trace. Where a sweep has
no analysis, or its analysis is older than its jobs (a job rerun or added since, an analysis by a
profsweep that wrote fewer tables), the sweep is analysed here, in memory, into the same rows: the
folder is never written to, and both routes give the same verdicts (tests/test_compare.py).
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from analysis.files import CHECKSUMS_FILE, edited_tables, named_edits
from analysis.tables import (analyse_sweep, environment_of, job_folders, never_ran, read_table, samples_rows,
                             stopped_before_jobs, unreadable)
from analysis.trace import is_op
from profsweep.contract import METRICS_FILE, TIMED_SAMPLES, GridPoint, Job, amount, live_sweep, not_a_folder

TABLES = ("summary", "repeats", "steps", "ops", "kernels", "timed_samples")  # what compare reads
# What each table's rows must hold for compare to read it: text columns, and numbers at or above 0
# (the un-profiled samples above it). A table edited or cut short otherwise is not read: the sweep
# is analysed from its records and traces instead.
SHAPE = {"summary": (("job", "status"), ()), "repeats": (("job", "status"), ()), "steps": (("job",), ("host_us",)),
         "ops": (("job", "name"), ("calls", "self_host_us")), "kernels": (("job", "name"), ("calls", "total_us")),
         "timed_samples": (("job",), ("us",))}


class CompareError(ValueError):
    """Input that cannot be compared; the message names it (exit 2)."""


@dataclass
class Side:
    folder: Path
    points: list[GridPoint]  # one per grid point (summary.csv's rows) with a usable repeat
    steps: dict[str, list[dict[str, Any]]]  # job -> its step rows
    ops: dict[str, list[tuple[str, float, float]]]  # job -> (op, calls, self host µs) over its trace
    kernels: dict[str, list[tuple[str, float, float]]]  # job -> (kernel, calls, device µs); none on the CPU
    environment: dict[str, Any]
    jobs: dict[str, Job] = field(default_factory=dict)  # job -> its row (repeats.csv), usable ones
    read_from: str = "tables"  # "tables": the written analysis; "traces": analysed here, in memory
    failed: list[GridPoint] = field(default_factory=list)  # the grid points without a usable repeat
    # (job, why, known) of repeats lost by usable grid points; known False: a job without a readable
    # record (no config_hash), whose grid point cannot be told
    lost: list[tuple[str, str, bool]] = field(default_factory=list)
    # (job, what) of usable jobs whose record had fields that could not be read (tables' record_error:
    # timed samples that are no sensible times, say): judged without them
    damaged: list[tuple[str, str]] = field(default_factory=list)
    incomplete: str | None = None  # the sweep stopped before jobs it planned (never_ran's words)
    edited: str | None = None  # its tables were changed since its analysis wrote them: read from its records


def op_uses(ops: Iterable[dict[str, Any]]) -> list[tuple[str, float, float]]:
    return [(o["name"], o["calls"], o["self_host_us"]) for o in ops if is_op(o)]


def kernel_uses(kernels: Iterable[dict[str, Any]]) -> list[tuple[str, float, float]]:
    return [(k["name"], k["calls"], k["total_us"]) for k in kernels]


def load_side(folder: Path) -> Side:
    folder = Path(folder)
    if not folder.is_dir():
        raise CompareError(not_a_folder(folder))
    if unreadable(folder):
        raise CompareError(unreadable(folder))
    edited = edited_tables(folder, [f"{name}.csv" for name in TABLES])
    # (`.` has no name to find in repeats.csv); an edited table is not read: the records say what ran
    rows = None if edited else written_tables(folder.resolve())
    read_from = "tables"
    if rows is None:
        rows, read_from = analysed_tables(folder), "traces"
    samples = _by_job(rows["timed_samples"])
    jobs = [Job(j, **({TIMED_SAMPLES: [s["us"] for s in samples[str(j["job"])]]} if str(j["job"]) in samples else {}))
            for j in rows["repeats"]]
    if not jobs:
        raise CompareError(f"{folder}: {stopped_before_jobs(folder) or 'not a sweep or a run: no job folder with a metrics.json in it'}")
    every = list(map(GridPoint, rows["summary"]))
    points = [p for p in every if p.usable]
    if not every:  # no grid point at all: every record unreadable, or no job ran
        first = next((j for j in jobs if j.get("record_error") or j.get("error")), None)
        why = f"; {first['job']}: {first.get('record_error') or first.get('error')}" if first is not None else ""
        raise CompareError(f"{folder}: no job finished with a readable trace ({amount(len(jobs), 'job')}{why})")
    on_cpu = {str(j["job"]) for j in jobs if j.get("platform") == "cpu"}
    # the CPU's "kernels" are its compute ops, already among the ops
    kernels = _by_job(k for k in rows["kernels"] if str(k["job"]) not in on_cpu)
    environment = as_recorded(environment_of(folder), jobs)
    failed = [p for p in every if not p.usable]
    gone = {p.get("config_hash") for p in failed}
    lost = [(str(j["job"]), str(j.get("error") or j.get("trace_error") or j.get("record_error") or j.get("status")
                                or "failed"), j.get("config_hash") is not None)
            for j in jobs if not j.usable and j.get("config_hash") not in gone]
    return Side(folder, points, _by_job(rows["steps"]), {j: op_uses(o) for j, o in _by_job(rows["ops"]).items()},
                {j: kernel_uses(k) for j, k in kernels.items()}, environment if isinstance(environment, dict) else {},
                {str(j["job"]): j for j in jobs if j.usable}, read_from, failed, lost,
                [(str(j["job"]), str(j["record_error"])) for j in jobs if j.usable and j.get("record_error")],
                never_ran(folder, len(jobs)),
                f"{named_edits(edited)}: not what the analysis wrote ({CHECKSUMS_FILE}): compared from its job "
                "records and traces instead" if edited else None)


def as_recorded(environment: Any, jobs: Sequence[dict[str, Any]]) -> Any:
    """The sweep's environment.json, its torch version as the jobs' records have it where they
    say otherwise: environment.json is written anew when a sweep starts, a resume after an
    upgrade too, so a folder may hold jobs of two torch versions (`mixed: 2.14.0+cpu (6 jobs),
    2.13.0+cpu (12 jobs)`: no other sweep ran that, and the speed probes of its jobs are not one
    thing), or jobs copied in from another; the records say what ran."""
    if not isinstance(environment, dict):
        return environment
    versions = Counter(str(j["torch_version"]) for j in jobs if j.get("torch_version"))
    if not versions or (len(versions) == 1 and str(environment.get("torch_version")) in versions):
        return environment
    ran = (next(iter(versions)) if len(versions) == 1 else
           "mixed: " + ", ".join(f"{v} ({amount(n, 'job')})" for v, n in versions.most_common()))
    return {**environment, "torch_version": ran}


def _by_job(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(str(row["job"]), []).append(row)
    return found


def written_tables(folder: Path) -> dict[str, list[dict[str, Any]]] | None:
    """The rows of the tables the analysis wrote, each cell typed (numbers, flags, text; an empty
    cell None), or None where they cannot stand for the sweep as it is now: a table missing, a
    sweep still being written, a job folder without its row in repeats.csv, a job record
    written after the oldest table (a job rerun, or an analysis cut short after its first
    table), or a job's record gone that repeats.csv says was there."""
    paths = [folder / f"{name}.csv" for name in TABLES]
    if not all(p.is_file() for p in paths) or live_sweep(folder) is not None:
        return None
    dirs = {d.name: d for d in job_folders(folder)}
    try:
        written = min(p.stat().st_mtime_ns for p in paths)
        records = {name: d / METRICS_FILE for name, d in dirs.items()}
        # a record written since (a link's change counts, and a tie on a coarse clock too)
        if any(max(r.lstat().st_mtime_ns, r.stat().st_mtime_ns) >= written for r in records.values() if r.exists()):
            return None
        rows = {name: read_table(path) for name, path in zip(TABLES, paths)}
    except (OSError, ValueError, csv.Error):  # a table cut short or unreadable: analyse the sweep instead
        return None
    if not all(_sound(name, table) for name, table in rows.items()):
        return None
    said = {r.get("job"): r.get("status") for r in rows["repeats"]}
    if set(said) != set(dirs):
        return None
    if any((status == "missing") == records[str(job)].exists() for job, status in said.items()):
        return None  # a record gone since, or one that came (copied with its old time)
    placed = {r.get("config_hash") for r in rows["summary"]}
    if any(r.get("config_hash") is not None and r.get("config_hash") not in placed for r in rows["repeats"]):
        return None  # a job of no grid point in summary.csv: a summary emptied or cut since
    return rows


def _sound(name: str, rows: list[dict[str, Any]]) -> bool:
    """The table's rows have what SHAPE says they hold (its numbers finite)."""
    texts, numbers = SHAPE[name]
    for row in rows:
        if any(row.get(c) is None for c in texts):
            return False
        for c in numbers:
            x = row.get(c)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 \
                    or (name == "timed_samples" and x == 0):
                return False
    return True


def analysed_tables(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The same rows, from the sweep's job records and traces, analysed here and written nowhere."""
    tables = analyse_sweep(folder)
    return {"summary": tables.points, "repeats": tables.jobs, "steps": tables.steps,
            "ops": [{"job": job, **op} for job, ops in tables.ops.items() for op in ops],
            "kernels": tables.kernels, "timed_samples": samples_rows(tables.jobs)}
