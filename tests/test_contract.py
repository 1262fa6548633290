"""The artifact contract (profsweep.contract): the writes both sides make and what a record says."""

from __future__ import annotations

import errno
import json
import os

import pytest

from profsweep import contract


def test_an_atomic_write_leaves_the_whole_file_or_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "metrics.json"
    contract.write_json(path, {"status": "ok"})
    assert json.loads(path.read_text()) == {"status": "ok"}  # the folder was made, the file whole

    def full(fd, *args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as raised:
        contract.write_json(path, {"status": "failed"})
    assert contract.disk_full(raised.value)
    assert json.loads(path.read_text()) == {"status": "ok"}  # the old file, untouched
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]  # no temp file left


def test_an_interrupt_during_a_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        contract.atomic_write_text(tmp_path / "summary.csv", "a,b\n")
    assert list(tmp_path.iterdir()) == []


def test_trace_files_read_lists_and_the_older_joined_text():
    assert contract.trace_files({"trace_file": "a.json;b.json"}) == ["a.json", "b.json"]
    assert contract.trace_files({"trace_file": ["a.json", "b.json"]}) == ["a.json", "b.json"]
    assert contract.trace_files({"trace_file": None}) == contract.trace_files({}) == []


def test_a_usable_job_finished_ok_with_a_readable_trace():
    assert contract.usable({"status": "ok", "trace_error": None})
    assert not contract.usable({"status": "ok", "trace_error": "not a Chrome trace"})
    assert not contract.usable({"status": "failed"})
    assert not contract.disk_full(OSError(errno.EACCES, "denied"))
    assert contract.disk_full(OSError(errno.EDQUOT, "quota"))


def test_the_file_names_are_declared_once():
    """Each artifact name is a literal in profsweep/contract.py and nowhere else in the sources."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    names = [contract.METRICS_FILE, contract.PLAN_FILE, contract.ENVIRONMENT_FILE, contract.SUMMARY_FILE]
    for package in ("experiments", "analysis", "hydra_plugins", "profsweep"):
        for source in (root / package).rglob("*.py"):
            if source.name == "contract.py":
                continue
            text = source.read_text()
            for name in names:
                assert f'"{name}"' not in text and f"'{name}'" not in text, f"{source}: {name}"


def test_a_grid_points_jobs_and_a_records_tables_read_alike_from_lists_text_and_empty_cells():
    assert contract.point_jobs({"jobs": "0_a;7_a_r2", "job": "0_a"}) == ["0_a", "7_a_r2"]
    assert contract.point_jobs({"jobs": float("nan"), "job": "0_a"}) == ["0_a"]  # a CSV's empty cell
    assert contract.table_files({"table_file": ["a.txt"]}) == ["a.txt"]
    assert contract.trace_files({"trace_file": float("nan")}) == []


def test_a_new_sweep_in_the_same_process_starts_with_nothing_failed_or_stopped():
    from profsweep.sweep_state import SweepState

    state = SweepState()
    state.stop("disk full: x")
    state.analysis_failed.append("analysis interrupted")
    state.analysis_interrupted = True
    state.durations.append(1.0)
    state.reset()
    assert not state.stopped and state.disk_error is None and state.durations == []
    assert state.analysis_failed == [] and not state.analysis_interrupted


def test_one_flattening_rule_for_the_record_the_summary_and_ignore():
    from profsweep.columns import flat_key

    assert flat_key("workload.hidden") == "workload_hidden"
    assert flat_key("compiler.mode") == "compile_mode" and flat_key("profiler.active") == "profiler_active"
    assert flat_key("run.threads") == "threads" and flat_key("size") == "size"


def test_a_flag_reads_alike_as_written_to_json_and_read_back_from_csv(tmp_path):
    import numpy as np
    import pandas as pd

    pd.DataFrame({"noisy": [True, False, None]}).to_csv(tmp_path / "t.csv", index=False)
    read = pd.read_csv(tmp_path / "t.csv")["noisy"].tolist()  # object: True, False, NaN
    as_text = pd.read_csv(tmp_path / "t.csv", dtype=str, keep_default_na=False)["noisy"].tolist()
    assert [contract.flag(v) for v in read] == [contract.flag(v) for v in as_text] == [True, False, False]
    assert all(contract.flag(v) for v in (True, "True", "true", " TRUE ", 1, "1", 1.0, np.True_))
    assert not any(contract.flag(v) for v in (False, "False", "false", 0, "0", None, float("nan"), "", "yes", 2))


def test_a_count_takes_its_noun_singular_for_one():
    from profsweep.contract import amount

    assert [amount(n, noun) for n, noun in ((1, "job"), (0, "job"), (2, "job"), (1, "process"), (3, "process"),
                                            (1, "grid point"), (1000, "sweep"), (1, "pair"))] == [
        "1 job", "0 jobs", "2 jobs", "1 process", "3 processes", "1 grid point", "1,000 sweeps", "1 pair"]


def test_usable_says_the_same_on_a_row_a_table_and_in_sql():
    """One definition (contract.USABLE) read three ways: a row, a pandas table, the store's SQL."""
    import duckdb
    import pandas as pd

    from profsweep.contract import GridPoint, usable, usable_rows, usable_sql

    cases = [("ok", None), ("ok", ""), ("ok", float("nan")), ("ok", "truncated"), ("failed", None),
             ("missing", None), ("skipped", None), (None, None)]
    rows = [{"job": str(i), "status": s, "trace_error": e} for i, (s, e) in enumerate(cases)]
    expected = ["0", "1", "2"]
    assert [r["job"] for r in rows if usable(r)] == expected
    assert [r["job"] for r in rows if GridPoint(r).usable] == expected
    frame = pd.DataFrame(rows)
    assert list(usable_rows(frame)["job"]) == expected
    con = duckdb.connect()
    con.register("t", frame)
    assert [j for (j,) in con.execute(f"SELECT job FROM t WHERE {usable_sql(frame.columns)} ORDER BY job").fetchall()] \
        == expected
    # without a trace_error column every ok job is usable; without a status column none is
    bare = frame.drop(columns="trace_error")
    assert list(usable_rows(bare)["job"]) == ["0", "1", "2", "3"] == [r["job"] for r in rows if usable(
        {k: v for k, v in r.items() if k != "trace_error"})]
    assert usable_rows(frame.drop(columns="status")).empty and usable_sql(["trace_error"]) == "false"


def test_a_grid_point_is_read_only_and_owns_its_label_identity_and_series():
    from profsweep.contract import SERIES_KEYS, GridPoint, Job

    point = GridPoint({"job": "3_matmul_add_64_bf16_cold_eager_r2", "workload": "matmul_add", "variant": "matmul_add",
                       "size": 64, "dtype": "bf16", "compile": False, "warmup": False, "train": False, "device": "cpu",
                       "status": "ok", "trace_error": None, "jobs": "0_a;3_matmul_add_64_bf16_cold_eager_r2"})
    with pytest.raises(TypeError):
        point["size"] = 128
    bigger = point.replace(size=128)
    assert type(bigger) is GridPoint and bigger["size"] == 128 and point["size"] == 64
    assert point.label() == "matmul_add size=64 bf16 cold eager" == Job(point).label()
    assert point.label(without=("size",)) == "matmul_add bf16 cold eager"
    assert point.jobs == ["0_a", "3_matmul_add_64_bf16_cold_eager_r2"]
    assert point.identity(["size", "compile", "threads"]) == ("64", "False", "auto")
    assert point.series_key("threads=1") == (*(str(point[k]) for k in SERIES_KEYS), "threads=1")
    assert point.series_key("", without="compile") == ("matmul_add", "matmul_add", "bf16", "False", "False", "cpu", "")
    assert point == dict(point) and dict(**point)["dtype"] == "bf16"
