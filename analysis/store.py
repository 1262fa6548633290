"""The history store: every sweep's rows in one embedded DuckDB database (`history.duckdb`), no
server. Tables (one `sweep_id` column joins them; `trend` is a view of `history` with its sweep):

    sweeps       one row per sweep: sweep_id, folder, name, started_at (UTC), started_from (which
                 file said so), ingested_at, summary_mtime_ns (its summary file's time then, or
                 where its job records are newer, the newest record's: a sweep analysed again or
                 rerun since is read again, its rows replaced), grid_points, jobs,
                 jobs_failed, and the environment's main keys (torch_version, git_commit,
                 hostname, driver_version, ...) as text
    environment  one row per sweep and key of its environment.json (lists and objects as JSON)
    history      one row per sweep and grid point: every column of its summary.parquet (or .csv)
    repeats      one row per job: every column of repeats.csv
    top_ops      top_ops.csv; ops, kernels: ops.csv and kernels.csv (per job, for the op diff)
    store_info   key, value: the store's schema version

A sweep is keyed by its folder (resolved) and its start time (sweep.json's `created_at`, else
environment.json's, else its summary file's modification time): ingesting the same sweeps again
adds nothing, a new sweep adds its rows only. DuckDB reads the sweeps' files itself
(read_parquet, read_csv), many sweeps in one statement, in one transaction: a killed ingest
leaves the store as it was. Columns are added as new sweeps bring them; a column's type is the
one its values share (numbers that are integers: BIGINT, others DOUBLE; true/false: BOOLEAN;
anything else text; a column with no value yet takes the type of the first values it gets).

Imported lazily: the rest of the analysis works without duckdb installed.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from profsweep.columns import TEXT_COLUMNS
from profsweep.contract import (COPY, ENVIRONMENT_FILE, PLAN_FILE, REPEATS_FILE, SUMMARY_FILE, amount, not_a_folder,
                                read_json, usable_sql)

STORE_FILE = "history.duckdb"
STORE_SCHEMA = 1
SUMMARY_FILES = (str(Path(SUMMARY_FILE).with_suffix(".parquet")), SUMMARY_FILE)
# table -> the file of a sweep folder it holds (history reads SUMMARY_FILES)
TABLE_FILES = {"repeats": "repeats.csv", "top_ops": "top_ops.csv", "ops": "ops.csv", "kernels": "kernels.csv"}
ENVIRONMENT_COLUMNS = ("torch_version", "cuda_build", "driver_version", "gpus", "cpu_model", "cpu_count",
                       "hostname", "git_commit", "git_dirty", "python_version", "platform", "command")
CHUNK_BYTES = 64 << 20  # of the sweeps' files ingested in one transaction
MEMORY_LIMIT = "256MB"  # of DuckDB's own while ingesting and analysing (1,000 sweeps: see benchmarks/history_scale.py)
DEPTH = 3  # how far below a folder of sweeps they are looked for (outputs/multirun/<date>/<time>)
INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "HUGEINT"}
NUMBERS = INTEGERS | {"FLOAT", "DOUBLE", "REAL"}


class StoreError(ValueError):
    """Input the store refuses; the message names it (exit 2)."""


def duckdb_module():
    try:
        import duckdb
    except ImportError:
        raise StoreError("the history store needs duckdb: .venv/bin/pip install duckdb "
                         "(make installs it with the project's dependencies)") from None
    return duckdb


# --- the sweeps on disk ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepFolder:
    folder: Path  # resolved
    started_at: datetime.datetime  # UTC, without a zone
    started_from: str  # sweep.json, environment.json or the summary file's time
    summary: Path
    # where job records were written after its analysis: the newest one's time plus their count (its
    # tables are then analysed anew from the records when the store takes it: Store.ingest)
    records_ns: int | None = None

    @property
    def version_ns(self) -> int | None:
        """What the store tells this sweep's versions by: its summary file's time, or (its analysis
        older than its records) `records_ns`."""
        return self.records_ns if self.records_ns is not None else _mtime_ns(self.summary)


def summary_file(folder: Path) -> Path | None:
    return next((folder / n for n in SUMMARY_FILES if (folder / n).is_file()), None)


def newer_records(folder: Path) -> tuple[list[tuple[str, int]], int]:
    """The job records of an analysed sweep written after its analysis (its oldest table: a job
    rerun or resumed, a status changed, a record edited, an analysis stopped halfway), as (job, mtime ns), and the jobs its analysis names whose
    folders are gone since while others remain (removed: mtime 0); and how many records it has. ([], n) where none is
    newer or gone, or the sweep is not analysed or cannot be read."""
    from analysis.tables import job_folders, job_name
    from profsweep.contract import METRICS_FILE

    summary = summary_file(folder)
    if summary is None:
        return [], 0
    try:
        # the oldest table history reads: an analysis stopped after some of them left the rest as they were
        written = min(p.stat().st_mtime_ns for p in [summary, *(folder / n for n in TABLE_FILES.values())]
                      if p.is_file())
        folders = job_folders(folder)
        times = [(j.name, (j / METRICS_FILE).stat().st_mtime_ns) for j in folders if (j / METRICS_FILE).is_file()]
    except OSError:
        return [], 0
    # jobs removed since, where some remain (with none left, the tables are what was kept: an archive);
    # not a single run's, whose one job is named after its folder (renamed or copied, it is no other job)
    present = {job_name(j) for j in folders}
    single = folders == [folder]
    gone = [(job, 0) for job in _analysed_jobs(folder) if job not in present] if folders and not single else []
    return [(name, ns) for name, ns in times if ns > written] + gone, len(times)


def _analysed_jobs(folder: Path) -> list[str]:
    """The jobs the sweep's analysis named (repeats.csv's `job` column; [] where it cannot be read)."""
    import csv

    try:
        with open(folder / REPEATS_FILE, newline="", encoding="utf-8") as f:
            return [row["job"] for row in csv.DictReader(f) if row.get("job")]
    except (OSError, ValueError, KeyError, csv.Error):  # ValueError: not UTF-8
        return []


def older_than_records(folder: Path, newer: list[tuple[str, int]]) -> str:
    """`FOLDER: its analysis is older than 2 job records (a, b: rerun or changed since, ...)`, or
    names the jobs whose folders are gone since."""
    changed = [n for n, ns in newer if ns]
    gone = [n for n, ns in newer if not ns]

    def some(names: list[str]) -> str:
        return f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"

    said = []
    if changed:
        said.append(f"its analysis is older than {amount(len(changed), 'job record')} ({some(changed)}: rerun or "
                    "changed since, or the folder copied without its times)")
    if gone:
        said.append(f"{amount(len(gone), 'job')} its analysis names {'is' if len(gone) == 1 else 'are'} gone from "
                    f"it ({some(gone)}: removed since)")
    return f"{folder}: " + "; ".join(said)


def _utc(text: Any) -> datetime.datetime | None:
    try:
        t = datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return (t.astimezone(datetime.timezone.utc) if t.tzinfo else t).replace(tzinfo=None)


def _plan_start(folder: Path) -> tuple[datetime.datetime, str] | None:
    """When a sweep started, by its sweep.json or environment.json, and which said so (None: neither)."""
    for name in (PLAN_FILE, ENVIRONMENT_FILE):
        try:
            found = _utc(read_json(folder / name).get("created_at"))
        except (OSError, ValueError, AttributeError):
            continue
        if found is not None:
            return found, name
    return None


def start_time(folder: Path, summary: Path) -> tuple[datetime.datetime, str]:
    """When the sweep started, and which file said so."""
    found = _plan_start(folder)
    if found is not None:
        return found
    stamp = datetime.datetime.fromtimestamp(summary.stat().st_mtime, datetime.timezone.utc)
    return stamp.replace(tzinfo=None), f"{summary.name} modified"


def find_sweeps(paths: Sequence[Path], warn: Callable[[str], None],
                unanalysed: list[tuple[Path, datetime.datetime | None]] | None = None) -> list[SweepFolder]:
    """The analysed sweeps named, or found in the folders named (up to DEPTH levels below, not
    inside a sweep), each once. A named sweep that is not analysed, that a live sweep still
    writes, or that cannot be read, is refused; one found below a folder is skipped with a
    warning (and, where it is not analysed, added to `unanalysed` with when it started, from its
    sweep.json: a sweep killed before its analysis, which the gate must not pass over). A sweep
    whose analysis is older than some of its job records (a job rerun since) is taken as
    analysed, with a warning that says so."""
    from analysis.tables import job_folders, unreadable
    from profsweep.contract import live_sweep

    def problem(folder: Path) -> str | None:
        try:
            if unreadable(folder):
                return unreadable(folder)
            pid = live_sweep(folder)
            if pid is not None:
                return (f"{folder} is being written by a sweep that is still running"
                        + (f" (pid {pid})" if pid > 0 else "") + ": history takes finished sweeps only")
            summary = summary_file(folder)
            if summary is None:
                return (f"{folder} is not analysed (no summary.parquet or summary.csv): "
                        f"python -m analysis {folder} writes them")
            damaged = _damaged(summary, [folder / name for name in TABLE_FILES.values()])
            if damaged:
                return f"{damaged}: python -m analysis {folder} writes its tables anew"
            with open(summary, "rb"):
                pass
        except OSError as exc:  # a file of it this user may not read
            return f"{folder}: cannot read it ({exc.strerror or exc})"
        return None

    def stale(folder: Path) -> int | None:
        """Where job records were written after the analysis (a job rerun, a status changed, a
        record edited), the newest one's time, with a warning: history then reads the records,
        as compare analyses such a side in memory, writing nothing into the sweep; else None."""
        from analysis.files import CHECKSUMS_FILE, edited_tables, named_edits
        from analysis.tables import job_folders
        from profsweep.contract import METRICS_FILE

        newer, records = newer_records(folder)
        # records rerun since are said as such (they change the records tables.sha256 lists too)
        edited = [] if newer else edited_tables(folder, [*SUMMARY_FILES, *TABLE_FILES.values()])
        if edited:
            said = f"warning: {folder}: {named_edits(edited)}: not what its analysis wrote ({CHECKSUMS_FILE})"
            if not any((j / METRICS_FILE).is_file() for j in job_folders(folder)):
                warn(f"{said}, and it keeps no job records to read instead: history reads the tables as they are")
                return None
            warn(f"{said}; history reads its job records instead, writing nothing into it (python -m analysis "
                 f"{folder} writes its analysis anew)")
            # the newest of the edits and the records (a record rerun since counts too), plus how many
            times = [_mtime_ns(folder / name.removesuffix(" (removed)")) or 0 for name in edited]
            return max([*times, *(ns for _, ns in newer)]) + records + 1
        if not newer:
            return None
        warn(f"warning: {older_than_records(folder, newer)}; history reads its job records instead, writing nothing "
             f"into it (python -m analysis {folder} writes its analysis anew)")
        # the newest record's time, plus how many there are: a record removed or copied in with an
        # older time changes it too
        return max(ns for _, ns in newer) + records

    def is_sweep(folder: Path) -> bool:
        """Analysed, or job folders that are not themselves analysed runs (outputs/runs/<date>), or
        a sweep stopped before its first job (its sweep.json: the gate must not pass over it either)."""
        from analysis.tables import stopped_before_jobs

        if summary_file(folder) is not None:
            return True
        jobs = job_folders(folder)
        return (bool(jobs) and not any(summary_file(j) is not None for j in jobs)) or bool(stopped_before_jobs(folder))

    def children(folder: Path) -> list[Path]:
        """The folders in `folder` that a walk goes into; one this user cannot read is skipped with
        a warning (its sweeps cannot be taken)."""
        out = []
        try:
            found = sorted(folder.iterdir())
        except OSError as exc:
            warn(f"warning: skipped: {folder}: cannot read it ({exc.strerror or exc})")
            return []
        for c in found:
            try:
                if not c.is_dir() or c.name.startswith(".") or (c / STORE_FILE).exists():
                    continue
            except OSError as exc:
                warn(f"warning: skipped: {c}: cannot read it ({exc.strerror or exc})")
                continue
            if unreadable(c):
                warn(f"warning: skipped: {unreadable(c)}")
                continue
            out.append(c)
        return out

    found: dict[Path, SweepFolder] = {}

    def add(folder: Path) -> None:
        folder = folder.resolve()
        if folder not in found:
            summary = summary_file(folder)
            assert summary is not None
            found[folder] = SweepFolder(folder, *start_time(folder, summary), summary, stale(folder))

    for path in paths:
        if not path.is_dir():
            raise StoreError(not_a_folder(path))
        if unreadable(path):
            raise StoreError(str(unreadable(path)))
        if is_sweep(path):
            said = problem(path)
            if said:
                raise StoreError(said)
            add(path)
            continue
        below = []
        level = [path]
        for _ in range(DEPTH):
            level = [c for p in level for c in children(p)]
            sweeps = []
            for c in level:
                try:
                    if is_sweep(c):
                        sweeps.append(c)
                except OSError as exc:
                    warn(f"warning: skipped: {c}: cannot read it ({exc.strerror or exc})")
            below += sweeps
            level = [c for c in level if c not in sweeps]
        if not below:
            raise StoreError(f"{path}: neither a sweep nor a folder of sweeps: no summary.csv and no job folder "
                             f"in it or up to {DEPTH} levels below")
        for sweep in sorted(below):
            said = problem(sweep)
            if said:
                warn(f"warning: skipped: {said}")
                if unanalysed is not None and summary_file(sweep) is None and (sweep / PLAN_FILE).is_file() \
                        and not live_sweep(sweep):
                    unanalysed.append((sweep.resolve(), (_plan_start(sweep) or (None,))[0]))
            else:
                add(sweep)
    return list(found.values())


FRESH_PREFIX = "profsweep-history-"  # + the pid of the history that made it
FRESH_LEFT_S = 24 * 3600  # a folder of them untouched this long, its pid gone, is a killed history's


def fresh_tables(folder: Path) -> Path:
    """The tables history reads of `folder`, analysed from its job records into a temporary folder
    (Store.ingest removes it once read): summary.csv and TABLE_FILES, without plots, report or
    conclusions."""
    import atexit
    import shutil
    import tempfile

    from analysis.tables import analyse_sweep, frames, write_tables
    from analysis.top_ops import top_ops_frame
    from profsweep.contract import alive, scratch_pid, untouched_for

    for left in Path(tempfile.gettempdir()).glob(f"{FRESH_PREFIX}*"):  # by a history killed outright (a day
        pid = scratch_pid(left.name, FRESH_PREFIX)  # old too: another container's live pid may look dead here)
        if pid is not None and not alive(pid) and untouched_for(left, FRESH_LEFT_S):
            shutil.rmtree(left, ignore_errors=True)
    out = Path(tempfile.mkdtemp(prefix=f"{FRESH_PREFIX}{os.getpid()}-"))
    atexit.register(shutil.rmtree, out, True)  # a backstop, should ingest itself be killed
    try:
        tables = analyse_sweep(folder, lambda line: None)
        write_tables(out, {**frames(tables), "top_ops": top_ops_frame(tables)})
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def default_out(paths: Sequence[Path], sweeps: Sequence[SweepFolder]) -> Path:
    """history/ in the one folder of sweeps given, else in the sweeps' common parent folder."""
    import os

    if len(paths) == 1 and not any(s.folder == paths[0].resolve() for s in sweeps):
        return paths[0] / "history"
    return Path(os.path.commonpath([str(s.folder.parent) for s in sweeps])) / "history"


# --- the store -------------------------------------------------------------------------------------


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _text(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _show(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else str(value)


def _header(path: Path) -> list[str]:
    """The column names on a CSV file's first line."""
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader([f.readline()]), [])


def _damaged(summary: Path, tables: Sequence[Path]) -> str | None:
    """What makes a sweep's tables unreadable to the store, where its files say so at a glance: a
    summary.parquet without columns or footer, a table whose first line is not UTF-8 text."""
    if summary.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            if not pq.read_schema(summary).names:
                return f"{summary} has no columns"
        except ImportError:  # no parquet reader here: DuckDB says, if anything is wrong
            pass
        except Exception as exc:  # pyarrow's errors: ArrowInvalid, OSError
            return f"{summary} cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    for table in [*([summary] if summary.suffix == ".csv" else []), *tables]:
        try:
            if table.name == REPEATS_FILE and not (table.is_file() and any(_header(table))):
                # every analysis writes it: without it every job of the sweep would read as never run
                return f"{table} is missing or empty"
            if table.is_file():
                _header(table)
                if table.suffix == ".csv" and not _ends_a_line(table):
                    return f"{table} is cut short (its last row does not end)"
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            return f"{table} cannot be read ({type(exc).__name__}: {str(exc)[:120]})"
    return None


def _ends_a_line(table: Path) -> bool:
    """Whether a CSV file ends as every table the analysis writes does (a line's end): one cut
    mid-row would be read as fewer rows without a word."""
    with table.open("rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def summary_columns(summary: Path) -> set[str]:
    """The column names of a sweep's summary file (empty where they cannot be read)."""
    try:
        if summary.suffix == ".parquet":
            import pyarrow.parquet as pq

            return set(pq.read_schema(summary).names)
        return set(_header(summary))
    except Exception:  # noqa: BLE001 (pyarrow's errors, a file cut short): the store says what is wrong
        return set()


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _has_rows(path: Path) -> bool:
    """A CSV with a header and at least one row (pandas writes a bare newline for an empty table)."""
    try:
        with open(path, "rb") as f:
            return bool(f.readline().strip()) and bool(f.readline().strip())
    except OSError:
        return False


class Store:
    """An open history store; use as a context manager."""

    def __init__(self, path: Path, read_only: bool = False):
        self._replaced: dict[SweepFolder, int] = {}  # ingested again (analysed since): their old ids
        self._fresh: dict[SweepFolder, Path] = {}  # sweeps being ingested from their records: their tables' folder
        self.reread = 0
        duckdb = duckdb_module()
        self.path = Path(path)
        if read_only and not self.path.is_file():
            raise StoreError(f"{self.path}: no such store (python -m analysis history SWEEP... --out DIR makes "
                             f"DIR/{STORE_FILE})")
        try:
            if not read_only:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.con = duckdb.connect(str(self.path), read_only=read_only)
            self.con.execute("SET enable_progress_bar = false")  # no bar on the terminal of a nightly job
        except (duckdb.Error, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreError(f"{self.path}: cannot open the store: {first}") from None
        if not read_only:
            self.con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")  # DuckDB spills beyond it: flat memory
            self._create()
        else:
            self._check_version()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.con.close()

    def _create(self) -> None:
        c = self.con
        c.execute("CREATE TABLE IF NOT EXISTS store_info (key VARCHAR PRIMARY KEY, value VARCHAR)")
        c.execute("INSERT OR IGNORE INTO store_info VALUES ('schema_version', ?)", [str(STORE_SCHEMA)])
        self._check_version()
        env = ", ".join(f"{_q(k)} VARCHAR" for k in ENVIRONMENT_COLUMNS)
        c.execute(f"""CREATE TABLE IF NOT EXISTS sweeps (
            sweep_id INTEGER PRIMARY KEY, folder VARCHAR NOT NULL, name VARCHAR, started_at TIMESTAMP NOT NULL,
            started_from VARCHAR, ingested_at TIMESTAMP, grid_points INTEGER, jobs INTEGER, jobs_failed INTEGER,
            {env}, UNIQUE (folder, started_at))""")
        # the summary file's modification time as ingested (a store from before it: NULL, ingested_at decides)
        c.execute("ALTER TABLE sweeps ADD COLUMN IF NOT EXISTS summary_mtime_ns BIGINT")
        c.execute("CREATE TABLE IF NOT EXISTS environment (sweep_id INTEGER, key VARCHAR, value VARCHAR)")
        for table in ("history", *TABLE_FILES):
            c.execute(f"CREATE TABLE IF NOT EXISTS {table} (sweep_id INTEGER)")
        c.execute("CREATE OR REPLACE VIEW trend AS SELECT s.name AS sweep, s.started_at, s.torch_version, "
                  "s.git_commit, h.* FROM history h JOIN sweeps s USING (sweep_id)")

    def _check_version(self) -> None:
        try:
            found = self.con.execute("SELECT value FROM store_info WHERE key = 'schema_version'").fetchone()
        except Exception:  # not a store of ours (no store_info)
            raise StoreError(f"{self.path}: not a history store (no store_info table)") from None
        if found is None or found[0] != str(STORE_SCHEMA):
            raise StoreError(f"{self.path}: a store of schema {found[0] if found else '?'}; this analysis "
                             f"reads schema {STORE_SCHEMA}")

    # --- ingest ----------------------------------------------------------------------------------

    def ids(self, sweeps: Iterable[SweepFolder]) -> dict[SweepFolder, int]:
        """The sweep_id of each of `sweeps` already in the store as it is now."""
        return self._known(sweeps)[0]

    def _known(self, sweeps: Iterable[SweepFolder]) -> tuple[dict[SweepFolder, int], dict[SweepFolder, int]]:
        """The sweeps in the store as they are now, and those the store holds as they were: analysed
        again since they were ingested (their summary file newer; a sweep resumed keeps its start
        time), each with its sweep_id. A folder holding a sweep started anew (another start time) is
        another sweep: the store keeps the one it held."""
        known = {(f, t): (i, at, ns) for i, f, t, at, ns in self.con.execute(
            "SELECT sweep_id, folder, started_at, ingested_at, summary_mtime_ns FROM sweeps").fetchall()}
        have, changed = {}, {}
        for s in sweeps:
            found = known.get((str(s.folder), s.started_at))
            if found is None:
                continue
            i, ingested, stored = found
            now = s.version_ns
            if stored is not None:  # the file's own time against itself: no clock of this machine's
                same = now is None or now == stored
            else:
                written = None if now is None else datetime.datetime.fromtimestamp(
                    now / 1e9, datetime.timezone.utc).replace(tzinfo=None)
                same = ingested is None or written is None or written <= ingested
            (have if same else changed)[s] = i
        return have, changed

    def ingest(self, sweeps: Sequence[SweepFolder], progress: Callable[[str], None] | None = None,
               warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
               ) -> tuple[dict[SweepFolder, int], int]:
        """Add the sweeps not in the store yet, a few at a time (CHUNK_BYTES of files, one
        transaction each: a sweep is in the store whole or not at all, and memory stays flat);
        return every sweep's id and how many were new. A sweep whose analysis is older than its
        records (`records_ns`) is analysed anew from them first, into a temporary folder removed
        once read; where that fails, its written analysis is read, with a warning."""
        import shutil

        have, self._replaced = self._known(sweeps)
        self.reread = len(self._replaced)
        new = [s for s in sweeps if s not in have]
        if not new:
            return have, 0
        start = (self.con.execute("SELECT coalesce(max(sweep_id), 0) FROM sweeps").fetchone() or (0,))[0] + 1
        ids = {s: start + i for i, s in enumerate(new)}
        chunk: list[SweepFolder] = []
        size = done = 0
        try:
            for s in new:
                if s.records_ns is not None:
                    try:
                        self._fresh[s] = fresh_tables(s.folder)
                    except Exception as exc:  # noqa: BLE001 (any failure of one sweep's analysis)
                        warn(f"warning: {s.folder}: its job records could not be analysed anew ({type(exc).__name__}: "
                             f"{exc}); its written analysis is read")
                chunk.append(s)
                size += sum(f.stat().st_size for f in (self._summary(s), *(self._tables(s) / n
                                                                          for n in TABLE_FILES.values())) if f.is_file())
                if size >= CHUNK_BYTES or s is new[-1]:
                    self._ingest(chunk, ids)
                    for done_with in chunk:
                        if done_with in self._fresh:
                            shutil.rmtree(self._fresh.pop(done_with), ignore_errors=True)
                    done += len(chunk)
                    if progress and len(new) > len(chunk):
                        progress(f"ingested {done}/{len(new)} sweeps")
                    chunk, size = [], 0
        finally:
            for path in self._fresh.values():
                shutil.rmtree(path, ignore_errors=True)
            self._fresh.clear()
        return {**have, **ids}, len(new)

    def _tables(self, s: SweepFolder) -> Path:
        """Where a sweep's table files are read: its folder, or where its records were analysed anew."""
        return self._fresh.get(s, s.folder)

    def _summary(self, s: SweepFolder) -> Path:
        return summary_file(self._fresh[s]) or s.summary if s in self._fresh else s.summary

    def _ingest(self, new: list[SweepFolder], ids: dict[SweepFolder, int]) -> None:
        import pandas as pd

        c = self.con
        now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        rows, env_rows = [], []
        for s in new:
            try:
                env = read_json(s.folder / ENVIRONMENT_FILE)
                env = env if isinstance(env, dict) else {}
            except (OSError, ValueError):
                env = {}
            rows.append({"sweep_id": ids[s], "folder": str(s.folder), "name": s.folder.name,
                         "started_at": s.started_at, "started_from": s.started_from, "ingested_at": now,
                         # a sweep read from its written analysis though its records are newer (their
                         # analysis failed): stored as that analysis, so that the next history tries again
                         "summary_mtime_ns": _mtime_ns(s.summary) if s.records_ns is not None and s not in self._fresh
                         else s.version_ns,
                         **{k: _show(env.get(k)) for k in ENVIRONMENT_COLUMNS}})
            env_rows += [{"sweep_id": ids[s], "key": str(k), "value": _show(v)} for k, v in env.items()]
        sweep_frame = pd.DataFrame(rows)
        env_frame = pd.DataFrame(env_rows, columns=["sweep_id", "key", "value"]).astype(
            {"sweep_id": "int64", "key": "string", "value": "string"})
        duckdb = duckdb_module()
        c.execute("BEGIN TRANSACTION")
        try:
            gone = [self._replaced[s] for s in new if s in self._replaced]
            if gone:  # resumed or analysed again since: its rows as they were go, in the same transaction
                ids_text = ", ".join(str(i) for i in gone)
                for table in ("sweeps", "environment", "history", *TABLE_FILES):
                    c.execute(f"DELETE FROM {table} WHERE sweep_id IN ({ids_text})")
            c.register("_new_sweeps", sweep_frame)
            c.execute("INSERT INTO sweeps BY NAME SELECT * FROM _new_sweeps")
            c.register("_new_environment", env_frame)
            c.execute("INSERT INTO environment SELECT * FROM _new_environment")
            summaries = [(ids[s], self._summary(s)) for s in new]
            parquet = [(i, path) for i, path in summaries if path.suffix == ".parquet"]
            csv = [(i, path) for i, path in summaries if path.suffix == ".csv" and _has_rows(path)]
            self._load("history", parquet, parquet=True)
            self._load("history", csv)
            for table, name in TABLE_FILES.items():
                self._load(table, [(ids[s], self._tables(s) / name) for s in new if _has_rows(self._tables(s) / name)])
            wanted = ", ".join(str(ids[s]) for s in new)
            have = self.columns("repeats")
            ok = usable_sql(have, "r")  # a failed job: one whose figures cannot be used ...
            # ... that was meant to measure (not one left out on purpose); a copy of another is no job
            meant = "coalesce(CAST(r.status AS VARCHAR), '')" if "status" in have else "''"
            ok = f"({ok}) OR {meant} = 'skipped'"
            c.execute(f"""CREATE OR REPLACE TEMP TABLE _counts AS
                SELECT s.sweep_id, coalesce(p.n, 0) AS points, coalesce(j.n, 0) AS jobs, coalesce(j.failed, 0) AS failed
                FROM (SELECT sweep_id FROM sweeps WHERE sweep_id IN ({wanted})) s
                LEFT JOIN (SELECT sweep_id, count(*) AS n FROM history WHERE sweep_id IN ({wanted}) GROUP BY sweep_id) p
                  USING (sweep_id)
                LEFT JOIN (SELECT r.sweep_id, count(*) AS n, count(*) FILTER (WHERE NOT coalesce({ok}, false)) AS failed
                           FROM repeats r WHERE r.sweep_id IN ({wanted}) AND {meant} <> '{COPY}'
                           GROUP BY r.sweep_id) j USING (sweep_id)""")
            c.execute("""UPDATE sweeps SET grid_points = x.points, jobs = x.jobs, jobs_failed = x.failed
                         FROM _counts x WHERE sweeps.sweep_id = x.sweep_id""")
            c.execute("DROP TABLE _counts")
            c.execute("COMMIT")
        except duckdb.Error as exc:
            c.execute("ROLLBACK")
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__  # not DuckDB's whole sniffer help
            raise StoreError(f"{self.path}: sweeps could not be ingested ({', '.join(s.folder.name for s in new[:3])}"
                             f"{', ...' if len(new) > 3 else ''}; none of them was): {first} (python -m analysis "
                             "SWEEP writes a sweep's tables anew)") from None
        except BaseException:
            c.execute("ROLLBACK")
            raise
        finally:
            for view in ("_new_sweeps", "_new_environment"):
                c.unregister(view)

    def columns(self, table: str) -> dict[str, str]:
        """The table's columns and their types, in order."""
        return {name: kind for name, kind, *_ in self.con.execute(f"DESCRIBE {table}").fetchall()}

    def _load(self, table: str, files: list[tuple[int, Path]], parquet: bool = False) -> None:
        """The rows of `files` (one per sweep) into `table`, each with its sweep_id, in one statement."""
        if not files:
            return
        c = self.con
        c.execute("CREATE OR REPLACE TEMP TABLE _files (sweep_id INTEGER, path VARCHAR)")
        c.execute("INSERT INTO _files VALUES " + ", ".join(f"({i}, {_text(p)})" for i, p in files))
        listed = "[" + ", ".join(_text(p) for _, p in files) + "]"
        if parquet:
            reader = f"read_parquet({listed}, union_by_name = true, filename = '_source_file')"
        else:  # pandas' dialect (no sniffing of it per file); DuckDB types each file's columns, text stays text
            text = sorted(TEXT_COLUMNS & {n for _, p in files for n in _header(p)})
            types = "{" + ", ".join(f"{_text(n)}: 'VARCHAR'" for n in text) + "}"
            reader = (f"read_csv({listed}, union_by_name = true, filename = '_source_file', header = true, "
                      f"delim = ',', quote = '\"', escape = '\"'" + (f", types = {types})" if text else ")"))
        c.execute(f"CREATE OR REPLACE TEMP TABLE _batch AS SELECT f.sweep_id, t.* EXCLUDE (_source_file) "
                  f"FROM {reader} t JOIN _files f ON t._source_file = f.path")
        batch = {k: v for k, v in self.columns("_batch").items() if k != "sweep_id"}
        batch.update(self._infer(batch, by_values=parquet))
        store = self.columns(table)
        empty = self._empty(table, [k for k in batch if store.get(k) == "VARCHAR"])
        for name, kind in batch.items():
            if kind is None:  # no value in this batch: any type takes it
                if name not in store:
                    c.execute(f"ALTER TABLE {table} ADD COLUMN {_q(name)} VARCHAR")
                    store[name] = "VARCHAR"
                continue
            if name not in store:
                c.execute(f"ALTER TABLE {table} ADD COLUMN {_q(name)} {kind}")
                store[name] = kind
            elif store[name] != kind:
                wider = kind if name in empty else _common(store[name], kind)
                if wider != store[name]:
                    c.execute(f"ALTER TABLE {table} ALTER {_q(name)} TYPE {wider}")
                    store[name] = wider
        chosen = ", ".join(f"CAST({_q(k)} AS {store[k]}) AS {_q(k)}" for k in batch)
        c.execute(f"INSERT INTO {table} BY NAME SELECT sweep_id, {chosen} FROM _batch")
        c.execute("DROP TABLE _batch")

    def _infer(self, batch: dict[str, str], by_values: bool) -> dict[str, str | None]:
        """The type of each text column of the batch: None where it holds no value (a file had none
        there: any type takes it); `by_values`, by what its values all are: BOOLEAN, BIGINT, DOUBLE
        or VARCHAR (parquet files whose columns differ in type are read as text: a number in one
        sweep, no value in another). TEXT_COLUMNS stay text."""
        text = [k for k, v in batch.items() if v == "VARCHAR" and k not in TEXT_COLUMNS]
        if not text:
            return {}
        parts = []
        for k in text:
            x = f"TRY_CAST({_q(k)} AS DOUBLE)"
            parts.append(f"count({_q(k)})")
            if by_values:
                parts += [f"count({x})", f"count_if(lower({_q(k)}) IN ('true', 'false'))",
                          f"count_if(NOT isfinite({x}) OR {x} <> round({x}) OR abs({x}) > 4.6e18)"]
        counts = self.con.execute(f"SELECT {', '.join(parts)} FROM _batch").fetchone()
        out: dict[str, str | None] = {}
        step = 4 if by_values else 1
        for i, k in enumerate(text):
            n = counts[step * i]
            if n == 0:
                out[k] = None
            elif by_values:
                numbers, flags, fractions = counts[step * i + 1: step * i + 4]
                out[k] = ("BOOLEAN" if flags == n else
                          ("BIGINT" if fractions == 0 else "DOUBLE") if numbers == n else "VARCHAR")
        return out

    def _empty(self, table: str, names: list[str]) -> set[str]:
        """Those of the table's columns that hold no value yet."""
        if not names:
            return set()
        counts = self.con.execute(f"SELECT {', '.join(f'count({_q(k)})' for k in names)} FROM {table}").fetchone()
        return {k for k, n in zip(names, counts) if n == 0}

    # --- reading -----------------------------------------------------------------------------------

    def copies(self, ids: Sequence[int]) -> dict[int, int]:
        """Each sweep of `ids` that is a copy of another (the same start, and jobs' start times it
        shares with it, to the millisecond: a folder copied, perhaps resumed since with more
        repeats, not a sweep run again) -> the one kept: of sweeps sharing jobs, the one with the
        most (the first in `ids` among equals)."""
        if not ids or "started_at" not in self.columns("repeats"):
            return {}
        found = self.con.execute(
            "SELECT s.sweep_id, CAST(s.started_at AS VARCHAR), string_agg(CAST(r.started_at AS VARCHAR), ',' "
            "ORDER BY CAST(r.started_at AS VARCHAR)) FROM sweeps s LEFT JOIN repeats r USING (sweep_id) "
            f"WHERE s.sweep_id IN ({', '.join(str(int(i)) for i in ids)}) GROUP BY ALL").fetchall()
        jobs = {sweep: set(starts.split(",")) for sweep, _, starts in found if starts}  # no job's start: nothing to tell by
        groups: dict[str, list[int]] = {}
        for sweep, start, _ in found:
            if sweep in jobs:
                groups.setdefault(start, []).append(sweep)
        position = {sweep: n for n, sweep in enumerate(ids)}
        out = {}
        for members in groups.values():
            kept: list[int] = []
            for sweep in sorted(members, key=lambda s: (-len(jobs[s]), position[s])):
                original = next((k for k in kept if jobs[k] & jobs[sweep]), None)
                if original is None:
                    kept.append(sweep)
                else:
                    out[sweep] = original
        return out

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self.con.execute(query, list(params))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r)) for r in cursor.fetchall()]


def _common(a: str, b: str) -> str:
    """The type that holds the values of two columns' types."""
    if a == b:
        return a
    if a in INTEGERS and b in INTEGERS:
        return "BIGINT"
    if a in NUMBERS and b in NUMBERS:
        return "DOUBLE"
    return "VARCHAR"


TABLE_ROWS = 10_000  # the rows an aligned table shows (it holds them all to align them); CSV streams every row


def print_result(cursor: Any, stream: Any, as_csv: bool = False, widest: int = 60) -> None:
    """A query's result as CSV (every row, in batches) or as an aligned table of its first
    TABLE_ROWS rows (cells cut at `widest`; a result of 10^11 rows was held whole: killed for memory)."""
    import csv

    if cursor.description is None:  # a statement without a result
        return
    names = [d[0] for d in cursor.description]
    if as_csv:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(names)
        while True:
            batch = cursor.fetchmany(10_000)
            if not batch:
                break
            writer.writerows(["" if v is None else v for v in row] for row in batch)
        return

    def cell(v: Any) -> str:
        text = "NULL" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)
        text = text.replace("\n", " ")
        return text if len(text) <= widest else text[:widest - 1] + "…"

    raw = cursor.fetchmany(TABLE_ROWS + 1)
    more = len(raw) > TABLE_ROWS
    raw = raw[:TABLE_ROWS]
    rows = [[cell(v) for v in row] for row in raw]
    right = [all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in col) and raw
             for col in zip(*raw)] if raw else [False] * len(names)
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip() + "\n"

    stream.write(line(names))
    stream.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        stream.write(line(r))
    if more:
        stream.write(f"(the first {amount(len(rows), 'row')}; the query returns more: --csv writes every row, or "
                     "narrow it with WHERE or LIMIT)\n")
    else:
        stream.write(f"({amount(len(rows), 'row')})\n")
