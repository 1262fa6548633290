"""What a sweep's progress lines say, from what is on disk: how many jobs the sweep plans
(sweep.json), durations in words, and each job's outcome from its metrics.json.

Neutral: the job side (experiments) and the grid sweeper (hydra_plugins) both print progress
lines, and neither imports the other.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
from pathlib import Path
from typing import Any, Iterator

from profsweep.contract import METRICS_FILE, PLAN_FILE, UNFINISHED, one_line, read_json


def planned_jobs(sweep_dir: Path) -> int | None:
    """The jobs the sweep in `sweep_dir` plans so far (sweep.json), or None where it does not say."""
    try:
        return int(read_json(sweep_dir / PLAN_FILE)["jobs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def duration(seconds: float, rough: bool = False) -> str:
    """`42 s`, `3 min 10 s`, `2 h 5 min`; rough: `~14 min` style (one unit below an hour)."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        if rough:
            return f"{round(seconds / 60)} min"
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


@contextlib.contextmanager
def reported_from_disk(sweep_dir: Path, numbers: range, every_s: float = 1.0) -> Iterator[None]:
    """While a launcher runs the jobs `numbers` where their output cannot reach this terminal
    (submitit writes it into .submitit/), print each job's progress line once its record is on
    disk: `[4/12] 3_matmul_add_48_bf16_cold_eager ok 1.4 s`. A record left by an earlier run (a
    job resume skips) is not reported as new."""
    total = planned_jobs(sweep_dir)
    before = {name: _mtime(sweep_dir / name / METRICS_FILE) for name in _job_folders(sweep_dir, numbers)}
    reported: set[str] = set()
    stop = threading.Event()

    def scan(last: bool = False) -> None:
        for name in _job_folders(sweep_dir, numbers):
            path = sweep_dir / name / METRICS_FILE
            stamp = _mtime(path)
            if name in reported or stamp is None or stamp == before.get(name):
                continue
            try:
                record = read_json(path)
            except (OSError, ValueError):
                continue  # not there yet, or not whole: the next look
            if isinstance(record, dict) and record.get(UNFINISHED) is True and not last:
                continue  # the record from before the job started: its own is to come
            reported.add(name)
            print(f"[{int(name.split('_', 1)[0]) + 1}/{total or '?'}] {name} {_outcome(record)}", flush=True)

    def watch() -> None:
        while not stop.wait(every_s):
            scan()

    watcher = threading.Thread(target=watch, name="progress-from-disk", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        scan(last=True)  # the launcher has returned: a record still unfinished is the job's last word


def _job_folders(sweep_dir: Path, numbers: range) -> list[str]:
    try:
        names = os.listdir(sweep_dir)
    except OSError:
        return []
    found = []
    for name in names:
        number = name.split("_", 1)[0]
        if number.isdigit() and int(number) in numbers:
            found.append(name)
    return sorted(found, key=lambda n: int(n.split("_", 1)[0]))


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _outcome(record: Any) -> str:
    """`ok 1.4 s`, `failed: why`, `skipped: why`, from a record as found on disk."""
    if not isinstance(record, dict):
        return "failed: its metrics.json is not a record"
    seconds = ""
    try:
        took = (datetime.datetime.fromisoformat(str(record["finished_at"]))
                - datetime.datetime.fromisoformat(str(record["started_at"]))).total_seconds()
        seconds = f" {took:.1f} s"
    except (KeyError, ValueError, TypeError):
        pass
    status = record.get("status")
    if status == "ok":
        return f"ok{seconds}"
    return f"{status if status == 'skipped' else 'failed'}: {one_line(record.get('error') or 'no reason recorded')}"
