"""`python -m analysis history SWEEP...` and `python -m analysis sql DB QUERY`: the store and its
incremental ingest, the changes found, placed and judged over synthetic histories whose answer is
known (sweep folders written here row by row, each repeat's value drawn with a seeded noise
between repeats and between sweeps), the gate, the refusals, and real sweeps (slow). Nothing
asserts a timing of this machine."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("duckdb")

from analysis.history import changes  # noqa: E402
from analysis.__main__ import main  # noqa: E402
from analysis.history.engine import judge  # noqa: E402
from tests.conftest import ROOT, run_cli  # noqa: E402
from tests.conftest import hand_made_point, processes  # noqa: E402

KEYS = {"workload": "matmul_add", "dtype": "bf16", "compile": False, "warmup": True, "train": False, "device": "cpu",
        "threads": "auto"}


# --- synthetic sweep folders, written as the analysis writes them ---------------------------------------


def write_sweep(folder: Path, day: int, points: dict[int, list[float | None]], *, torch: str = "2.12.0",
                commit: str = "a" * 40, parquet: bool = False, report: bool = True, probe: float | None = None,
                loaded: str = "", cache: float | None = None) -> Path:
    """An analysed sweep started on December `day`: per size, its repeats' un-profiled median
    steps in µs (None: a failed job); `probe`: every job's speed_probe_us (`cache`: its
    cache_probe_us); `loaded`: every point's
    noise_reason, measured on a loaded machine. Each job's ops: aten::mm takes 60% of its step, aten::add 10%,
    plus the workload's annotation and ProfilerStep#, as ops.csv records them."""
    folder.mkdir(parents=True)
    created = f"2026-12-{day:02d}T02:00:00.000+00:00"
    (folder / "sweep.json").write_text(json.dumps({"created_at": created, "command": ["experiments/run.py", "-m"]}))
    (folder / "environment.json").write_text(json.dumps({
        "created_at": created, "torch_version": torch, "git_commit": commit, "hostname": "ci", "cpu_count": 2,
        "gpus": [], "command": ["experiments/run.py", "-m", f"hydra.sweep.dir={folder}"]}))
    summary, repeats, ops = [], [], []
    num = 0
    for size, values in points.items():
        jobs = []
        for r, value in enumerate(values, 1):
            job = f"{num}_matmul_add_{size}_bf16_warm_eager" + (f"_r{r}" if r > 1 else "")
            num += 1
            jobs.append(job)
            ok = value is not None
            repeats.append({"job": job, "config_hash": f"h{size}", "repeat": r, **KEYS, "size": size,
                            "status": "ok" if ok else "failed", "error": None if ok else "RuntimeError: boom",
                            "trace_error": None, "timed_us_per_step": value, "host_us_per_step": value,
                            "steps": 3 if ok else None, "platform": "cpu" if ok else None,
                            "trace_file": "t.json" if ok else None, "speed_probe_us": probe, "cache_probe_us": cache})
            if ok:
                ops += [{"job": job, "name": name, "calls": 3, "self_host_us": share * value * 3, "self_device_us": 0.0,
                         "compute_calls": 3, "category": category}
                        for name, share, category in (("aten::mm", 0.6, "cpu_op"), ("aten::add", 0.1, "cpu_op"),
                                                      ("matmul_add", 0.05, "user_annotation"),
                                                      ("ProfilerStep#2", 0.05, "user_annotation"))]
                (folder / job).mkdir()
                (folder / job / "t.json").write_text("{}")
        good = [v for v in values if v is not None]
        summary.append({"job": jobs[0], "jobs": ";".join(jobs), "config_hash": f"h{size}", **KEYS, "size": size,
                        "variant": "matmul_add", "status": "ok" if good else "failed", "trace_error": None,
                        "timed_us_per_step": float(np.median(good)) if good else None, "repeats": len(good),
                        "repeats_failed": len(values) - len(good), "noisy": bool(loaded), "noise_load": bool(loaded),
                        "noise_reason": loaded})
    frame = pd.DataFrame(summary)
    if parquet:
        frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object}).to_parquet(
            folder / "summary.parquet", index=False)
    frame.to_csv(folder / "summary.csv", index=False)
    pd.DataFrame(repeats).to_csv(folder / "repeats.csv", index=False)
    pd.DataFrame(ops).to_csv(folder / "ops.csv", index=False)
    if report:
        (folder / "report.html").write_text("<html>report</html>")
    return folder


def noisy(level: float, rng: np.random.Generator, repeats: int = 3, within: float = 0.1) -> list[float]:
    return [float(level * math.exp(rng.normal(0, within))) for _ in range(repeats)]


def draw(sweeps: int, sizes=(8, 16, 32, 64, 128), *, step: tuple[int, int, float] | None = None, seed: int = 0,
         between: float = 0.05, within: float = 0.1) -> list[dict[int, list[float]]]:
    """Per sweep and size its 3 repeats' values: each size's level 10 µs × size, each sweep off by a
    factor drawn with sd `between` (the machine that day), each repeat by one with sd `within`;
    `step` = (size, first sweep index, factor) changes one grid point from that sweep on."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(sweeps):
        day = rng.normal(0, between)
        out.append({size: noisy(10.0 * size * (step[2] if step and size == step[0] and i >= step[1] else 1.0)
                                * math.exp(day), rng, within=within) for size in sizes})
    return out


def history_of(root: Path, sweeps: int, sizes=(8, 16, 32, 64, 128), *, step: tuple[int, int, float] | None = None,
               seed: int = 0, between: float = 0.05, within: float = 0.1, **kwargs) -> list[Path]:
    """The sweeps of `draw`, written as s01, s02, ... on consecutive days; torch 2.13.0 from the step on."""
    drawn = draw(sweeps, sizes, step=step, seed=seed, between=between, within=within)
    return [write_sweep(root / f"s{i + 1:02d}", i + 1, points, torch="2.13.0" if step and i >= step[1] else "2.12.0",
                        **kwargs) for i, points in enumerate(drawn)]


def history(*args: object, capsys) -> tuple[int, str, str]:
    code = main(["history", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def sql(*args: object, capsys) -> tuple[int, str, str]:
    code = main(["sql", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- changes found, placed and judged -----------------------------------------------------------------


def test_a_2x_step_at_sweep_6_of_10_is_found_there_and_nowhere_else(tmp_path, capsys):
    sweeps = history_of(tmp_path / "nightly", 10, step=(32, 5, 2.0))
    code, out, _ = history(tmp_path / "nightly", "--fail-on-change", "1.5", capsys=capsys)
    assert code == 1  # a confirmed regression beyond 1.5
    assert "ingested 10 new sweeps, 0 already in the store" in out
    found = pd.read_csv(tmp_path / "nightly" / "history" / "regressions.csv")
    assert len(found) == 1, found
    row = found.iloc[0]
    assert row["size"] == 32 and row["status"] == "regression"
    assert row["change_at"] == str(sweeps[5].resolve()) and row["before_sweep"] == str(sweeps[4].resolve())
    assert row["sweeps_before"] == 5 and row["sweeps_after"] == 5
    assert row["ratio_low"] < 2.0 < row["ratio_high"] and row["ratio_low"] > 1.05
    assert row["before_us"] == pytest.approx(320, rel=0.1) and row["after_us"] == pytest.approx(640, rel=0.1)
    # what changed at the step: torch, and aten::mm's time per step first (annotations are not ops)
    assert row["what_changed"].startswith("torch 2.12.0 → 2.13.0: aten::mm +")
    assert "matmul_add" not in row["what_changed"] and "ProfilerStep" not in row["what_changed"]
    assert "regression   matmul_add size=32 bf16 warm eager at" in out and "no change at the other 4 grid points" in out
    assert "regression beyond 1.5: matmul_add size=32 bf16 warm eager" in out
    # the gate passes a regression within its ratio
    code, out, _ = history(tmp_path / "nightly", "--fail-on-change", "3", capsys=capsys)
    assert code == 0 and "ingested 0 new sweeps, 10 already in the store" in out
    trends = pd.read_csv(tmp_path / "nightly" / "history" / "trends.csv")
    assert len(trends) == 50 and (trends.groupby("point").size() == 10).all()
    assert trends.loc[trends["change"] == "regression", "sweep"].tolist() == ["s06"]


@pytest.mark.parametrize("machine", [2.0, 1.0])
def test_a_step_the_machines_speed_probe_made_too_is_not_confirmed(tmp_path, capsys, machine):
    # From sweep 4 of 8 on, another tenant of the machine's cores is busy: the probe takes `machine`
    # times as long and the steps at size 32 1.4x (the other sizes, overhead-bound, not at all)
    drawn = draw(8, between=0.01, within=0.02)
    for i, points in enumerate(drawn):
        if i >= 3:
            points[32] = [v * 1.4 for v in points[32]]
        write_sweep(tmp_path / f"s{i + 1}", i + 1, points, probe=6.5 * (machine if i >= 3 else 1.0))
    code, out, _ = history(tmp_path, "--fail-on-change", "1.2", capsys=capsys)
    found = pd.read_csv(tmp_path / "history" / "regressions.csv")
    assert found[["size", "change_at"]].values.tolist() == [[32, str((tmp_path / "s4").resolve())]], out
    row = found.iloc[0]
    assert row["ratio_low"] > 1.05
    if machine == 2.0:  # relative to the probe the step is 0.7x: the machine's, not the code's
        assert row["status"] == "unconfirmed" and code == 0, out
        assert "speed probe took 2.00x as long from this sweep on" in row["noise"]
        assert row["speed_probe_ratio"] == pytest.approx(2.0)
        # said as the probe's move, not as a loaded machine (no sweep of it was: helper-43)
        assert "[the machine's speed probe took 2.00x as long with it: see regressions.csv]" in out, out
        assert "loaded machine" not in out
    else:  # the probe within the band: nothing to say
        assert row["status"] == "regression" and code == 1, out
        assert pd.isna(row["speed_probe_ratio"]) and pd.isna(row["noise"])


def test_a_step_the_machines_cache_probe_made_too_is_not_confirmed(tmp_path, capsys):
    # the matmul probe stands still while the cache probe (what the two modes of an overhead-bound
    # step moved on this project's VM, docs/numbers.md) takes twice as long with the 1.4x step
    drawn = draw(8, between=0.01, within=0.02)
    for i, points in enumerate(drawn):
        if i >= 3:
            points[32] = [v * 1.4 for v in points[32]]
        write_sweep(tmp_path / f"s{i + 1}", i + 1, points, probe=6.5, cache=25.0 * (2.0 if i >= 3 else 1.0))
    code, out, _ = history(tmp_path, "--fail-on-change", "1.2", capsys=capsys)
    row = pd.read_csv(tmp_path / "history" / "regressions.csv").iloc[0]
    assert row["status"] == "unconfirmed" and code == 0 and row["ratio_low"] > 1.05, out
    assert "the machine's cache probe took 2.00x as long from this sweep on" in row["noise"], row["noise"]
    assert row["cache_probe_ratio"] == pytest.approx(2.0) and pd.isna(row["speed_probe_ratio"])
    assert "[the machine's cache probe took 2.00x as long with it: see regressions.csv]" in out, out


def test_an_unconfirmed_step_names_the_loaded_sweep_that_vetoed_it(tmp_path, capsys):
    """A 2x step at sweep 3 of 5, the probe moved 0.85x with it (relative to it the step still
    stands): the sweep after the step's first (a confirming one) was measured on a loaded machine,
    which alone leaves the step unconfirmed, and the noise names it (it named the probe only, as if
    the probe had vetoed it)."""
    for i in range(5):
        points = {size: [10.0 * size * (2.0 if i >= 2 and size == 32 else 1.0) * f for f in (0.99, 1.0, 1.01)]
                  for size in (8, 32)}
        write_sweep(tmp_path / f"s{i + 1}", i + 1, points, probe=6.5 * (0.85 if i >= 2 else 1.0),
                    loaded="runnable tasks waited for a CPU 27% of the time" if i == 3 else "")
    code, out, _ = history(tmp_path, "--fail-on-change", "1.2", capsys=capsys)
    found = pd.read_csv(tmp_path / "history" / "regressions.csv")
    assert found[["size", "status"]].values.tolist() == [[32, "unconfirmed"]], out
    assert code == 0 and "confirming (s4): runnable tasks waited for a CPU 27% of the time" in found.loc[0, "noise"]
    assert "speed probe took 0.85x" in found.loc[0, "noise"]
    assert "[measured on a loaded machine: see noise in regressions.csv]" in out, out


def test_a_step_with_another_torch_is_judged_without_the_probe(tmp_path, capsys):
    # torch's own matmul is the probe: where torch changed with the step, the probe's change is part
    # of what changed, and the step (1.4x, the probe 2x) is confirmed
    drawn = draw(8, between=0.01, within=0.02)
    for i, points in enumerate(drawn):
        if i >= 3:
            points[32] = [v * 1.4 for v in points[32]]
        write_sweep(tmp_path / f"s{i + 1}", i + 1, points, probe=6.5 * (2.0 if i >= 3 else 1.0),
                    torch="2.13.0" if i >= 3 else "2.12.0")
    code, out, _ = history(tmp_path, "--fail-on-change", "1.2", capsys=capsys)
    found = pd.read_csv(tmp_path / "history" / "regressions.csv")
    assert found[["size", "status"]].values.tolist() == [[32, "regression"]] and code == 1, out
    assert pd.isna(found.loc[0, "speed_probe_ratio"])


def test_the_page_links_both_sides_reports_and_traces(tmp_path, capsys):
    sweeps = history_of(tmp_path / "nightly", 10, step=(32, 5, 2.0))
    history(tmp_path / "nightly", "--out", tmp_path / "h", capsys=capsys)
    page = (tmp_path / "h" / "history.html").read_text()
    links = set(re.findall(r"href='([^']+)'", page))
    for sweep in sweeps[4:6]:
        report = os.path.relpath(sweep / "report.html", tmp_path / "h")
        assert report in links
        trace = os.path.relpath(sweep / "6_matmul_add_32_bf16_warm_eager" / "t.json", tmp_path / "h")
        assert trace in links
    assert all((tmp_path / "h" / link).exists() for link in links if not link.startswith(("http", "#")))
    assert page.count("<img") == 2  # the changed point's trend and the overview
    assert "torch 2.12.0 → 2.13.0" in page and "aten::mm" in page


def test_a_step_in_the_last_sweep_only_is_unconfirmed_and_passes_the_gate(tmp_path, capsys):
    sweeps = history_of(tmp_path / "nightly", 10, step=(64, 9, 2.0))
    code, out, _ = history(tmp_path / "nightly", "--fail-on-change", "1.1", capsys=capsys)
    assert code == 0
    found = pd.read_csv(tmp_path / "nightly" / "history" / "regressions.csv")
    assert found[["size", "status", "change_at"]].values.tolist() == [[64, "unconfirmed", str(sweeps[9].resolve())]]
    assert found.loc[0, "ratio"] == pytest.approx(2.0, rel=0.15) and found.loc[0, "sweeps_after"] == 1
    # one more sweep at the new level confirms it: now a regression the gate stops
    rng = np.random.default_rng(5)
    write_sweep(tmp_path / "nightly" / "s11", 11, {s: noisy(10.0 * s * (2.0 if s == 64 else 1.0), rng)
                                                   for s in (8, 16, 32, 64, 128)}, torch="2.13.0")
    code, out, _ = history(tmp_path / "nightly", "--fail-on-change", "1.1", capsys=capsys)
    assert code == 1 and "ingested 1 new sweep, 10 already in the store" in out
    found = pd.read_csv(tmp_path / "nightly" / "history" / "regressions.csv")
    assert found[["size", "status", "change_at"]].values.tolist() == [[64, "regression", str(sweeps[9].resolve())]]


def test_ten_aa_sweeps_give_no_change(tmp_path, capsys):
    # 20 grid points, repeats 10% apart, and the sweeps 15% apart from day to day (the machine):
    # a test on the repeats' noise alone would find changes here
    history_of(tmp_path / "aa", 10, sizes=range(8, 168, 8), between=0.15, seed=3)
    code, out, _ = history(tmp_path / "aa", "--fail-on-change", "1.0", capsys=capsys)
    assert code == 0
    assert len(pd.read_csv(tmp_path / "aa" / "history" / "regressions.csv")) == 0
    assert "no change at 20 grid points" in out
    trends = pd.read_csv(tmp_path / "aa" / "history" / "trends.csv")
    assert len(trends) == 200 and trends["change"].isna().all()
    assert (trends["smallest_change"] > 1.05).all()  # each grid point says the smallest step it could find


def test_the_sweeps_scatter_counts_as_noise(monkeypatch):
    """The same A/A data judged on the repeats' noise alone does find changes: the test above
    could fail (the scatter between sweeps is what keeps it quiet)."""
    drawn = draw(10, range(8, 168, 8), between=0.15, seed=3)  # the A/A test's sweeps
    series = [changes.series([sweep[size] for sweep in drawn]) for size in range(8, 168, 8)]
    found, _ = judge(series)
    assert not any(found)

    noises = changes.noises

    def repeats_only(repeats, scatter, dof_within, dof_between):
        return noises(repeats, None, dof_within, dof_between)

    monkeypatch.setattr(changes, "noises", repeats_only)
    naive, _ = judge(series)
    assert any(naive)


def test_a_grid_point_missing_from_some_sweeps_keeps_its_own_series(tmp_path, capsys):
    rng = np.random.default_rng(1)
    sweeps = []
    for i in range(10):
        points = {8: noisy(80, rng), 64: noisy(640 * (2 if i >= 5 else 1), rng)}
        if i in (2, 5):  # not in these sweeps; its step is placed at the next sweep that has it
            del points[64]
        sweeps.append(write_sweep(tmp_path / f"s{i}", i + 1, points))
    code, out, _ = history(*sweeps, capsys=capsys)
    assert code == 0
    found = pd.read_csv(tmp_path / "history" / "regressions.csv")  # the sweeps' common parent
    assert found[["size", "status", "change_at"]].values.tolist() == [[64, "regression", str(sweeps[6].resolve())]]
    trends = pd.read_csv(tmp_path / "history" / "trends.csv")
    assert sorted(trends.groupby("point").size().tolist()) == [8, 10]


def test_a_sweep_with_another_grid_pairs_what_it_shares(tmp_path, capsys):
    rng = np.random.default_rng(2)
    for i in range(6):
        sizes = (8, 16, 256) if i == 3 else (8, 16, 32)
        write_sweep(tmp_path / "n" / f"s{i}", i + 1, {s: noisy(10.0 * s, rng) for s in sizes})
    code, out, _ = history(tmp_path / "n", capsys=capsys)
    assert code == 0 and "4 grid points paired by" in out and "1 measured in one sweep only" in out
    assert "no change at 3 grid points" in out
    trends = pd.read_csv(tmp_path / "n" / "history" / "trends.csv")
    assert trends.groupby("point").size().to_dict() == {
        "matmul_add size=8 bf16 warm eager": 6, "matmul_add size=16 bf16 warm eager": 6,
        "matmul_add size=32 bf16 warm eager": 5}


def test_failed_jobs_are_left_out_of_the_series(tmp_path, capsys):
    rng = np.random.default_rng(4)
    for i in range(6):
        points = {16: noisy(160, rng), 32: noisy(320, rng)}
        if i == 2:
            points = {16: [160.0, None, 170.0], 32: [None, None, None]}  # a crash; every repeat of 32
        write_sweep(tmp_path / "n" / f"s{i}", i + 1, points)
    code, out, _ = history(tmp_path / "n", capsys=capsys)
    assert code == 0 and "no change at 2 grid points" in out
    trends = pd.read_csv(tmp_path / "n" / "history" / "trends.csv")
    assert trends.groupby("point").size().to_dict() == {"matmul_add size=16 bf16 warm eager": 6,
                                                        "matmul_add size=32 bf16 warm eager": 5}
    third = trends[(trends["sweep"] == "s2") & (trends["point"] == "matmul_add size=16 bf16 warm eager")].iloc[0]
    assert third["repeats"] == 2 and third["level_us"] == pytest.approx(math.sqrt(160 * 170))
    code, out, _ = sql(tmp_path / "n" / "history", "SELECT name, jobs, jobs_failed FROM sweeps ORDER BY name",
                       "--csv", capsys=capsys)
    assert code == 0 and "s1,6,0\ns2,6,4\ns3,6,0" in out


def test_a_newest_sweep_whose_jobs_failed_is_named_and_fails_the_gate(tmp_path, capsys):
    rng = np.random.default_rng(5)
    for i in range(4):
        points = {16: noisy(160, rng), 32: noisy(320, rng) if i < 3 else [None, None, None]}  # the build broke
        write_sweep(tmp_path / "n" / f"s{i}", i + 1, points)
    code, out, _ = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert "in s3: 3 of 6 jobs failed" in out and "planned" not in out
    assert "not measured in the newest sweep (s3), measured before: matmul_add size=32 bf16 warm eager" in out
    assert code == 1 and "failed in the newest sweep: 3 jobs failed in s3, 1 grid points measured before" in out
    # a sweep stopped early: its sweep.json planned more jobs than ran
    (tmp_path / "n" / "s3" / "sweep.json").write_text(json.dumps({"jobs": 8}))
    code, out, _ = history(tmp_path / "n", capsys=capsys)
    assert "in s3: 3 of 6 jobs failed; 2 of the 8 planned never ran (stopped early)" in out, out
    # stopped before its size-32 jobs, none failed: the gate fails it as it fails a broken build
    # (it passed: helper-41)
    shutil.rmtree(tmp_path / "n" / "history")
    shutil.rmtree(tmp_path / "n" / "s3")
    write_sweep(tmp_path / "n" / "s3", 4, {16: noisy(160, rng)})
    plan = json.loads((tmp_path / "n" / "s3" / "sweep.json").read_text())
    (tmp_path / "n" / "s3" / "sweep.json").write_text(json.dumps({**plan, "jobs": 6}))
    code, out, _ = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert "in s3: 3 of the 6 planned never ran (stopped early)" in out, out
    assert code == 1 and "failed in the newest sweep: 3 planned jobs never ran in s3, 1 grid points" in out
    # stopped early with every grid point measured, one on fewer processes than planned: not a whole
    # sweep, as compare's gate says of it (history passed it: helper-55)
    shutil.rmtree(tmp_path / "n" / "history")
    shutil.rmtree(tmp_path / "n" / "s3")
    write_sweep(tmp_path / "n" / "s3", 4, {16: noisy(160, rng), 32: noisy(320, rng, repeats=2)})
    plan = json.loads((tmp_path / "n" / "s3" / "sweep.json").read_text())
    (tmp_path / "n" / "s3" / "sweep.json").write_text(json.dumps({**plan, "jobs": 6}))
    code, out, _ = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert "in s3: 1 of the 6 planned never ran (stopped early)" in out, out
    assert code == 1 and ("failed in the newest sweep: 1 planned jobs never ran in s3: not a whole sweep, its grid "
                          "points judged on fewer processes than planned") in out, out
    # a failed repeat of a point that has others is no gate failure, as in compare
    shutil.rmtree(tmp_path / "n" / "history")
    shutil.rmtree(tmp_path / "n" / "s3")
    write_sweep(tmp_path / "n" / "s3", 4, {16: noisy(160, rng), 32: [*noisy(320, rng, repeats=2), None]})
    code, out, _ = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert code == 0 and "in s3: 1 of 6 jobs failed" in out, out


@pytest.mark.parametrize("damage", ["repeats.csv deleted", "repeats.csv emptied", "summary.csv not UTF-8"])
def test_a_sweep_whose_tables_are_damaged_is_named_not_read_as_jobs_that_never_ran(tmp_path, capsys, damage):
    """helper-45: repeats.csv deleted or emptied read as 'in h3: 6 of the 6 planned never ran', the
    gate failing a sweep whose jobs all ran; a summary.csv header that is not UTF-8 raised
    UnicodeDecodeError (a traceback, exit 1)."""
    rng = np.random.default_rng(5)
    folders = [write_sweep(tmp_path / "n" / f"s{i}", i + 1, {16: noisy(160, rng)}) for i in range(3)]
    (folders[2] / "sweep.json").write_text(json.dumps({"created_at": "2026-12-03T02:00:00+00:00", "jobs": 3}))
    if damage == "repeats.csv deleted":
        (folders[2] / "repeats.csv").unlink()
    elif damage == "repeats.csv emptied":
        (folders[2] / "repeats.csv").write_text("")
    else:
        (folders[2] / "summary.csv").write_bytes(b"\xff\xfe" + (folders[2] / "summary.csv").read_bytes())
    code, out, err = history(*folders, capsys=capsys)
    assert code == 2 and "never ran" not in out and "Traceback" not in err, out + err
    assert str(folders[2]) in err and ("is missing or empty" in err or "cannot be read" in err), err


def test_a_newest_sweep_killed_before_its_analysis_fails_the_gate(tmp_path, capsys):
    """helper-45: a nightly SIGKILLed before its analysis (no summary.csv: one job recorded,
    sweep.json planned six) was skipped with a warning, and the gate passed on the night before."""
    rng = np.random.default_rng(5)
    for i in range(3):
        write_sweep(tmp_path / "n" / f"s{i}", i + 1, {16: noisy(160, rng)})
    killed = tmp_path / "n" / "s3"
    (killed / "0_matmul_add_16_bf16_warm_eager").mkdir(parents=True)
    (killed / "0_matmul_add_16_bf16_warm_eager" / "metrics.json").write_text(json.dumps({"status": "unfinished"}))
    (killed / "sweep.json").write_text(json.dumps({"created_at": "2026-12-04T02:00:00+00:00", "jobs": 6}))
    code, out, err = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert f"skipped: {killed} is not analysed" in err
    assert code == 1 and f"failed in the newest sweep: {killed.resolve()} is not analysed" in out, out
    # an unanalysed sweep older than the newest taken is skipped as before: the gate judges the newest
    (killed / "sweep.json").write_text(json.dumps({"created_at": "2026-12-02T12:00:00+00:00", "jobs": 6}))
    assert history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)[0] == 0


def test_a_newest_sweep_killed_before_its_first_job_fails_the_gate_and_is_analysed_as_stopped(tmp_path, capsys):
    """helper-55: SIGKILLed after its sweep.json and before its first job folder (while the ceilings
    were measured, or it waited for the device), a nightly was no sweep to history (no summary, no
    job folder): not even skipped with a warning, and the gate passed on the night before; the
    analysis, compare and load called it "not a sweep or a run"."""
    from analysis.api import load
    from analysis.compare.side import CompareError, load_side

    rng = np.random.default_rng(5)
    for i in range(3):
        write_sweep(tmp_path / "n" / f"s{i}", i + 1, {16: noisy(160, rng)})
    killed = tmp_path / "n" / "s3"
    killed.mkdir()
    (killed / "sweep.json").write_text(json.dumps({"created_at": "2026-12-04T02:00:00+00:00", "jobs": 4}))
    code, out, err = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert f"skipped: {killed} is not analysed" in err, err
    assert code == 1 and f"failed in the newest sweep: {killed.resolve()} is not analysed" in out, out
    with pytest.raises(CompareError, match="4 of 4 planned jobs never ran: the sweep was stopped before them"):
        load_side(killed)
    assert main([str(killed)]) == 1  # analysed as what it is: a sweep none of whose jobs ran
    assert "4 of 4 planned jobs never ran" in capsys.readouterr().out
    assert load(killed).summary.empty
    code, out, err = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert code == 1 and "s3" in out, out + err
    # a folder with no plan and no job is still none
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2 and "not a sweep or a run" in capsys.readouterr().err


# --- the store ------------------------------------------------------------------------------------------


def test_incremental_ingest_adds_only_new_sweeps(tmp_path, capsys):
    sweeps = history_of(tmp_path / "n", 3, sizes=(8, 16))
    code, out, _ = history(tmp_path / "n", capsys=capsys)
    assert code == 0 and "ingested 3 new sweeps, 0 already in the store" in out
    write_sweep(tmp_path / "n" / "s04", 4, {8: [80.0, 81.0, 79.0], 16: [160.0, 161.0, 159.0]}, parquet=True)
    code, out, _ = history(tmp_path / "n", capsys=capsys)
    assert code == 0 and "ingested 1 new sweep, 3 already in the store" in out
    code, out, _ = sql(tmp_path / "n" / "history", "SELECT s.name, count(*) AS points, sum(h.repeats) AS jobs "
                       "FROM history h JOIN sweeps s USING (sweep_id) GROUP BY s.name ORDER BY s.name", "--csv",
                       capsys=capsys)
    assert out == "name,points,jobs\ns01,2,6\ns02,2,6\ns03,2,6\ns04,2,6\n"
    # the same folder holding a new sweep (another start time) is another sweep
    json_file = sweeps[0] / "sweep.json"
    json_file.write_text(json.dumps({"created_at": "2026-12-09T00:00:00+00:00"}))
    code, out, _ = history(tmp_path / "n", capsys=capsys)
    assert "ingested 1 new sweep, 3 already in the store" in out
    code, out, _ = sql(tmp_path / "n" / "history" / "history.duckdb",
                       "SELECT count(*) AS sweeps, count(DISTINCT folder) AS folders FROM sweeps", "--csv",
                       capsys=capsys)
    assert out == "sweeps,folders\n5,4\n"


def test_the_store_keeps_every_row_of_the_sweeps_files(tmp_path, capsys):
    sweeps = history_of(tmp_path / "n", 3, sizes=(8, 16))
    history(tmp_path / "n", capsys=capsys)
    for table, name, order in (("repeats", "repeats.csv", ["sweep", "job"]), ("ops", "ops.csv", ["sweep", "job", "name"]),
                               ("history", "summary.csv", ["sweep", "job"])):
        code, out, _ = sql(tmp_path / "n" / "history", f"SELECT s.name AS sweep, t.* EXCLUDE (sweep_id) FROM {table} t "
                           "JOIN sweeps s USING (sweep_id)", "--csv", capsys=capsys)
        stored = pd.read_csv(pd.io.common.StringIO(out)).sort_values(order, ignore_index=True)
        written = pd.concat([pd.read_csv(s / name).assign(sweep=s.name) for s in sweeps]).sort_values(
            order, ignore_index=True)
        assert code == 0 and len(stored) == len(written) and set(written.columns) <= set(stored.columns)
        pd.testing.assert_frame_equal(stored[written.columns], written, check_dtype=False)


def test_columns_take_the_type_their_values_share_and_hashes_stay_text(tmp_path, capsys):
    rng = np.random.default_rng(0)
    folders = [write_sweep(tmp_path / "n" / f"s{i}", i + 1, {8: noisy(80, rng)}) for i in range(3)]
    for folder, value in zip(folders, (None, 4, "big")):  # no value yet, a number, then text
        for name in ("summary.csv", "repeats.csv"):
            frame = pd.read_csv(folder / name).assign(config_hash="12e4", scale_ratio=value)
            frame.to_csv(folder / name, index=False)
    out = tmp_path / "store"

    def typed() -> tuple[str, list[str]]:
        _, text, _ = sql(out, "SELECT DISTINCT typeof(scale_ratio) AS t, typeof(config_hash) AS h FROM repeats",
                         "--csv", capsys=capsys)
        _, values, _ = sql(out, "SELECT DISTINCT CAST(scale_ratio AS VARCHAR) AS v, config_hash FROM repeats "
                           "WHERE scale_ratio IS NOT NULL ORDER BY v", "--csv", capsys=capsys)
        return text.splitlines()[1], values.splitlines()[1:]

    for n in range(1, 4):
        code, _, _ = history(*folders[:n], "--out", out, capsys=capsys)
        assert code == 0
        assert typed() == [("VARCHAR,VARCHAR", []), ("BIGINT,VARCHAR", ["4,12e4"]),
                           ("VARCHAR,VARCHAR", ["4,12e4", "big,12e4"])][n - 1]


def test_a_sweep_named_twice_or_found_twice_is_one_sweep(tmp_path, capsys):
    sweeps = history_of(tmp_path / "n", 3, sizes=(8,))
    code, out, _ = history(tmp_path / "n", sweeps[0], sweeps[0], "--out", tmp_path / "o", capsys=capsys)
    assert code == 0 and "ingested 3 new sweeps, 0 already in the store" in out and "history: 3 sweeps" in out


def test_sql_prints_a_table_or_csv_and_refuses_what_it_cannot_do(tmp_path, capsys):
    history_of(tmp_path / "n", 2, sizes=(8, 16))
    history(tmp_path / "n", capsys=capsys)
    store = tmp_path / "n" / "history" / "history.duckdb"
    code, out, _ = sql(store, "SELECT sweep, size, round(timed_us_per_step) AS us FROM trend ORDER BY sweep, size",
                       capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["sweep", "size", "us"] and set(lines[1]) == {"-", " "} and lines[-1] == "(4 rows)"
    assert [line.split()[:2] for line in lines[2:6]] == [["s01", "8"], ["s01", "16"], ["s02", "8"], ["s02", "16"]]
    code, out, err = sql(store, "SELECT nope FROM sweeps", capsys=capsys)
    assert code == 2 and err.startswith("error: the query failed") and "nope" in err
    code, out, err = sql(store, "DELETE FROM sweeps", capsys=capsys)
    assert code == 2 and "read-only" in err
    code, out, _ = sql(store, "SELECT count(*) AS n FROM sweeps", "--csv", capsys=capsys)
    assert out == "n\n2\n"
    # helper-52: a table holds what it aligns, so it shows its first TABLE_ROWS rows (a result of
    # 10^11 rows was held whole and the process killed for memory); CSV streams every row
    from analysis.store import TABLE_ROWS

    code, out, _ = sql(store, "SELECT range AS i FROM range(100000000000)", capsys=capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 + TABLE_ROWS + 1 and lines[-2].strip() == str(TABLE_ROWS - 1)
    assert lines[-1].startswith(f"(the first {TABLE_ROWS:,} rows; the query returns more: --csv writes every row")
    code, out, _ = sql(store, f"SELECT range AS i FROM range({TABLE_ROWS + 5})", "--csv", capsys=capsys)
    assert out.splitlines()[-1] == str(TABLE_ROWS + 4)
    code, _, err = sql(tmp_path / "none.duckdb", "SELECT 1", capsys=capsys)
    assert code == 2 and "no such store" in err and not (tmp_path / "none.duckdb").exists()
    for query, said in (("", "holds 0 statements"), ("  ;", "holds 0 statements"),
                        ("SELECT 1; SELECT 2", "holds 2 statements")):
        code, out, err = sql(store, query, capsys=capsys)
        assert code == 2 and out == "" and said in err, (query, err)
    leak = tmp_path / "leak.csv"  # read-only means nothing outside the store either
    code, _, err = sql(store, f"COPY sweeps TO '{leak}'", capsys=capsys)
    assert code == 2 and not leak.exists() and "the query failed" in err
    code, out, err = sql(store, f"SELECT * FROM read_csv_auto('{ROOT / 'pyproject.toml'}')", capsys=capsys)
    assert code == 2 and out == "" and "the query failed" in err


# --- the gate and the refusals ---------------------------------------------------------------------------


def test_fail_on_change_below_1_and_other_bad_input_are_refused(tmp_path, capsys):
    history_of(tmp_path / "n", 3, sizes=(8,))
    code, _, err = history(tmp_path / "n", "--fail-on-change", "0.9", capsys=capsys)
    assert code == 2 and "error: --fail-on-change 0.9 is not allowed: give a finite ratio >= 1" in err
    code, _, err = history(tmp_path / "n", "--fail-on-change", "inf", capsys=capsys)  # a gate that never fails
    assert code == 2 and "error: --fail-on-change inf is not allowed" in err
    code, _, err = history(tmp_path / "nope", capsys=capsys)
    assert code == 2 and "no such folder" in err
    (tmp_path / "sweep.json").write_text("{}")
    code, _, err = history(tmp_path / "sweep.json", capsys=capsys)
    assert code == 2 and "sweep.json: a file, not a sweep folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = history(tmp_path / "empty", capsys=capsys)
    assert code == 2 and "neither a sweep nor a folder of sweeps" in err
    code, _, err = history(tmp_path / "n", "--ignore", "workload_nope", capsys=capsys)
    assert code == 2 and "--ignore 'workload_nope': no sweep given has that setting" in err
    assert not (tmp_path / "n" / "history").exists()  # refused before the store was made (it left 3 MB)
    code, _, err = history(tmp_path / "n", "--ignore", "colour", capsys=capsys)
    assert code == 2 and "--ignore 'colour' is not a key that pairs jobs" in err
    assert not (tmp_path / "n" / "history" / "regressions.csv").exists()


def test_a_sweep_not_analysed_is_refused_when_named_and_skipped_when_found(tmp_path, capsys):
    history_of(tmp_path / "n", 2, sizes=(8,))
    raw = tmp_path / "n" / "raw"
    hand_made_point(raw, 0, processes(100))
    code, _, err = history(raw, capsys=capsys)
    assert code == 2 and "is not analysed" in err and f"python -m analysis {raw}" in err
    code, out, err = history(tmp_path / "n", capsys=capsys)
    assert code == 0 and "warning: skipped:" in err and "ingested 2 new sweeps" in out


def test_a_sweep_whose_tables_cannot_be_read_is_skipped_and_the_others_ingested(tmp_path, capsys):
    """A sweep stopped before its first job wrote a summary.parquet without columns, and a
    repeats.csv that is not UTF-8 raised a traceback: either made history ingest nothing, for every
    sweep of a nightly folder (reviewers' findings)."""
    from analysis import analyse_folder

    history_of(tmp_path / "n", 2, sizes=(8,))
    stopped = tmp_path / "n" / "stopped"
    (stopped / "0_matmul_add_8_bf16_cold_eager" / ".hydra").mkdir(parents=True)  # a job with no record
    analyse_folder(stopped, progress=lambda line: None)
    # no job finished: tables of no rows, with their headers (pandas reads them), not files of "\n"
    for name in ("summary", "steps", "kernels"):  # (repeats.csv names the job without a record)
        assert len(pd.read_csv(stopped / f"{name}.csv")) == 0 and "job" in pd.read_csv(stopped / f"{name}.csv"), name
    assert len(pd.read_parquet(stopped / "summary.parquet")) == 0
    (stopped / "summary.parquet").write_bytes(b"PAR1 not a parquet file PAR1")  # as an earlier profsweep left it
    garbled = write_sweep(tmp_path / "n" / "garbled", 9, {8: [100.0, 101.0, 99.0]})
    (garbled / "repeats.csv").write_bytes(b"\x00\xff\xfe\x00job\n")
    code, out, err = history(tmp_path / "n", capsys=capsys)
    assert code == 0 and "ingested 2 new sweeps" in out and "Traceback" not in err
    assert f"warning: skipped: {stopped / 'summary.parquet'} cannot be read" in err
    assert f"warning: skipped: {garbled / 'repeats.csv'} cannot be read (UnicodeDecodeError" in err
    assert f"python -m analysis {garbled} writes its tables anew" in err
    code, _, err = history(garbled, capsys=capsys)  # named: refused
    assert code == 2 and "repeats.csv cannot be read" in err


def test_sweeps_with_nothing_in_common_are_refused_until_a_key_is_ignored(tmp_path, capsys):
    rng = np.random.default_rng(0)
    write_sweep(tmp_path / "a", 1, {8: noisy(80, rng)})
    b = write_sweep(tmp_path / "b", 2, {8: noisy(80, rng)})
    summary = pd.read_csv(b / "summary.csv").assign(dtype="fp32")
    summary.to_csv(b / "summary.csv", index=False)
    code, _, err = history(tmp_path / "a", b, capsys=capsys)
    assert code == 2 and "have nothing in common" in err and "--ignore KEY" in err
    assert not (tmp_path / "history").exists()  # a refused history leaves no store behind
    code, out, _ = history(tmp_path / "a", b, "--ignore", "dtype", capsys=capsys)
    assert code == 0 and "(ignoring dtype)" in out and (tmp_path / "history" / "history.duckdb").is_file()
    code, _, err = history(tmp_path / "a", b, capsys=capsys)  # refused again: the store it had stays
    assert code == 2 and (tmp_path / "history" / "history.duckdb").is_file()


def test_order_given_keeps_the_command_lines_order(tmp_path, capsys):
    rng = np.random.default_rng(7)
    # started in this order: fast, fast, slow, slow, slow, fast ... but given slow ones first
    folders = [write_sweep(tmp_path / f"s{i}", i + 1, {8: noisy(100 * (3 if i in (2, 3, 4) else 1), rng)})
               for i in range(7)]
    _, out, _ = history(*folders, "--out", tmp_path / "by_time", capsys=capsys)
    assert "history: 7 sweeps from 2026-12-01 02:00 to 2026-12-07 02:00, 1 grid point" in out, out
    by_time = pd.read_csv(tmp_path / "by_time" / "regressions.csv")
    assert set(by_time["change_at"]) == {str(folders[2].resolve()), str(folders[5].resolve())}
    given = [folders[i] for i in (2, 3, 4, 0, 1, 5, 6)]
    _, out, _ = history(*given, "--order", "given", "--out", tmp_path / "given", capsys=capsys)
    # the span of their start times, not the first and last given (it read "from 12-03 to 12-07")
    assert "history: 7 sweeps from 2026-12-01 02:00 to 2026-12-07 02:00, in the order given, " in out, out
    found = pd.read_csv(tmp_path / "given" / "regressions.csv")
    assert found[["change_at", "status"]].values.tolist() == [[str(folders[0].resolve()), "improvement"]]


# --- on the real analysis's files, and real sweeps ----------------------------------------------------------


def test_sweeps_analysed_from_job_folders_use_the_host_time_without_un_profiled_steps(tmp_path, capsys):
    """Job folders made by hand (traces, metrics.json without un-profiled timing), analysed by the
    real analysis: the last two of four sweeps run aten::mm four times as long."""
    from analysis.tables import analyse_sweep, frames, write_tables

    for i in range(4):
        folder = tmp_path / "n" / f"s{i}"
        mm = 40.0 if i >= 2 else 10.0
        hand_made_point(folder, 0, processes(100 + 3 * mm, within=0.02), ops=(("aten::mm", mm), "aten::add"))
        write_tables(folder, frames(analyse_sweep(folder)))
        (folder / "sweep.json").write_text(json.dumps({"created_at": f"2026-12-0{i + 1}T00:00:00+00:00"}))
    code, out, _ = history(tmp_path / "n", capsys=capsys)
    assert code == 0
    found = pd.read_csv(tmp_path / "n" / "history" / "regressions.csv")
    assert found[["status", "measured_on"]].values.tolist() == [["regression", "host_us_per_step"]]
    assert found.loc[0, "change_at"] == str((tmp_path / "n" / "s2").resolve())
    assert "aten::mm +300%" in found.loc[0, "what_changed"]


FACTORY = """
import torch


def make(*, size, dtype, device, times: int = 1, at: int = 0):
    '''Matrix products: `times` of them at size `at`, one at every other size.'''
    x = torch.ones(size, size, dtype=dtype, device=device) / size
    n = times if size == at else 1

    def step(a):
        for _ in range(n):
            a = torch.mm(a, x)
        return a

    return step, (x,)
"""


@pytest.fixture(scope="module")
def real_sweeps(tmp_path_factory, alone) -> Path:
    """Eight real CPU sweeps (three repeats each, one thread): four where the last two do 4× the work at size 128,
    and four identical ones. Run alone: another xdist worker's test beside them loads the machine, and a
    change measured on a loaded machine is never confirmed (both seen: 133x the smallest step findable
    with two threads, the 4x step found but unconfirmed with one)."""
    root = tmp_path_factory.mktemp("history")
    (root / "work").mkdir()
    (root / "work" / "workbench.py").write_text(FACTORY)
    env = {"PYTHONPATH": str(root / "work")}
    with alone():
        for name, times in (("a1", 1), ("a2", 1), ("a3", 4), ("a4", 4), ("b1", 1), ("b2", 1), ("b3", 1), ("b4", 1)):
            group = "changed" if name[0] == "a" else "same"
            done = run_cli("-m", "workload=custom", "workload._target_=workbench:make", f"workload.times={times}",
                           "workload.at=128", "size=16,128", "warmup=true", "run.repeats=3", "run.threads=1",
                           f"hydra.sweep.dir={root / group / name}", env=env, repeats=None)
            assert done.returncode == 0, done.stdout + done.stderr
    return root


@pytest.mark.slow
def test_four_real_sweeps_where_the_last_two_do_4x_the_work_at_one_grid_point(real_sweeps, capsys):
    # paired by every workload setting, the two sweeps of each setting are their own series
    code, out, _ = history(real_sweeps / "changed", capsys=capsys)
    assert code == 0 and "4 grid points paired by" in out
    assert set(pd.read_csv(real_sweeps / "changed" / "history" / "regressions.csv")["status"]) <= {"unconfirmed"}, out
    code, out, _ = history(real_sweeps / "changed", "--ignore", "workload.times", "--fail-on-change", "1.5",
                           capsys=capsys)
    found = pd.read_csv(real_sweeps / "changed" / "history" / "regressions.csv")
    # the 4x step, confirmed where it happened. What else a shared machine did between two sweeps is
    # not asserted here (a verdict on this machine's speed): CI saw a 1.34x step between the first
    # two, every process of the second slowed alike; the probe's part is tested on hand-made sweeps.
    confirmed = found[found["status"] != "unconfirmed"]
    step = confirmed[confirmed["change_at"] == str((real_sweeps / "changed" / "a3").resolve())]
    seen = pd.read_csv(real_sweeps / "changed" / "history" / "trends.csv")
    seen = seen[seen["point"].str.contains("size=128 ")]["smallest_change"].dropna()
    # Skipped only where the history says a 4x step was beyond what it could see and the sweeps' own
    # records say why (a point measured noisy: processes apart, load, the machine's speed probe).
    noisy = [n for a in sorted((real_sweeps / "changed").glob("a*"))
             for n in pd.read_csv(a / "summary.csv")["noise_reason"].dropna() if n]
    if step.empty and len(seen) and seen.min() > 4 and noisy:
        pytest.skip(f"this machine was too noisy while the sweeps ran: the smallest step the history could "
                    f"have found at size 128 is {seen.min():.1f}x (the test needs under 4x); {noisy[0][:200]}")
    # Found where it happened, but not confirmed because a sweep it rests on was measured on a loaded
    # machine (the load veto, tested on hand-made sweeps): what can be asserted is, then skipped.
    there = found[found["change_at"] == str((real_sweeps / "changed" / "a3").resolve())]
    if step.empty and len(there) == 1 and there.iloc[0]["status"] == "unconfirmed" and \
            str(there.iloc[0]["noise"]) not in ("", "nan"):
        assert there.iloc[0]["size"] == 128 and 3 < there.iloc[0]["ratio"] < 5, there.iloc[0].to_dict()
        pytest.skip(f"the 4x step was found at the right sweep ({there.iloc[0]['ratio']:.2f}x), unconfirmed: this "
                    f"machine was loaded while the sweeps ran ({str(there.iloc[0]['noise'])[:200]})")
    assert step[["size", "status"]].values.tolist() == [[128, "regression"]], out
    assert code == 1 and "workload_times 1 → 4" in step.iloc[0]["what_changed"]
    assert "aten::mm +" in step.iloc[0]["what_changed"]
    page = (real_sweeps / "changed" / "history" / "history.html").read_text()
    assert "report.html" in page and ".json" in page


@pytest.mark.slow
def test_four_identical_real_sweeps_give_no_change(real_sweeps, capsys):
    # A real A/A on a shared machine: no doubling (a pairing or ingest fault would show as one), and
    # no sweep folder in the command counts as a change of how it ran. Smaller steps are not asserted:
    # the machine's own (another tenant's load) can be real; their rate is tested on synthetic samples.
    code, out, _ = history(real_sweeps / "same", "--fail-on-change", "2.0", capsys=capsys)
    assert code == 0, out
    found = pd.read_csv(real_sweeps / "same" / "history" / "regressions.csv")
    assert not found["environment_changed"].fillna("").str.contains("command").any()
    code, out, _ = sql(real_sweeps / "same" / "history", "SELECT count(*) AS n FROM repeats", "--csv", capsys=capsys)
    assert out == "n\n24\n"  # 4 sweeps x 2 sizes x 3 repeats


def test_a_lasting_change_is_confirmed_even_when_another_follows_the_next_night():
    """Levels 1, 1, 1, 1, 1, 3, 2.4, 2.4, 2.4, 2.4 (three repeats, 2% apart): the 3x step is
    followed at once by a smaller one, yet every sweep after it lies far past 5% above the level
    before it: a confirmed regression, not 'unconfirmed' (which would pass the nightly gate)."""
    levels = [1, 1, 1, 1, 1, 3, 2.4, 2.4, 2.4, 2.4]
    series = changes.series([[100 * v * f for f in (0.98, 1.0, 1.02)] for v in levels])
    [found], _ = judge([series])
    first = next(step for step in found if step.at == 5)
    assert first.confirmed and first.ratio == pytest.approx(3.0, rel=0.05)


def _step_history(seed: int, step: float) -> list[changes.Series]:
    """Two grid points, four sweeps of three processes each (processes 5% apart, sweeps 2% apart: a
    quiet machine), the step time multiplied by `step` from the third sweep on at both: bmm's batch
    1 -> 4, which made the un-profiled step 1.36x and 1.43x."""
    rng = np.random.default_rng(seed)
    out = []
    for base in (100.0, 900.0):
        sweeps = []
        for i in range(4):
            level = base * (step if i >= 2 else 1.0) * math.exp(rng.normal(0, 0.02))
            sweeps.append([level * math.exp(rng.normal(0, 0.05)) for _ in range(3)])
        out.append(changes.series(sweeps))
    return out


def _found(seed: int, step: float) -> bool:
    """Whether the history finds the step at both points, at the third sweep, confirmed."""
    found, _ = judge(_step_history(seed, step))
    return all(len(steps) == 1 and steps[0].at == 2 and steps[0].confirmed for steps in found)


def test_a_14x_step_in_the_last_two_of_four_sweeps_is_found_with_the_grids_scatter():
    assert sum(_found(seed, 1.4) for seed in range(40)) >= 30  # 33 of 40 when written


def test_four_identical_sweeps_give_no_change():
    assert not any(any(judge(_step_history(seed, 1.0))[0]) for seed in range(40))


def test_without_the_grids_scatter_the_14x_step_is_mostly_missed(monkeypatch):
    """The pooling is what finds it: with each series' own scatter only (2 degrees of freedom
    from 4 sweeps), the same histories give far fewer."""
    with_pool = sum(_found(seed, 1.4) for seed in range(40))
    monkeypatch.setattr(changes, "pooled_scatter", lambda many: [None] * len(many))
    assert sum(_found(seed, 1.4) for seed in range(40)) <= with_pool - 12  # 13 against 33 when written


def test_each_grid_point_says_the_smallest_step_it_could_have_found():
    many = _step_history(0, 1.0)
    series = [changes.with_pool(s, pool) for s, pool in zip(many, changes.pooled_scatter(many))]
    smallest = [changes.smallest(s) for s in series]
    assert all(1.05 < s < 1.4 for s in smallest), smallest
    assert changes.smallest(changes.series([[100.0]])) is None  # one sweep: no history to find a step in


def test_a_one_sweep_spike_at_one_grid_point_does_not_hide_a_change_at_another():
    """Six sweeps of two grid points: one's third sweep is 120x slow (load), the other doubles at
    its fifth. The spike's rise and its return are two large differences, of which only the largest
    was left out of the grid's scatter; the other swamped it and the 1.8x step was missed (a
    reviewer's nightly gate)."""
    rng = np.random.default_rng(3)

    def sweeps(levels: list[float]) -> list[list[float]]:
        return [[v * math.exp(rng.normal(0, 0.02)) for _ in range(2)] for v in levels]

    spiked = changes.series(sweeps([17.7, 17.6, 2130.0, 17.6, 17.7, 17.6]))
    stepped = changes.series(sweeps([4.94, 4.95, 4.93, 4.94, 8.9, 8.9]))
    found, _ = judge([spiked, stepped])
    assert [(s.at, s.confirmed) for s in found[1]] == [(4, True)]
    assert found[1][0].ratio == pytest.approx(1.8, rel=0.05)
    # the spike itself: one sweep's level, never confirmed, so neither is the return from it
    assert [(s.at, s.confirmed) for s in found[0]] == [(2, False), (3, False)]
    # a one-sweep dip followed by a real step to another level: the step stays confirmed
    dip = [changes.Shift(1, 0, 2, 31.7, 26.3, 0.83, 0.78, 0.89, 0.01, False),
           changes.Shift(2, 1, 4, 26.3, 104.0, 3.95, 3.78, 4.12, 0.001, True)]
    assert [s.confirmed for s in changes.after_unconfirmed(dip)] == [False, True]
    back = [dip[0], changes.Shift(2, 1, 4, 26.3, 31.5, 1.20, 1.1, 1.3, 0.01, True)]
    assert [s.confirmed for s in changes.after_unconfirmed(back)] == [False, False]


def test_a_newest_sweep_whose_every_job_failed_fails_the_gate_not_the_input(tmp_path, capsys):
    """Nothing in common because the newest sweep measured nothing: that is the broken build the
    gate is for (exit 1), not two sweeps of different grids (exit 2)."""
    rng = np.random.default_rng(6)
    write_sweep(tmp_path / "n" / "s0", 1, {16: noisy(160, rng), 32: noisy(320, rng)})
    write_sweep(tmp_path / "n" / "s1", 2, {16: [None, None, None], 32: [None, None, None]})
    code, out, err = history(tmp_path / "n", "--fail-on-change", "1.10", capsys=capsys)
    assert code == 1, err
    assert "in s1: 6 of 6 jobs failed" in out and "failed in the newest sweep: 6 jobs failed in s1, 2 grid points" in out


def test_an_analysis_older_than_a_job_record_is_said(tmp_path, capsys):
    rng = np.random.default_rng(7)
    for i in range(2):
        write_sweep(tmp_path / "n" / f"s{i}", i + 1, {16: noisy(160, rng)})
    record = next((tmp_path / "n" / "s1").glob("0_*")) / "metrics.json"
    record.write_text("{}")
    summary = (tmp_path / "n" / "s1" / "summary.csv").stat().st_mtime_ns
    os.utime(record, ns=(summary + 10**9, summary + 10**9))  # rerun after the analysis
    code, _, err = history(tmp_path / "n", capsys=capsys)
    assert code == 0 and "s1: its analysis is older than 1 job record (0_matmul_add_16_bf16_warm_eager" in err
    assert "s0: its analysis" not in err
    # an analysis stopped after it wrote summary.csv: its other tables are as old as before the record
    # (history held the new summary with the old repeats.csv's failed job: helper-41)
    record = next((tmp_path / "n" / "s0").glob("0_*")) / "metrics.json"
    record.write_text("{}")
    repeats = (tmp_path / "n" / "s0" / "repeats.csv").stat().st_mtime_ns
    os.utime(record, ns=(repeats + 10**9, repeats + 10**9))
    os.utime(tmp_path / "n" / "s0" / "summary.csv", ns=(repeats + 2 * 10**9, repeats + 2 * 10**9))
    code, _, err = history(tmp_path / "n", capsys=capsys)
    assert "s0: its analysis is older than 1 job record (0_matmul_add_16_bf16_warm_eager" in err, err


def test_the_api_refuses_a_folder_given_as_a_string_for_the_list(tmp_path):
    import profsweep
    from analysis.api import ProfsweepError

    for bad in (str(tmp_path), tmp_path, []):
        with pytest.raises(ProfsweepError, match="give a list of sweep folders"):
            profsweep.history(bad)
    write_sweep(tmp_path / "s0", 1, {16: [100.0, 101.0, 99.0]})
    with pytest.raises(ProfsweepError, match=r"ignore='compile': give a list of keys"):
        profsweep.history([tmp_path / "s0"], ignore="compile")
    with pytest.raises(ProfsweepError, match="no such folder"):
        profsweep.history([tmp_path / "missing"], out=tmp_path / "h")


def test_a_sweep_analysed_again_replaces_its_rows_in_the_store(tmp_path, capsys):
    """The store kept a sweep's rows as first ingested: a job rerun and the sweep analysed again
    never reached it (a reviewer's kills)."""
    rng = np.random.default_rng(8)
    write_sweep(tmp_path / "n" / "s0", 1, {16: noisy(160, rng), 32: noisy(320, rng)})
    write_sweep(tmp_path / "n" / "s1", 2, {16: noisy(160, rng), 32: [None, None, None]})
    out = tmp_path / "h"
    code, said, _ = history(tmp_path / "n", "--out", out, capsys=capsys)
    assert "in s1: 3 of 6 jobs failed" in said
    # s1's failed jobs rerun ok, and s1 analysed again (its tables written anew, later)
    import shutil

    shutil.rmtree(tmp_path / "n" / "s1")
    write_sweep(tmp_path / "n" / "s1", 2, {16: noisy(160, rng), 32: noisy(320, rng)})
    code, said, _ = history(tmp_path / "n", "--out", out, capsys=capsys)
    assert "ingested 1 new sweep (1 of them again: analysed since), 1 already in the store" in said
    assert "jobs failed" not in said
    code, rows, _ = sql(out / "history.duckdb", "SELECT count(*) AS n FROM sweeps", "--csv", capsys=capsys)
    assert code == 0 and rows.split() == ["n", "2"], rows  # one row per sweep, not per time it was read
    code, said, _ = history(tmp_path / "n", "--out", out, capsys=capsys)
    assert "ingested 0 new sweeps, 2 already in the store" in said


def test_ctrl_c_or_sigterm_stops_a_command_with_one_line(monkeypatch, capsys):
    """profsweep analyse / compare / history printed a 30-line traceback on Ctrl-C (a reviewer's
    kills); SIGTERM ended them without a word."""
    import signal

    import analysis.__main__ as commands

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "main", interrupted)
    assert commands.stoppable(["history", "x"]) == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted (Ctrl-C): history stopped") and "Traceback" not in err

    def terminated(argv):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop it")

    monkeypatch.setattr(commands, "main", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert commands.stoppable(["x"]) == 143
    assert capsys.readouterr().err.startswith("interrupted (SIGTERM): the analysis stopped")
    assert signal.getsignal(signal.SIGTERM) is before  # put back as it was


def analysed_sweeps(root: Path, count: int, make=lambda i, folder: hand_made_point(folder, 0, processes(100))
                    ) -> list[Path]:
    """`count` hand-made sweeps root/s0, s1, ..., started on consecutive days, each analysed;
    `make(i, folder)` writes sweep i's jobs (one grid point at 100 µs by default)."""
    from analysis import analyse_folder

    folders = []
    for i in range(count):
        folder = root / f"s{i}"
        make(i, folder)
        analyse_folder(folder, progress=lambda line: None)
        (folder / "sweep.json").write_text(json.dumps({"created_at": f"2026-12-{i + 1:02d}T02:00:00+00:00"}))
        folders.append(folder)
    return folders


def rerun_after_analysis(folder: Path, by_ns: int = 10**9) -> int:
    """Give every job record of `folder` a time `by_ns` after its analysis (a rerun since); the time."""
    later = (folder / "summary.csv").stat().st_mtime_ns + by_ns
    for record in folder.glob("*/metrics.json"):
        os.utime(record, ns=(later, later))
    return later


def test_compiler_settings_do_not_split_an_eager_points_history(tmp_path, capsys):
    """As compare pairs them: an eager point is one line whatever compiler.mode each sweep ran
    with; a compiled point run with two modes is two."""
    def make(i: int, folder: Path) -> None:
        mode = "default" if i == 0 else "max-autotune"
        hand_made_point(folder, 0, processes(100), compile_mode=mode)
        hand_made_point(folder, 1, processes(300), compile_mode=mode, compile=True, size=16)

    folders = analysed_sweeps(tmp_path, 3, make)
    code, out, err = history(*folders, "--out", tmp_path / "h", capsys=capsys)
    assert code == 0, err
    assert "3 grid points paired by" in out and "no change at 2 grid points" in out
    assert "measured before: matmul_add size=16 bf16 cold compile compile_mode=default" in out, out
    points = set(pd.read_csv(tmp_path / "h" / "trends.csv")["point"])  # an eager line names no compile_mode
    assert "matmul_add size=8 bf16 cold eager" in points and not any("eager compile_mode" in p for p in points), points


def test_records_changed_after_the_analysis_are_what_history_judges(tmp_path, capsys):
    """Sweeps whose job records say 1.4x from the third on, while their analyses (written before the
    records changed) still say the old time: history judges the records, as compare does, and its
    gate fails (before: "no change", exit 0, on tables it warned were stale). Nothing is written
    into the sweeps."""
    folders = analysed_sweeps(tmp_path / "n", 4)
    for folder in folders[2:]:  # the jobs rerun since, 1.4x: only their records know
        for job in folder.glob("[0-9]*_matmul_add_*"):
            shutil.rmtree(job)
        hand_made_point(folder, 0, processes(140))
        rerun_after_analysis(folder)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "n").rglob("*") if p.is_file()}
    code, out, err = history(tmp_path / "n", "--fail-on-change", "1.10", "--out", tmp_path / "h", capsys=capsys)
    assert code == 1, out + err
    assert "s2: its analysis is older than 3 job records" in err and "history reads its job records instead" in err
    assert re.search(r"regression +matmul_add size=8 bf16 cold eager at \S+s2 \(sweep 3 of 4", out), out
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "n").rglob("*") if p.is_file()} == before


def test_tables_edited_after_the_analysis_are_not_believed_over_the_records(tmp_path, capsys):
    """summary.csv and repeats.csv edited by hand in the last two sweeps (every step 1.4x, the
    parquet twin removed):
    the bytes differ from what tables.sha256 says the analysis wrote, so history reads the records,
    says so, and finds no change (before: a confirmed 1.4x regression that no job measured)."""
    folders = analysed_sweeps(tmp_path / "n", 4)
    for folder in folders[2:]:
        for table in ("summary", "repeats"):
            frame = pd.read_csv(folder / f"{table}.csv")
            for column in [c for c in frame.columns if c.startswith(("timed_us", "host_us", "median_us"))]:
                frame[column] = frame[column] * 1.4
            frame.to_csv(folder / f"{table}.csv", index=False)
        (folder / "summary.parquet").unlink(missing_ok=True)
    code, out, err = history(tmp_path / "n", "--fail-on-change", "1.10", "--out", tmp_path / "h", capsys=capsys)
    assert code == 0 and "no change at 1 grid point" in out, out + err
    assert "s2: summary.csv, repeats.csv, summary.parquet (removed): not what its analysis wrote (tables.sha256); " \
           "history reads its job records instead" in err, err
    # an archive of tables alone (its job folders removed): read as they are, the edit said
    for folder in folders:
        for job in folder.glob("[0-9]*_matmul_add_*"):
            shutil.rmtree(job)
    code, out, err = history(tmp_path / "n", "--out", tmp_path / "h2", capsys=capsys)
    assert "s2: summary.csv, repeats.csv, summary.parquet (removed): not what its analysis wrote (tables.sha256), " \
           "and it keeps no job records to read instead: history reads the tables as they are" in err, err


def test_ignore_pairs_points_alike_in_the_ignored_key_first(tmp_path, capsys):
    """As compare: --ignore compile over sweeps that number their eager and compiled jobs
    differently is no change (before: a false 3x 'regression' at the renumbered sweeps)."""
    def make(i: int, folder: Path) -> None:
        eager_num, compiled_num = (0, 1) if i < 2 else (1, 0)
        hand_made_point(folder, eager_num, processes(100))
        hand_made_point(folder, compiled_num, processes(300), compile=True)

    analysed_sweeps(tmp_path / "n", 4, make)
    code, out, err = history(tmp_path / "n", "--ignore", "compile", "--fail-on-change", "1.10", "--out",
                             tmp_path / "h", capsys=capsys)
    assert code == 0 and "no change at 2 grid points" in out, out + err


# --- the search's Bonferroni correction, Benjamini-Hochberg across a grid, and what confirms -------------


def test_the_best_steps_p_value_is_bonferroni_corrected_over_its_places():
    """Four sweeps at log levels 0, 0, 0.3, 0.3 (a 1.35x step after the second), each with a
    variance of its level of 0.001 from two degrees of freedom of repeats. The step at sweep 2
    has d = 0.3, no scatter around its two levels, and se = sqrt(2 * 0.001 / 4 + 2 * 0.001 / 4)
    = sqrt(0.001). By hand, with Student's t for 2 degrees of freedom (P(|T| > t) = 1 - t /
    sqrt(2 + t^2)): t = (0.3 - log 1.05) / se, and the step could have been at any of the
    n - 1 = 3 places between four sweeps, with 0.8 of alpha spent on steps (weighted
    Bonferroni): p = 3 / 0.8 * (1 - t / sqrt(2 + t^2)) = 0.058, not below 0.05: no change is
    found, and that is the p-value of the first search (what Benjamini-Hochberg gets). Uncorrected,
    it would be a third of that (0.019) and found."""
    s = changes.Series(np.array([0.0, 0.0, 0.3, 0.3]), np.full(4, 0.001), 2)
    t = (0.3 - math.log(1.05)) / math.sqrt(0.001)
    hand = 3 / 0.8 * (1 - t / math.sqrt(2 + t * t))
    assert hand == pytest.approx(0.058, abs=0.001)
    i, j, p = changes.best(s, 0, 4)
    assert (i, j) == (2, 4) and p == pytest.approx(hand, rel=1e-9)
    assert changes.find(s) == ([], pytest.approx(hand, rel=1e-9))
    # a quieter series (variance 0.0005) is found at its step, with the corrected p-value
    quiet = changes.Series(np.array([0.0, 0.0, 0.3, 0.3]), np.full(4, 0.0005), 2)
    t = (0.3 - math.log(1.05)) / math.sqrt(0.0005)
    hand = 3 / 0.8 * (1 - t / math.sqrt(2 + t * t))
    assert changes.best(quiet, 0, 4) == (2, 4, pytest.approx(hand, rel=1e-9))


def _clear_steps(count: int) -> list[changes.Series]:
    """`count` series of four sweeps, each a clear 1.35x step after the second sweep (told apart by
    their first level)."""
    return [changes.Series(np.array([k, k, k + 0.3, k + 0.3], dtype=float), np.full(4, 0.0001), 4)
            for k in range(count)]


@pytest.mark.parametrize("p_values, kept", [
    # sorted .02 > 1/5 * .05 and .04 > 2/5 * .05: no discovery, though two are below .05 by themselves
    ([0.02, 0.04, 0.3, 0.5, 0.8], []),
    # .008 <= 1/5 * .05 and .02 <= 2/5 * .05: both
    ([0.008, 0.02, 0.3, 0.5, 0.8], [0, 1]),
    # step-up: .04 <= 5/5 * .05 takes all five
    ([0.04, 0.03, 0.02, 0.011, 0.045], [0, 1, 2, 3, 4]),
    # a series where nothing could be tested (None) is not among the tests: .04 <= 2/2 * .05
    ([0.02, 0.04, None, None, None], [0, 1]),
])
def test_judge_keeps_the_changes_benjamini_hochberg_discovers_across_the_series(monkeypatch, p_values, kept):
    """judge keeps a change where Benjamini-Hochberg at 0.05 over every change's p-value discovers
    it (hand-computed per case), not wherever its own p-value is below 0.05. changes.find is made
    to report one change at sweep 2 of each series with the p-value given."""
    many = _clear_steps(len(p_values))
    by_first = {float(s.y[0]): p for s, p in zip(many, p_values)}

    def find(s, alpha=changes.ALPHA):
        p = by_first[float(s.y[0])]
        return ([(2, p)] if p is not None else []), p

    monkeypatch.setattr(changes, "find", find)
    found, tested = judge(many)
    assert tested == sum(p is not None for p in p_values)
    assert [n for n, shifts in enumerate(found) if shifts] == kept
    for n in kept:
        assert [(s.at, s.p_value) for s in found[n]] == [(2, p_values[n])]


def _six_sweeps(loaded: int | None = None):
    """A History of one grid point over six sweeps (three repeats each, 2% apart), 100 µs for three
    sweeps then 150 µs: the sweep `loaded` measured on a loaded machine."""
    from analysis.history.engine import History, Line, Point

    points = [Point(i, f"{i}_job", {"timed_us_per_step": (3, math.log(100.0 if i < 3 else 150.0) + 0.001 * (i % 2),
                                                          0.0004)},
                    "other processes used 1.8 CPUs" if i == loaded else None) for i in range(6)]
    return History([{} for _ in range(6)], [], [], [Line((1, 1), {}, "matmul_add size=8", points)])


@pytest.mark.parametrize("loaded, status", [
    (None, "regression"), (0, "regression"),  # sweep 0 is not among those the change rests on
    (2, "unconfirmed"), (3, "unconfirmed"), (4, "unconfirmed"),  # the last before it, the two from it on
    (5, "regression"),
])
def test_a_step_measured_on_a_loaded_machine_is_not_a_confirmed_regression(loaded, status):
    """A 1.5x step at sweep 3 of 6 (interval about [1.47, 1.53]) is a confirmed regression, unless
    one of the sweeps it rests on (the last before it and the two from it on: sweeps 2, 3 and 4)
    was measured on a loaded machine; then it is reported, unconfirmed."""
    from analysis.history.engine import analyse

    history = _six_sweeps(loaded)
    analyse(history)
    [shift] = history.lines[0].shifts
    assert shift.at == 3 and shift.ratio == pytest.approx(1.5, rel=0.01)
    assert shift.low > 1.05 and shift.status == status


@pytest.mark.parametrize("low, high, confirmed", [
    (1.3, 1.7, True),    # past +5%: above
    (1.02, 2.2, False),  # straddles the band: inconclusive
    (0.7, 0.9, True),    # an interval below -5% of a ratio reported as a fall
])
def test_a_change_is_confirmed_only_where_its_interval_is_past_the_band(low, high, confirmed):
    """_checked confirms a change only as compare's one rule would call it (profsweep.decide):
    a 1.5x step whose interval [1.02, 2.2] reaches into the ±5% band is inconclusive, so not a
    confirmed regression even though the sweeps after it agree; with [1.3, 1.7] it stands."""
    from analysis.history.engine import _checked

    history = _six_sweeps()
    ratio = 1.5 if low > 1 else 0.8
    shift = changes.Shift(3, 0, 6, 100.0, 100.0 * ratio, ratio, low, high, 1e-6, True)
    assert _checked(history.lines[0], shift, history.sweeps).confirmed is confirmed


def test_ignore_keeps_a_line_per_ignored_value_where_sweeps_measured_both(tmp_path, capsys):
    """Sweeps 1-2 measured eager and compiled, sweeps 3-4 compiled only: under --ignore compile the
    compiled line runs through all four and the eager one stops, no change (before: the third
    sweep's compiled point was paired with the second's eager one, a false 3x regression, exit 1),
    as compare pairs the second and third sweeps. Sweeps that each ran one allocator are joined
    across it, which is what --ignore is for."""
    def make(i: int, folder: Path) -> None:
        hand_made_point(folder, 0, processes(300), compile=True)
        if i < 2:
            hand_made_point(folder, 1, processes(100))

    analysed_sweeps(tmp_path / "n", 4, make)
    code, out, err = history(tmp_path / "n", "--ignore", "compile", "--fail-on-change", "1.10", "--out",
                             tmp_path / "h", capsys=capsys)
    assert code == 0 and "no change at 2 grid points" in out and "regression  " not in out, out + err
    # each line named by the ignored value it ran with (before: the same words, and "#2")
    assert "not measured in the newest sweep (s3), measured before: matmul_add size=8 bf16 cold (compile False)" in out
    assert set(pd.read_csv(tmp_path / "h" / "trends.csv")["point"]) == {
        "matmul_add size=8 bf16 cold (compile False)", "matmul_add size=8 bf16 cold (compile True)"}
    analysed_sweeps(tmp_path / "a", 4, lambda i, folder: hand_made_point(
        folder, 0, processes(100 if i < 2 else 200), allocator="system" if i < 2 else "steady"))
    code, out, err = history(tmp_path / "a", "--ignore", "allocator", "--out", tmp_path / "ha", capsys=capsys)
    assert code == 0 and re.search(r"regression +matmul_add size=8 bf16 cold eager \(allocator system → steady\) at "
                                   r"\S+s2 .*2\.00x", out), out + err


def test_a_sweep_read_from_its_records_is_read_once_and_leaves_nothing(tmp_path, capsys):
    """A sweep whose records are newer than its analysis is analysed anew once: the next history
    finds it in the store as it is (before: re-analysed and re-ingested on every run), and the
    temporary tables are gone when history returns (not when the process ends)."""
    import tempfile

    from analysis.store import FRESH_PREFIX

    later = rerun_after_analysis(analysed_sweeps(tmp_path / "n", 3)[2])
    before = set(Path(tempfile.gettempdir()).glob(f"{FRESH_PREFIX}{os.getpid()}-*"))
    said = []
    for _ in range(3):
        code, out, err = history(tmp_path / "n", "--out", tmp_path / "h", capsys=capsys)
        assert code == 0, out + err
        said.append(out.splitlines()[0])
        assert set(Path(tempfile.gettempdir()).glob(f"{FRESH_PREFIX}{os.getpid()}-*")) == before
    assert said[0].startswith("history: ingested 3 new sweeps, 0 already in the store")
    assert said[1].startswith("history: ingested 0 new sweeps, 3 already in the store"), said
    assert said[2] == said[1]
    first, *others = sorted((tmp_path / "n" / "s2").glob("*/metrics.json"))
    os.utime(first, ns=(later + 10**9, later + 10**9))  # rerun again
    code, out, _ = history(tmp_path / "n", "--out", tmp_path / "h", capsys=capsys)
    assert out.startswith("history: ingested 1 new sweep (1 of them again: analysed since), 2 already"), out
    shutil.rmtree(others[0].parent)  # a job removed since (not the newest record): read again too
    code, out, _ = history(tmp_path / "n", "--out", tmp_path / "h", capsys=capsys)
    assert out.startswith("history: ingested 1 new sweep (1 of them again: analysed since), 2 already"), out


def test_a_sweep_whose_records_cannot_be_analysed_anew_is_read_as_analysed(tmp_path, capsys, monkeypatch):
    """One sweep's failed analysis does not end the history: its written analysis is read, with a
    warning."""
    from analysis import store

    rerun_after_analysis(analysed_sweeps(tmp_path / "n", 2)[1])

    def broken(folder):
        raise RuntimeError("no analysis today")

    with monkeypatch.context() as patched:
        patched.setattr(store, "fresh_tables", broken)
        code, out, err = history(tmp_path / "n", "--out", tmp_path / "h", capsys=capsys)
    assert code == 0 and "no change at 1 grid point" in out, out + err
    assert "s1: its job records could not be analysed anew (RuntimeError: no analysis today); its written analysis " \
           "is read" in err
    # the next history tries again (stored as its written analysis, not as its records)
    code, out, err = history(tmp_path / "n", "--out", tmp_path / "h", capsys=capsys)
    assert out.startswith("history: ingested 1 new sweep (1 of them again: analysed since), 1 already"), out + err


def test_tables_a_killed_history_left_are_cleared(tmp_path, monkeypatch):
    """A history killed outright while it analysed a sweep anew leaves its temporary tables; the
    next one that analyses a sweep anew clears them (their pid names no process), not a live one's."""
    import subprocess
    import sys
    import tempfile

    from analysis import store

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    left, live = tmp_path / "tmp" / f"{store.FRESH_PREFIX}{dead}-x", tmp_path / "tmp" / f"{store.FRESH_PREFIX}1-y"
    recent = tmp_path / "tmp" / f"{store.FRESH_PREFIX}{dead}-z"  # its pid gone, but new: another container's?
    for folder in (left, live, recent):
        folder.mkdir()
    old = time.time() - store.FRESH_LEFT_S - 60
    for folder in (left, live):
        os.utime(folder, (old, old))
    hand_made_point(tmp_path / "s", 0, processes(100))
    made = store.fresh_tables(tmp_path / "s")
    assert (made / "summary.csv").is_file() and not left.exists() and live.exists() and recent.exists()  # pid 1 lives


def test_two_ignored_keys_join_the_lines_apart_in_fewer_of_them(tmp_path, capsys):
    """--ignore compile --ignore allocator: sweeps 1-2 measured eager and compiled on system, 3-4
    compiled only on steady. The compiled line runs through all four (apart in the allocator only);
    the eager one stops (before: joined to the compiled points, apart in both, a false 3x)."""
    def make(i: int, folder: Path) -> None:
        if i < 2:
            hand_made_point(folder, 0, processes(100), allocator="system")
            hand_made_point(folder, 1, processes(300), compile=True, allocator="system")
        else:
            hand_made_point(folder, 0, processes(300), compile=True, allocator="steady")

    analysed_sweeps(tmp_path / "n", 4, make)
    code, out, err = history(tmp_path / "n", "--ignore", "compile", "--ignore", "allocator", "--fail-on-change",
                             "1.10", "--out", tmp_path / "h", capsys=capsys)
    assert code == 0 and "no change at 2 grid points" in out and "regression  " not in out, out + err


def test_lines_joined_across_ignored_keys_are_as_far_apart_as_their_farthest_points(tmp_path, capsys):
    """Sweeps 1-2: eager and compiled on system; 3-4: eager on steady; 5-6: compiled on steady.
    Under --ignore compile --ignore allocator the eager line runs s1-s4 and the compiled one s1, s2,
    s5, s6 (before: once eager/system had joined eager/steady, the line was 'one key' from
    compiled/steady by its steady point, and took it: a false 3x regression at s5, exit 1)."""
    def make(i: int, folder: Path) -> None:
        if i < 4:
            hand_made_point(folder, 0, processes(100), allocator="system" if i < 2 else "steady")
        if i < 2 or i >= 4:
            hand_made_point(folder, 1, processes(300), compile=True, allocator="system" if i < 2 else "steady")

    analysed_sweeps(tmp_path / "n", 6, make)
    code, out, err = history(tmp_path / "n", "--ignore", "compile", "--ignore", "allocator", "--fail-on-change",
                             "1.10", "--out", tmp_path / "h", capsys=capsys)
    assert code == 0 and "regression  " not in out, out + err
    assert set(pd.read_csv(tmp_path / "h" / "trends.csv")["point"]) == {
        "matmul_add size=8 bf16 cold (compile False; allocator system → steady)",
        "matmul_add size=8 bf16 cold (compile True; allocator system → steady)"}


def test_an_ignored_setting_that_does_not_apply_is_not_named(tmp_path, capsys):
    """--ignore compile_mode: the eager line is named without it (it read 'compile_mode None')."""
    def make(i: int, folder: Path) -> None:
        mode = "default" if i == 0 else "max-autotune"
        hand_made_point(folder, 0, processes(100), compile_mode=mode)
        hand_made_point(folder, 1, processes(300), compile_mode=mode, compile=True)

    analysed_sweeps(tmp_path / "n", 3, make)
    code, out, err = history(tmp_path / "n", "--ignore", "compile_mode", "--out", tmp_path / "h", capsys=capsys)
    assert code == 0, out + err
    assert set(pd.read_csv(tmp_path / "h" / "trends.csv")["point"]) == {
        "matmul_add size=8 bf16 cold eager", "matmul_add size=8 bf16 cold compile (compile_mode default → max-autotune)"}


def test_a_stop_while_the_page_is_drawn_leaves_no_old_page_beside_the_new_tables(tmp_path, capsys, monkeypatch):
    from analysis.history import engine

    sweeps = history_of(tmp_path / "all", 5)
    (tmp_path / "nightly").mkdir()
    for sweep in sweeps[:3]:
        sweep.rename(tmp_path / "nightly" / sweep.name)
    history(tmp_path / "nightly", "--out", tmp_path / "h", capsys=capsys)
    assert (tmp_path / "h" / "history.html").is_file()
    for sweep in sweeps[3:]:  # two sweeps more
        sweep.rename(tmp_path / "nightly" / sweep.name)

    def stopped(*_):
        raise KeyboardInterrupt  # a stop while the plots are drawn

    monkeypatch.setattr(engine, "write_page", stopped)
    from analysis.__main__ import stoppable

    assert stoppable(["history", str(tmp_path / "nightly"), "--out", str(tmp_path / "h")]) == 130
    assert "run the same command again" in capsys.readouterr().err
    assert not (tmp_path / "h" / "history.html").exists()
    assert len(pd.read_csv(tmp_path / "h" / "trends.csv")["sweep"].unique()) == 5


def test_a_copy_of_a_sweep_is_counted_once(tmp_path, capsys):
    """helper-34: a sweep 1.5x slower, then a `cp -r` of it, made history confirm a regression
    (two sweeps showed it) and fail the gate; a copy is no second measurement."""
    import shutil

    rng = np.random.default_rng(3)
    root = tmp_path / "n"
    for day, level in ((1, 100.0), (2, 100.0), (3, 150.0)):
        folder = write_sweep(root / f"s0{day}", day, {8: noisy(level, rng, within=0.02)})
        repeats = pd.read_csv(folder / "repeats.csv")
        repeats["started_at"] = [f"2026-12-0{day}T02:00:0{r}.123+00:00" for r in range(len(repeats))]
        repeats.to_csv(folder / "repeats.csv", index=False)
    shutil.copytree(root / "s03", root / "s04")
    code, out, err = history(*(root / f"s0{d}" for d in (1, 2, 3, 4)), "--order", "given", "--fail-on-change", "1.1",
                             "--out", tmp_path / "h", capsys=capsys)
    assert f"warning: {root / 's04'} and {root / 's03'} hold the same measurements (the same start and job start " \
        f"times: a folder copied, perhaps resumed since): counted once, as {root / 's03'}" in err
    assert code == 0 and "history: 3 sweeps" in out
    changes = pd.read_csv(tmp_path / "h" / "regressions.csv")
    assert "regression" not in set(changes["status"])  # one sweep shows the step: not confirmed
    # a copy resumed since with a fourth process (helper-45: it confirmed the step, exit 1): the
    # one with more processes is kept, once
    shutil.rmtree(root / "s04")
    shutil.copytree(root / "s03", root / "s04")
    repeats = pd.read_csv(root / "s04" / "repeats.csv")
    extra = repeats.iloc[[0]].assign(job="9_matmul_add_8_bf16_warm_eager_r4", repeat=4,
                                     started_at="2026-12-05T02:00:09.123+00:00")
    pd.concat([repeats, extra]).to_csv(root / "s04" / "repeats.csv", index=False)
    code, out, err = history(*(root / f"s0{d}" for d in (1, 2, 3, 4)), "--order", "given", "--fail-on-change", "1.1",
                             "--out", tmp_path / "h3", capsys=capsys)
    assert f"warning: {root / 's03'} and {root / 's04'} hold the same measurements" in err, err
    assert code == 0 and "history: 3 sweeps" in out, out
    code, _, err = history(root / "s03", root / "s04", "--out", tmp_path / "h2", capsys=capsys)
    assert code == 2 and "the 2 sweeps given are copies of one" in err
    # a copy whose path sorts first, ordered by time: the one named first is kept (it was the copy)
    shutil.rmtree(root / "s04")
    shutil.copytree(root / "s03", tmp_path / "a_copy")
    code, out, err = history(*(root / f"s0{d}" for d in (1, 2, 3)), tmp_path / "a_copy", "--out", tmp_path / "h4",
                             capsys=capsys)
    assert f"warning: {tmp_path / 'a_copy'} and {root / 's03'} hold the same measurements" in err, err
    assert f"counted once, as {root / 's03'}" in err


def test_a_smallest_findable_step_past_10x_is_said_as_more_than_10x(tmp_path, capsys):
    """helper-34: three sweeps of two processes a point printed 'the smallest step these histories
    could have found: 74782.88x to 74782.88x'."""
    rng = np.random.default_rng(5)
    root = tmp_path / "n"
    for day in (1, 2, 3):
        write_sweep(root / f"s0{day}", day, {8: noisy(100.0, rng, repeats=2, within=0.3)})
    code, out, _ = history(root, "--out", tmp_path / "h", capsys=capsys)
    assert code == 0
    line = next(x for x in out.splitlines() if "smallest step these histories" in x)
    assert "more than 10x" in line and "run.repeats=3 or more" in line, line
    trends = pd.read_csv(tmp_path / "h" / "trends.csv")
    assert (trends["smallest_change"].dropna() > 10).all()  # the number itself stays in the table
    # with 3 processes a sweep already, the advice is not to run 3 (helper-43)
    root = tmp_path / "m"
    for day in (1, 2, 3):
        write_sweep(root / f"s0{day}", day, {8: noisy(100.0, rng, repeats=3, within=1.5)})
    code, out, _ = history(root, "--out", tmp_path / "h3", capsys=capsys)
    line = next(x for x in out.splitlines() if "smallest step these histories" in x)
    assert "more than 10x" in line and "more processes (run.repeats), or a quieter machine" in line, line
    assert "run.repeats=3 or more" not in line


def test_the_band_is_the_history_commands(tmp_path, capsys):
    """A 1.10x step from sweep 5 of 8, the machine steady: a regression past the default ±5%, none
    within ±20% (`--band 0.2`); a band out of range is refused before anything is written."""
    history_of(tmp_path / "n", 8, step=(32, 4, 1.10), between=0.005, within=0.01)
    code, out, _ = history(tmp_path / "n", "--fail-on-change", "1.05", capsys=capsys)
    assert code == 1 and "regression   matmul_add size=32 bf16 warm eager" in out
    code, out, _ = history(tmp_path / "n", "--band", "0.2", "--fail-on-change", "1.05", capsys=capsys)
    assert code == 0 and "regression   " not in out and "changes of at least 20%" in out
    with pytest.raises(SystemExit) as refused:
        history(tmp_path / "m", "--band", "-1", capsys=capsys)
    assert refused.value.code == 2 and "--band: -1 is not allowed" in capsys.readouterr().err


def test_a_point_of_one_process_a_sweep_is_said_not_testable_not_unchanged(tmp_path, capsys):
    """Two sweeps, one process each, the step 180x from one to the other: history said `no change
    at 1 grid point` over 0 tests (helper-37); now it is not testable, on the terminal and the page.
    (With three sweeps or more the scatter between them is the noise: see the tests above.)"""
    for i, value in enumerate((130_000.0, 722.0)):
        write_sweep(tmp_path / "h" / f"s{i + 1}", i + 1, {8: [value]})
    code, out, _ = history(tmp_path / "h", capsys=capsys)
    assert code == 0 and "over 0 tests" in out
    assert "not testable at 1 grid point: one process a sweep says nothing of the variation" in out
    assert "no change at" not in out and "a change at every" not in out
    page = (tmp_path / "h" / "history" / "history.html").read_text()
    assert "Not testable at 1 grid point" in page and "No change found where one could be tested." in page


def test_a_sweep_whose_table_was_cut_short_is_skipped_not_read_as_fewer_rows(tmp_path, capsys):
    """repeats.csv cut in half mid-row: history said `5 of the 8 planned never ran` and that the
    newest sweep lacked a grid point it had measured, exit 0 (helper-38)."""
    history_of(tmp_path / "n", 3, sizes=(8, 16))
    cut = tmp_path / "n" / "s03" / "repeats.csv"
    text = cut.read_bytes()
    cut.write_bytes(text[: len(text) // 2 + 3])
    assert not cut.read_bytes().endswith(b"\n")
    code, out, err = history(tmp_path / "n", capsys=capsys)
    assert f"warning: skipped: {cut} is cut short (its last row does not end): python -m analysis " in err
    assert "ingested 2 new sweeps" in out
