"""The artifact contract: what the job side writes and the analysis reads, declared once.

Both sides (experiments/, analysis/) and the grid sweeper import this module and nothing of each
other for it: the files a sweep leaves, the schema of metrics.json, how they are written (atomic,
fsync'd), the keys that make a series and the predicate of a usable job.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import operator
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# --- the files ------------------------------------------------------------------------------------
METRICS_FILE = "metrics.json"  # a job's record (one per job folder)
PLAN_FILE = "sweep.json"  # a sweep's plan: jobs, grid points, repeats, axes, rounds, command
ENVIRONMENT_FILE = "environment.json"  # a sweep's machine and software
SUMMARY_FILE = "summary.csv"  # the analysis: one row per grid point
REPEATS_FILE = "repeats.csv"  # the analysis: one row per job
CONCLUSIONS_FILE = "conclusions.json"  # the analysis: its conclusions in words (what the report opens with)
REPORT_FILE = "report.html"  # the analysis: the report
PROVENANCE_FILE = "provenance.json"  # a compiled job's: what each kernel Inductor generated was made from
COMPARE_FILE = "compare.json"  # compare's: where the two sides' traces are (what `serve` maps)
COMPARE_PAGE = "compare.html"  # compare's page
SERVED_BASE, SERVED_NEW = "_base", "_new"  # the URL folders the server maps to BASE and NEW
SWEEP_LOCK_FILE = ".profsweep.lock"  # in a sweep folder: held (flock) by the live sweep, naming its pid
SCHEMA_VERSION = 1  # of metrics.json

# --- the record -----------------------------------------------------------------------------------
TIMED = "timed_us_per_step"  # a job's un-profiled median step (metrics.json) ...
TIMED_SAMPLES = "timed_samples_us"  # ... and its samples
# A compiled job's step and the same step eager, timed in turn in one process (their medians)
SIDE_EAGER, SIDE_COMPILED = "side_by_side_eager_us", "side_by_side_compiled_us"
SIDE_RATIO = "side_by_side_ratio"  # the median over its pairs of blocks of compiled over eager (experiments.job)


def side_pair(record: dict[str, Any]) -> tuple[float, float] | None:
    """A compiled job's steps eager and compiled timed in turn, as its verdict rests on them: its
    eager median, and that times its pairs' ratio (SIDE_RATIO) where it has one, else its compiled
    median (a record from before the ratio); None without both."""
    def positive(key: str) -> float | None:
        value = record.get(key)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        return float(value) if ok else None

    eager, compiled, ratio = positive(SIDE_EAGER), positive(SIDE_COMPILED), positive(SIDE_RATIO)
    if eager is None or compiled is None:
        return None
    return eager, eager * ratio if ratio is not None else compiled
# A job's record from before it starts, which its own replaces: a sweep killed while the job ran
# (kill -9 reaches no handler) leaves this failure with the job's settings, not a folder without one.
UNFINISHED = "unfinished"
MISSING = "missing"  # a job's status in repeats.csv (never in metrics.json): its folder has no record (not run, or stopped before it wrote one)
COPY = "copy"  # a job's status in repeats.csv (never in metrics.json): its record is another job folder's, copied
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
    try:
        n = operator.index(n)  # numpy's integers too
    except TypeError:
        if isinstance(n, float) and n.is_integer():
            n = int(n)
        else:
            return f"{n} {plural}"
    return f"{n:,} {noun if n == 1 else plural}"


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


# A usable job (or grid point), as data: each column and the value it must hold (EMPTY: no value:
# None, NaN or ""), so that a row, a pandas table and the store's SQL say it from one definition.
EMPTY = None
USABLE = (("status", "ok"), ("trace_error", EMPTY))


def usable(row: Any) -> bool:
    """A job (or grid point) whose figures can be used: it finished ok and its trace was read."""
    return all((not _given(row.get(column))) if value is EMPTY else row.get(column) == value
               for column, value in USABLE)


def usable_rows(frame: Any) -> Any:
    """The rows of a table (a pandas DataFrame of jobs or grid points) that `usable` keeps."""
    keep = None
    for column, value in USABLE:
        if column not in frame:
            if value is EMPTY:
                continue
            return frame.iloc[0:0]
        this = (frame[column].isna() | (frame[column].astype(str) == "")) if value is EMPTY else frame[column] == value
        keep = this if keep is None else keep & this
    return frame if keep is None else frame[keep]


def usable_sql(columns: Any, alias: str = "") -> str:
    """`usable` as a SQL predicate over a table with these `columns` (`alias.` before each)."""
    said = []
    for column, value in USABLE:
        name = f"{alias}.{column}" if alias else column
        if column not in columns:
            if value is EMPTY:
                continue
            return "false"
        said.append(f"({name} IS NULL OR CAST({name} AS VARCHAR) = '')" if value is EMPTY else f"{name} = '{value}'")
    return " AND ".join(said) or "true"


# A pairing key a sweep from before it existed does not record, and the value that sweep had.
# (run.allocator: glibc's own thresholds, unless MALLOC_* was set by hand, which no record says.)
PAIR_DEFAULTS = {"threads": "auto", "allocator": "system"}


def identity(row: Any, columns: Any) -> tuple:
    """What a grid point measured, by the pairing columns, each value as its text (None where it
    has none): equal identities pair (compare, history)."""

    def norm(c: str) -> Any:
        v = row.get(c)
        v = PAIR_DEFAULTS.get(c) if not _given(v) else v  # an empty cell, read back or not
        # as text, the way a CSV cell holds it: a record's 512 and a table's "512" are one value,
        # "007" stays "007" and "2.10" is not "2.1"
        return None if v is None else str(v)

    return tuple(norm(c) for c in columns)


# Settings that change what a step measures only where a flag of its grid point is set: the
# compiler's settings (compiler.mode -> compile_mode ...) where it compiled, the optimizer where it
# trained. An eager step measures the same whatever compiler.mode says.
COMPILER_SETTINGS = "compile_"  # columns.SETTING_GROUPS["compiler"]'s prefix
NOT_COMPILER = ("compile_cache",)  # run.compile_cache: a run setting whose name shares the prefix
ONLY_WITH = {"optimizer": "train"}


def only_with(column: str) -> str | None:
    """The flag without which `column` changes nothing a step measures (None: it always may)."""
    return "compile" if column.startswith(COMPILER_SETTINGS) and column not in NOT_COMPILER else ONLY_WITH.get(column)


def pair_identity(row: Any, columns: Any) -> tuple:
    """`identity`, with None for a setting whose flag (`only_with`) the row has and has not set,
    where that flag pairs too: what pairs a grid point across sweeps (compare, history), so that an
    eager point measured with compiler.mode=max-autotune pairs with one measured with the default.
    With the flag not pairing (--ignore compile: eager against compiled), every setting pairs."""
    def applies(column: str) -> bool:
        needed = only_with(column)
        return needed is None or needed not in columns or not _given(row.get(needed)) or flag(row.get(needed))

    return tuple(v if applies(c) else None for c, v in zip(columns, identity(row, columns)))


def series_key(row: Any, settings: Any, without: str | None = None) -> tuple:
    """The series a grid point (or a crossovers.csv row) belongs to, the one key that the
    crossovers, the conclusions and the plots group by: its series keys as text (less `without`)
    and its varying settings in words (the analysis's settings text, or crossovers.csv's
    `settings`)."""
    return (*(str(row.get(k)) for k in SERIES_KEYS if k != without), str(settings or ""))


_REPEAT = re.compile(r"_r\d+$")


class Row(Mapping):
    """A read-only row of the artifacts, keyed by column, each value typed (a flag True or False,
    a number a number, an empty cell None), and what every module asks of one: whether it is
    usable, its label, its pairing identity and its series. Change it with `replace`."""

    __slots__ = ("_values",)

    def __init__(self, values: Any = (), /, **more: Any) -> None:
        self._values = dict(values, **more)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Any:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._values!r})"

    def replace(self, **changes: Any) -> "Row":
        return type(self)(self._values, **changes)

    @property
    def usable(self) -> bool:
        return usable(self)

    def label(self, without: Any = ()) -> str:
        return point_label(self, without)

    def identity(self, columns: Any) -> tuple:
        return identity(self, columns)

    def pair_identity(self, columns: Any) -> tuple:
        return pair_identity(self, columns)

    def series_key(self, settings: Any, without: str | None = None) -> tuple:
        return series_key(self, settings, without)


class Job(Row):
    """One job, one process: its record (metrics.json, made safe to read) or its row of repeats.csv."""

    __slots__ = ()


class GridPoint(Row):
    """One grid point: its row of summary.csv, over the jobs (repeats) that measured it."""

    __slots__ = ()

    @property
    def jobs(self) -> list[str]:
        return point_jobs(self)

    def label(self, without: Any = ()) -> str:
        """Named by its first job's folder less the repeat where it has no workload."""
        return point_label({**self, "job": _REPEAT.sub("", str(self.get("job")))}, without)


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


def not_a_folder(path: Path) -> str:
    """Why `path` is no sweep folder, in words: missing, or a file (a trace: how to read one)."""
    if path.is_file():
        trace = path.name.endswith((".json", ".json.gz"))
        return (f"{path}: a file, not a sweep folder"
                + (f" (one trace: python -m analysis trace {path})" if trace else ""))
    return f"{path}: no such folder"


FOREIGN_LOOKS = 20  # records read to tell a sweep from another tool's folder of metrics.json files


def foreign(folder: Path) -> str | None:
    """Why `folder` is no sweep or run of profsweep's though it holds metrics.json files (another
    tool's runs: their records have no `schema_version`, which every record of a job has), in
    words to follow its name; None where it is one, or may be (a sweep.json of ours; no record, or none readable:
    a sweep whose jobs died says so as problems)."""
    folder = Path(folder)
    try:
        if (folder / PLAN_FILE).is_file():
            return None
        paths = [folder / METRICS_FILE] if (folder / METRICS_FILE).is_file() else sorted(folder.glob(f"*/{METRICS_FILE}"))
    except OSError:
        return None
    readable = None
    for path in paths[:FOREIGN_LOOKS]:
        try:
            record = read_json(path) if path.is_file() else None
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "schema_version" in record:
            return None
        readable = readable or path
    if readable is None:
        return None
    return (f"is no profsweep sweep or run: {readable.relative_to(folder)} is another tool's record (no "
            f"schema_version, which every profsweep job writes)")


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


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def without_address(text: str) -> str:
    """An object's repr less its memory address ('<object object at 0x7f82...>' -> '<object
    object>'): the same in every process, as a setting's text must be in every record of a grid
    point."""
    return _ADDRESS.sub("", text)


def first_line(exc: BaseException) -> str:
    """An exception's message in one line (torch's and Hydra's may run to a page); its type's name
    where it has none."""
    text = message(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def message(exc: BaseException) -> str:
    """str(exc), or what it is where a workload's exception cannot say its own message."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} whose message cannot be read>"


LINE = 300  # a terminal line's share of a message


def one_line(text: Any) -> str:
    """A recorded message as one terminal line: its first line that says something, cut to LINE
    characters (the record and the job's log keep the whole)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    more = len(lines) > 1 or len(line) > LINE
    return (line[:LINE] + " ..." if len(line) > LINE else line) + (" (the rest in job.log)" if more else "")


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


# --- reading --------------------------------------------------------------------------------------


def read_json(path: Path) -> Any:
    """The JSON document in the file `path`: OSError where it cannot be read, ValueError where it
    is not UTF-8 JSON, or is nested deeper than Python's parser goes (its RecursionError, which
    every reader of a file it did not write would otherwise have to know)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: JSON nested deeper than the parser goes") from None



def read_plan(folder: Path) -> dict[str, Any]:
    """A sweep folder's sweep.json (PLAN_FILE), or {} where it is missing, unreadable or not a JSON
    object."""
    try:
        plan = read_json(Path(folder) / PLAN_FILE)
    except (OSError, ValueError):
        return {}
    return plan if isinstance(plan, dict) else {}


def timed_samples(record: dict) -> list[float]:
    """A job record's un-profiled steps (its median alone where it keeps no list of them)."""
    from profsweep.stats import clean

    found = record.get(TIMED_SAMPLES)
    return clean(found if isinstance(found, list) else [record.get(TIMED)])


def alive(pid: int) -> bool:
    """Whether a process `pid` exists (another user's counts; a zombie counts too): the temporary
    files named by their writer's pid are left alone while it lives."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def scratch_pid(name: str, prefix: str) -> int | None:
    """The pid in a temporary file's name `<prefix><pid>-<rest>` (None: not so named, an older
    profsweep's): the process that made it, which removes it unless killed outright."""
    pid, dash, _ = name[len(prefix):].partition("-")
    return int(pid) if dash and pid.isdigit() else None


def untouched_for(path: Path, seconds: float) -> bool:
    """Whether `path` was last modified more than `seconds` ago (False where it cannot be read)."""
    import time

    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False


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
