"""Atomic writes for the analysis outputs (the contract's), each failure a WriteError naming the
file."""

from __future__ import annotations

import csv
import hashlib
import io
import math
import numbers
import os
import re
import stat
from pathlib import Path
from typing import Any, Collection, Iterable, Sequence

from profsweep import contract


class WriteError(OSError):
    """An output the analysis could not write; the message names the file and why."""

    def __str__(self) -> str:
        return str(self.strerror)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    try:
        contract.atomic_write_bytes(path, data)
    except OSError as exc:
        if isinstance(exc, WriteError):
            raise
        raise WriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def csv_text(rows: Iterable[dict[str, Any]], columns: Sequence[str] | None = None,
             decimals: dict[str, int] | None = None) -> str:
    """A table as the analysis writes its CSVs (and as pandas' to_csv would): a header, the
    columns in order of first appearance unless given, an empty cell for None and NaN, numbers
    rounded where `decimals` names their column."""
    rows = list(rows)
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        columns = list(seen)
    decimals = decimals or {}

    def cell(column: str, value: Any) -> Any:
        if value is None or (isinstance(value, numbers.Real) and math.isnan(value)):
            return ""
        if column in decimals and isinstance(value, float):
            return round(value, decimals[column])
        return value

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([cell(c, row.get(c)) for c in columns] for row in rows)
    return buffer.getvalue()


def read_csv_rows(path: Path, text: Collection[str] = (), counts: Collection[str] = (),
                  text_prefixes: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A CSV the analysis wrote, each cell typed as it was written: an int, a float, True or
    False, None for an empty cell, else its text. The columns in `text`, or starting with one of
    `text_prefixes`, stay text (a job named `7`, a setting "007"); those in `counts` are integers
    where pandas wrote them as floats (a column with an empty cell: `8.0`)."""
    with open(path, newline="", encoding="utf-8") as f:
        read = list(csv.DictReader(f))
    if any(None in row for row in read):  # more cells than the header names: not a table the analysis wrote
        raise ValueError(f"{path}: a row has more cells than its header")
    rows = [{k: (v or None) if k in text or k.startswith(text_prefixes) else typed(v) for k, v in row.items()}
            for row in read]
    for row in rows:
        for key in counts:
            value = row.get(key)
            if isinstance(value, float) and value.is_integer():
                row[key] = int(value)
    return rows


def typed(text: str | None) -> Any:
    """A cell's text as the value it was written from (see read_csv_rows)."""
    if text is None or text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if len(text) > 300:  # no number the analysis writes is this long (and int() refuses 4,300 digits)
        return text
    if INTEGER.fullmatch(text):
        return int(text)
    if NUMBER.fullmatch(text):
        return float(text)
    return text


INTEGER = re.compile(r"[-+]?[0-9]+")  # as written: no "1_000", no spaces (a job named 12_34 stays text)
NUMBER = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?inf")


# --- the tables as the analysis wrote them ------------------------------------------------------

CHECKSUMS_FILE = "tables.sha256"  # `sha256sum -c tables.sha256` checks them by hand


TABLE_NAME = re.compile(r"^[A-Za-z0-9_]+\.(csv|parquet)$")  # what the analysis writes into the folder
RECORD_NAME = re.compile(r"^[^./\\\n\r][^/\\\n\r]*/metrics\.json$")  # a job's record, which the tables are made from


def _open_plain(path: Path) -> Any:
    """A regular file opened for reading, never through a link (OSError for a link, a pipe, a
    device or a folder: neither a table nor tables.sha256 is one of those)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise OSError(f"{path} is not a regular file")
    return f


def _sha256(path: Path) -> str:
    """The SHA-256 of a regular file in its folder (`_open_plain`)."""
    digest = hashlib.sha256()
    with _open_plain(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: Path, written: Iterable[Path], records: Iterable[str] = ()) -> None:
    """tables.sha256 (sha256sum's format) of the tables just written, and of the job records they
    were made from (`records`: `<job>/metrics.json`, relative to the folder): an edit of a table
    since, a record changed since, or tables copied in from another sweep with their checksums is
    then told (`edited_tables`), and the analysis read from the job records instead."""
    lines = [f"{_sha256(p)}  {p.name}\n" for p in written]
    for name in records:
        if RECORD_NAME.match(name):  # a name sha256sum would escape (a newline, a backslash) is not vouched for
            try:
                lines.append(f"{_sha256(folder / name)}  {name}\n")
            except OSError:
                continue
    atomic_write_text(folder / CHECKSUMS_FILE, "".join(lines))


def forget_checksums(folder: Path) -> None:
    """Before the tables are written anew: an analysis stopped halfway leaves none, not old ones."""
    path = folder / CHECKSUMS_FILE
    if not path.exists() and not path.is_symlink():
        return
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise WriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc


CHECKSUMS_MAX_BYTES = 1 << 25  # a tables.sha256 the analysis writes: ~100 bytes a table and a job


def named_edits(edited: Sequence[str], shown: int = 3) -> str:
    """`ops.csv, 0_job/metrics.json, 1_job/metrics.json and 40 more`: what edited_tables found, in
    a line (tables copied in from another sweep change every record it lists)."""
    more = f" and {len(edited) - shown} more" if len(edited) > shown else ""
    return f"{', '.join(edited[:shown])}{more}"


def edited_tables(folder: Path, tables: Collection[str] | None = None) -> list[str]:
    """The tables tables.sha256 lists (of `tables`, where given: the files a reader reads) whose
    bytes are not those the analysis wrote: `ops.csv` edited by hand or by another program,
    `ops.csv (removed)`; and the job records it lists that are not those the tables were made
    from (`0_job/metrics.json`: a job run again, or tables and checksums copied in from another
    sweep; helper-59), whatever the reader reads, since every table rests on them; [] without
    tables.sha256 (an analysis by an older profsweep, or one stopped before its end) or where it
    cannot be read as one (a link, a pipe, too large)."""
    try:
        with _open_plain(folder / CHECKSUMS_FILE) as f:
            lines = f.read(CHECKSUMS_MAX_BYTES + 1).decode("utf-8").splitlines()
    except (OSError, ValueError):
        return []
    if sum(len(line) + 1 for line in lines) > CHECKSUMS_MAX_BYTES:
        return []
    edited = []
    for line in lines:
        digest, _, name = line.partition(" ")
        name = name[1:] if name[:1] in " *" else name  # sha256sum's text and binary forms
        record = bool(RECORD_NAME.match(name))
        if not record and (not TABLE_NAME.match(name) or (tables is not None and name not in tables)):
            continue  # only a table of the folder itself, one the reader reads, or a record
        try:
            if _sha256(folder / name) != digest:
                edited.append(name)
        except FileNotFoundError:  # a record gone with its job folder is not an edit: an archive keeps the tables
            if not record or (folder / name).parent.is_dir():
                edited.append(f"{name} (removed)")
        except OSError:  # no longer a plain file (a link, a pipe): not what the analysis wrote
            edited.append(name)
    return edited
