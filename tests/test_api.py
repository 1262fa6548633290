"""profsweep's Python API and its one command, as a notebook user and a shell user meet them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import profsweep
from analysis.api import ProfsweepError
from tests.conftest import ROOT, job_dirs


@pytest.mark.slow
def test_the_example_notebook_runs_cell_by_cell(tmp_path, monkeypatch, capsys):
    """examples/tour.ipynb, its code cells executed in order in one namespace (as a kernel would)."""
    monkeypatch.setenv("PROFSWEEP_TOUR_DIR", str(tmp_path))
    notebook = json.loads((ROOT / "examples" / "tour.ipynb").read_text())
    namespace: dict = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), "tour.ipynb", "exec"), namespace)  # noqa: S102
    sweep, again, comparison = namespace["sweep"], namespace["again"], namespace["comparison"]
    assert len(sweep.summary) == 2 and sweep.conclusions  # one row per grid point
    assert set(sweep.summary["size"]) == {16, 64}
    assert len(comparison.table) == 2  # the grid points paired
    # every pair judged with an interval (two processes a side); an A/A's verdicts are this machine's
    # (tested on hand-made sweeps in test_compare.py), not asserted here
    assert sum(comparison.verdicts.values()) == 2
    assert comparison.table[["interval_low", "interval_high"]].notna().all().all()
    assert "profsweep:" in sweep._repr_html_() and "<img" in sweep._repr_html_()
    assert namespace["figure"].axes


def test_load_reads_an_analysed_sweep_and_analyses_one_that_is_not(tmp_path):
    from tests.conftest import job

    folder = tmp_path / "sweep"
    job(folder, 0, size=64, compile=False, step_us=400, mm_us=200, timed_us=100)
    job(folder, 1, size=1024, compile=False, step_us=4000, mm_us=3000, timed_us=1300)
    sweep = profsweep.load(folder)  # not analysed yet: analysed now
    assert (folder / "summary.csv").is_file() and (folder / "conclusions.json").is_file()
    assert list(sweep.summary["size"]) == [64, 1024]
    assert isinstance(sweep.ops, pd.DataFrame) and set(sweep.top_ops["name"]) >= {"aten::mm"}
    assert any("overhead" in c for c in sweep.conclusions)
    assert sweep.figure("crossover").axes
    with pytest.raises(ProfsweepError, match="figure 'nope' is not one this sweep draws: choose one of"):
        sweep.figure("nope")
    with pytest.raises(ProfsweepError, match="no such folder"):
        profsweep.load(tmp_path / "missing")
    same = sweep.compare(folder)
    assert len(same.table) == 2 and same.verdicts["same"] == 2  # a sweep against itself


def test_a_sweep_resumed_after_its_analysis_is_loaded_analysed_anew_and_served_with_a_warning(tmp_path):
    import os

    from analysis.serve import stale_report
    from tests.conftest import job

    folder = tmp_path / "sweep"
    job(folder, 0, size=64, compile=False, step_us=400, mm_us=200, timed_us=100)
    job(folder, 1, size=1024, compile=False, step_us=4000, mm_us=3000, timed_us=1300)
    assert list(profsweep.load(folder).summary["size"]) == [64, 1024] and stale_report(folder) == ""
    job(folder, 2, size=4096, compile=False, step_us=9000, mm_us=8000, timed_us=7000)  # resumed, stopped before
    analysed = max(table.stat().st_mtime_ns for table in folder.glob("summary.*"))
    for n, after in ((0, -10 ** 10), (1, -10 ** 10), (2, 10 ** 6)):  # 0 and 1 before the analysis, 2 after it
        at = analysed + after
        os.utime(next(folder.glob(f"{n}_*")) / "metrics.json", ns=(at, at))
    assert stale_report(folder).startswith(f"{folder}: its analysis is older than 1 job record (2_")
    with pytest.warns(UserWarning, match="its analysis is older than 1 job record .*analyse=True"):
        assert list(profsweep.load(folder, analyse=False).summary["size"]) == [64, 1024]
    # a folder this user may read but not write: the tables written before, with a warning
    from analysis import files

    def refused(*_, **__):
        raise files.WriteError("cannot write summary.csv: Permission denied")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "atomic_write_text", refused)
        with pytest.warns(UserWarning, match="it cannot be analysed anew here"):
            assert list(profsweep.load(folder).summary["size"]) == [64, 1024]
    assert list(profsweep.load(folder).summary["size"]) == [64, 1024, 4096]  # analysed anew
    assert stale_report(folder) == ""


def test_tables_not_made_from_the_folders_records_are_analysed_anew_and_unreadable_ones_named(tmp_path):
    """helper-59: another sweep's tables copied in with their tables.sha256 were loaded as this
    sweep's; an unreadable summary.csv raised a bare PermissionError."""
    import shutil

    from tests.conftest import job

    steps = {}
    for name, timed in (("a", 100), ("b", 300)):
        job(tmp_path / name, 0, size=64, compile=False, step_us=400, mm_us=200, timed_us=timed)
        steps[name] = profsweep.load(tmp_path / name).summary["timed_us_per_step"].tolist()
    assert steps["a"] != steps["b"]
    for f in (tmp_path / "a").iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / "b" / f.name)
    with pytest.warns(UserWarning, match=r"its tables are not those its analysis wrote from its job records \(0_"):
        assert profsweep.load(tmp_path / "b", analyse=False).summary["timed_us_per_step"].tolist() == steps["a"]
    with pytest.warns(UserWarning, match="analysed anew from its job records"):
        assert profsweep.load(tmp_path / "b").summary["timed_us_per_step"].tolist() == steps["b"]  # analysed anew
    # an archive (its job folders gone) whose table was edited is read as it is, never analysed over
    # from no records (helper-60: load wiped its report and wrote empty tables)
    for gone in (tmp_path / "b").glob("0_*"):
        shutil.rmtree(gone)
    (tmp_path / "b" / "ops.csv").write_text((tmp_path / "b" / "ops.csv").read_text() + "\n")
    with pytest.warns(UserWarning, match="ops.csv changed since.*it keeps no job records to analyse anew from"):
        assert profsweep.load(tmp_path / "b").summary["timed_us_per_step"].tolist() == steps["b"]
    assert (tmp_path / "b" / "report.html").is_file()
    if os.geteuid() == 0:
        return  # root reads a file whatever its mode
    (tmp_path / "b" / "ops.csv").chmod(0)
    with pytest.raises(ProfsweepError, match=r"ops.csv: unreadable \(Permission denied\)"):
        profsweep.load(tmp_path / "b", analyse=False).ops


def test_a_job_folder_removed_after_the_analysis_is_not_loaded_from_the_old_tables(tmp_path, capsys):
    """helper-34: a job folder removed (rm -rf) after the analysis was still in profsweep.load's
    jobs and in history's store. With every job folder gone the tables are all there is (a sweep
    archived without its traces): they are read as they are."""
    import shutil

    from analysis.__main__ import main
    from analysis.serve import stale_report
    from tests.conftest import job

    folder = tmp_path / "sweep"
    for n, size in enumerate((64, 1024, 4096)):
        job(folder, n, size=size, compile=False, step_us=400 * (n + 1), mm_us=200 * (n + 1), timed_us=100 * (n + 1))
    assert len(profsweep.load(folder).jobs) == 3
    shutil.rmtree(next(folder.glob("2_*")))
    assert stale_report(folder).startswith(f"{folder}: 1 job its analysis names is gone from it (2_")
    with pytest.warns(UserWarning, match="1 job its analysis names is gone from it"):
        assert len(profsweep.load(folder, analyse=False).jobs) == 3
    assert main(["history", str(folder), "--out", str(tmp_path / "h")]) == 0
    assert "1 job its analysis names is gone from it" in capsys.readouterr().err
    assert main(["sql", str(tmp_path / "h"), "SELECT count(*) AS n FROM repeats", "--csv"]) == 0
    assert capsys.readouterr().out == "n\n2\n"
    assert list(profsweep.load(folder).summary["size"]) == [64, 1024]  # analysed anew
    assert stale_report(folder) == ""
    for gone in folder.glob("[0-9]_*"):  # every job folder: the tables are what was kept (an archive)
        shutil.rmtree(gone)
    assert stale_report(folder) == "" and len(profsweep.load(folder).jobs) == 2
    # a single run's one job is named after its folder: renamed or copied, no job of it is gone (helper-35)
    run = job(tmp_path / "runs", 0, size=64, compile=False, step_us=400, mm_us=200, timed_us=100)
    profsweep.load(run)
    shutil.copytree(run, tmp_path / "renamed_run")
    assert stale_report(tmp_path / "renamed_run") == ""


def test_the_profsweep_command_lists_its_subcommands_and_runs_them(tmp_path):
    exe = [sys.executable, "-m", "profsweep.cli"]
    done = subprocess.run([*exe, "--help"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0
    for command in ("run", "analyse", "compare", "history", "serve", "sql", "trace"):
        assert f"\n  {command} " in done.stdout
    for command in ("compare", "history", "sql", "trace", "serve", "analyse"):
        helped = subprocess.run([*exe, command, "--help"], cwd=ROOT, capture_output=True, text=True)
        assert helped.returncode == 0 and f"usage: profsweep {command}" in helped.stdout and "example:" in helped.stdout
    wrong = subprocess.run([*exe, "sweep"], cwd=ROOT, capture_output=True, text=True)
    assert wrong.returncode == 2 and "profsweep 'sweep' is not a command: choose one of run, analyse" in wrong.stderr


@pytest.mark.slow
def test_profsweep_run_runs_a_sweep_as_experiments_run_does(tmp_path):
    folder = tmp_path / "sweep"
    done = subprocess.run([sys.executable, "-m", "profsweep.cli", "run", "-m", "size=16,32", "run.repeats=1",
                           f"hydra.sweep.dir={folder}"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done: 2 jobs (2 ok, 0 failed)" in done.stdout and len(job_dirs(folder)) == 2
    assert (folder / "report.html").is_file()


def test_a_sweep_whose_every_job_failed_has_tables_and_no_figure(tmp_path):
    """Every job failed (a timeout): the tables read as empty, and a figure is refused by name."""
    from tests.conftest import hand_made_job

    job = hand_made_job(tmp_path / "s", 0, [100.0])
    record = json.loads((job / "metrics.json").read_text())
    record.update(status="failed", error="timed out after 5 s (run.job_timeout_s)", trace_file=None)
    (job / "metrics.json").write_text(json.dumps(record))
    sweep = profsweep.load(tmp_path / "s")
    assert sweep.table("steps").empty and sweep.table("kernels").empty and len(sweep.repeats) == 1
    with pytest.raises(ProfsweepError, match=r"no figure: no job of .* finished with a readable trace \(1 job, 1 failed"):
        sweep.figure("crossover")


def test_names_stay_text_in_the_tables_a_notebook_reads(tmp_path):
    """Job folders named 0, 1, 2 (hydra.sweep.subdir=${hydra.job.num}) are names, not numbers."""
    from tests.conftest import hand_made_point, processes

    for k, path in enumerate(hand_made_point(tmp_path / "s", 0, processes(100))):
        path.rename(path.parent / str(k))
    sweep = profsweep.load(tmp_path / "s")
    assert sorted(sweep.repeats["job"]) == ["0", "1", "2"]
    assert sweep.summary["job"].tolist() == ["0"] and sweep.summary["jobs"].tolist() == ["0;1;2"]


def test_a_comparison_says_what_failed_and_what_has_no_partner(tmp_path):
    """A grid point that failed in NEW has no pair and no verdict: `failed` names it (before, only
    the undocumented result dict did), and `unmatched` the points of one side only."""
    from tests.conftest import hand_made_point, processes

    base, new = tmp_path / "base", tmp_path / "new"
    hand_made_point(base, 0, processes(100))
    hand_made_point(base, 1, processes(300), size=16)
    hand_made_point(new, 0, processes(100))
    for record_file in hand_made_point(new, 1, processes(300), size=16):
        record = json.loads((record_file / "metrics.json").read_text())
        record.update(status="failed", error="RuntimeError: boom at 16")
        (record_file / "metrics.json").write_text(json.dumps(record))
    hand_made_point(new, 2, processes(300), size=32)
    comparison = profsweep.load(base).compare(new)
    assert comparison.verdicts == {"slower": 0, "faster": 0, "same": 1, "inconclusive": 0}
    failed = comparison.failed
    assert list(failed["side"]) == ["NEW"] and failed["error"].iloc[0] == "RuntimeError: boom at 16"
    assert failed["measured_job"].iloc[0].startswith("1_matmul_add_16")
    assert comparison.unmatched == {"BASE": [], "NEW": ["2_matmul_add_32_bf16_cold_eager"]}


def test_compare_and_history_take_the_band_and_refuse_one_out_of_range(tmp_path):
    """NEW 3% slower, its processes alike: the same within the default ±5%, slower within ±1%."""
    from tests.conftest import hand_made_point, processes

    base, new = tmp_path / "base", tmp_path / "new"
    hand_made_point(base, 0, processes(100, between=0.002, within=0.01))
    hand_made_point(new, 0, processes(103, between=0.002, within=0.01))
    sweep = profsweep.load(base)
    assert sweep.compare(new).verdicts["same"] == 1
    assert sweep.compare(new, band=0.01).verdicts["slower"] == 1
    for bad in (2, -0.5, 0, 0.6):
        with pytest.raises(ProfsweepError, match=f"band={bad!r} is not allowed: give a fraction above 0 and at most 0.5"):
            sweep.compare(new, band=bad)
        with pytest.raises(ProfsweepError, match=f"band={bad!r} is not allowed"):
            profsweep.history([base, new], out=tmp_path / "h", band=bad)
    assert not (tmp_path / "h").exists()
