"""The artifact contract: what the job side writes and the analysis reads, declared once.

Both sides (experiments/, analysis/) and the grid sweeper import this module and nothing of each
other for it: the files a sweep leaves, the schema of metrics.json, how they are written (atomic,
fsync'd), the keys that make a series and the predicate of a usable job.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Any

# --- the files ------------------------------------------------------------------------------------
METRICS_FILE = "metrics.json"  # a job's record (one per job folder)
PLAN_FILE = "sweep.json"  # a sweep's plan: jobs, grid points, repeats, axes, rounds, command
ENVIRONMENT_FILE = "environment.json"  # a sweep's machine and software
SUMMARY_FILE = "summary.csv"  # the analysis: one row per grid point
CONCLUSIONS_FILE = "conclusions.json"  # the analysis: its conclusions in words (what the report opens with)
REPORT_FILE = "report.html"  # the analysis: the report
COMPARE_FILE = "compare.json"  # compare's: where the two sides' traces are (what `serve` maps)
COMPARE_PAGE = "compare.html"  # compare's page
SERVED_BASE, SERVED_NEW = "_base", "_new"  # the URL folders the server maps to BASE and NEW
SWEEP_LOCK_FILE = ".profsweep.lock"  # in a sweep folder: held (flock) by the live sweep, naming its pid
SCHEMA_VERSION = 1  # of metrics.json

# --- the record -----------------------------------------------------------------------------------
TIMED = "timed_us_per_step"  # a job's un-profiled median step (metrics.json) ...
TIMED_SAMPLES = "timed_samples_us"  # ... and its samples
FINAL = "failure_is_final"  # a failed record's flag: no other process of its grid point can change it
# A series: the grid points that differ only in size (crossovers, plots, conclusions).
SERIES_KEYS = ("workload", "variant", "dtype", "compile", "warmup", "train", "device")


def flag(value: Any) -> bool:
    """A flag of the artifacts, as written or read back from a CSV cell or JSON: True, "True",
    "true", 1, "1" (numpy's True too); anything else (False, None, NaN, text) is not set."""
    return str(value).strip().lower() in ("true", "1", "1.0")


def _given(value: Any) -> bool:
    return value is not None and value == value and value != ""  # NaN is not equal to itself


def amount(n: Any, noun: str) -> str:
    """`1 job`, `18 jobs`, `1 process`, `2 grid points`: a count and its noun, singular for one
    (both sides' lines and pages say counts this way)."""
    plural = noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")
    return f"{n:,}" + f" {noun if n == 1 else plural}" if isinstance(n, int) else f"{n} {plural}"


def point_label(row: Any, without: Any = ()) -> str:
    """`matmul_add size=64 bf16 cold eager`: a grid point in words, the one format of the progress
    lines, the sweep's last lines, the report, compare and history. Its variant (the workload and
    the settings the sweep names), size, dtype, cold or warm, eager or compile, `train` (with its
    optimizer where the row has one) for a training step, `on cuda` off the CPU; each where the row
    has it, and none of the keys in `without` (compare --ignore compile: both are in the pair)."""
    get = row.get
    words = [str(get("variant") or get("workload") or get("job") or "?")]
    size = get("size")
    if _given(size) and "size" not in without:
        words.append(f"size={int(size) if isinstance(size, float) and size.is_integer() else size}")
    if _given(get("dtype")) and "dtype" not in without:
        words.append(str(get("dtype")))
    for key, yes, no in (("warmup", "warm", "cold"), ("compile", "compile", "eager")):
        if _given(get(key)) and key not in without:
            words.append(yes if flag(get(key)) else no)
    if flag(get("train")) and "train" not in without:
        words.append(" ".join(["train", *([str(get("optimizer"))] if _given(get("optimizer")) else [])]))
    device = get("device")
    if isinstance(device, str) and device not in ("", "cpu", "auto") and "device" not in without:
        words.append(f"on {device}")
    return " ".join(words)


def usable(row: dict[str, Any]) -> bool:
    """A job (or grid point) whose figures can be used: it finished ok and its trace was read."""
    return row.get("status") == "ok" and not row.get("trace_error")


def usable_rows(frame: Any) -> Any:
    """The rows of a table (a pandas DataFrame of jobs or grid points) that `usable` keeps."""
    if "status" not in frame:
        return frame.iloc[0:0]
    ok = frame["status"] == "ok"
    return frame[ok & frame["trace_error"].isna()] if "trace_error" in frame else frame[ok]


def usable_sql(columns: Any, alias: str = "") -> str:
    """`usable` as a SQL predicate over a table with these `columns` (`alias.` before each)."""
    if "status" not in columns:
        return "false"
    said = f"{alias}.status = 'ok'" if alias else "status = 'ok'"
    return said + (f" AND {alias + '.' if alias else ''}trace_error IS NULL" if "trace_error" in columns else "")


def _names(found: Any) -> list[str]:
    """A list of names, from a list or the `a;b` text that metrics.json and the CSV tables hold."""
    if isinstance(found, (list, tuple)):
        return [str(n) for n in found if n]
    if found is None or (isinstance(found, float) and found != found):  # None, or a CSV's empty cell
        return []
    return [n for n in str(found).split(";") if n]


def trace_files(record: dict[str, Any]) -> list[str]:
    """A record's trace files, one per profiler cycle."""
    return _names(record.get("trace_file"))


def table_files(record: dict[str, Any]) -> list[str]:
    """A record's profiler tables, one per profiler cycle."""
    return _names(record.get("table_file"))


def leads_out(path: Path, root: Path) -> bool:
    """Whether `path`, links followed, lies outside `root` (a sweep folder, or a single run's):
    a sweep folder is shared, served and ingested, and nothing outside it is read through it."""
    try:
        target, top = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError):  # a loop of links
        return True
    return target != top and top not in target.parents


def point_jobs(point: dict[str, Any]) -> list[str]:
    """The jobs (repeats) of a grid point's summary row, or the one job of a record."""
    return _names(point.get("jobs")) or _names(point.get("job"))


# --- writing ------------------------------------------------------------------------------------


def disk_full(exc: BaseException) -> bool:
    """A write that failed for lack of space (or of quota)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync it, then rename: a reader never sees half a
    file, and a crash right after leaves the whole file or the old one."""
    path = Path(path)
    # Named before anything is created, so an interrupt at any point can still remove it.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only folder refuses even to unlink what is not there
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


# --- reading --------------------------------------------------------------------------------------


def timed_samples(record: dict) -> list[float]:
    """A job record's un-profiled steps (its median alone where it keeps no list of them)."""
    from profsweep.stats import clean

    found = record.get(TIMED_SAMPLES)
    return clean(found if isinstance(found, list) else [record.get(TIMED)])


def live_sweep(folder: Path) -> int | None:
    """The pid of another process's sweep that is still writing `folder` (it holds the folder's
    lock), or None: no lock file, nobody holds it, or this process holds it."""
    path = Path(folder) / SWEEP_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).decode("ascii", errors="replace").strip()
        pid = int(text) if text.isdigit() else None
        if pid == os.getpid():
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return pid or -1
        return None
    finally:
        os.close(fd)
