"""The report's conclusions, from hand-made sweep folders whose answers are known by construction:
compute overtakes overhead at size 256, compile is 2× slower at 64 and 1.3× faster at 1024."""

from __future__ import annotations

import json
import math
import re
import statistics
from html import unescape
from pathlib import Path

import pandas as pd
import pytest

from analysis import analyse_folder
from analysis.report.conclusions import change, conclude
from analysis.top_ops import top_ops
from tests.conftest import CUDA_TRACES, jitter, job
from profsweep.contract import GridPoint, Job
from profsweep.decide import decide_test


def known_sweep(folder: Path) -> Path:
    """Eager: compute / overhead 0.5 at 64 and 2 at 1024 (so the crossover is at their geometric
    mean, 256); un-profiled steps: compile 200 vs eager 100 µs at 64, 1000 vs 1300 µs at 1024."""
    num = 0
    for repeat in (1, 2, 3):
        for size, compile, step, mm, timed in ((64, False, 300, 100, 100), (64, True, 300, 150, 200),
                                               (1024, False, 3000, 2000, 1300), (1024, True, 3000, 2400, 1000)):
            job(folder, num, size=size, compile=compile, step_us=step, mm_us=mm, timed_us=timed, repeat=repeat)
            num += 1
    return folder


def conclusions_html(folder: Path) -> str:
    page = (folder / "report.html").read_text()
    section = re.search(r"<section id='conclusions'>(.*?)</section>", page, re.S)
    assert section, page[:2000]
    return unescape(re.sub(r"<[^>]+>", " ", section.group(1)))


def test_conclusions_state_the_crossover_and_what_compile_changed_with_the_tables_figures(tmp_path, capsys):
    folder = known_sweep(tmp_path / "sweep")
    assert analyse_folder(folder) == []
    page = (folder / "report.html").read_text()
    # first on the page, before any table
    assert page.index("<section id='conclusions'>") < page.index("<table")
    said = conclusions_html(folder)
    crossovers = pd.read_csv(folder / "crossovers.csv")
    eager = crossovers[~crossovers["compile"].astype(bool)].iloc[0]
    assert abs(eager["crossover_size"] - 256) < 1e-6  # the profiled split: 0.5 at 64 and 2 at 1024, log-interpolated
    # The model of the un-profiled steps, by hand: 100 µs at 64 (2 * 64^3 FLOPs), 1300 at 1024:
    # b = 1200 / (2 * 1024^3 - 2 * 64^3) µs a FLOP, a = 100 - b * 2 * 64^3, crossover where b * work = a.
    b = 1200 / (2 * 1024 ** 3 - 2 * 64 ** 3)
    a = 100 - b * 2 * 64 ** 3
    crossing = (a / b / 2) ** (1 / 3)
    assert eager["fit_overhead_us"] == pytest.approx(a, rel=0.01)
    assert eager["fit_throughput"] == pytest.approx(1e6 / b, rel=0.01)
    assert eager["fit_crossover_size"] == pytest.approx(crossing, rel=0.01)
    assert eager["fit_crossover_size_low"] < crossing < eager["fit_crossover_size_high"]
    assert f"the work costs more than the overhead from size ≈{crossing:.1f}" in said, said
    assert re.search(r"2\.0\d× slower \[[\d.]+×, [\d.]+×\] at 64", said), said
    assert re.search(r"1\.3\d× faster \(0\.7\d× \[[\d.]+×, [\d.]+×\]\) at 1024", said), said
    # the regime by the model: b * work / a at each size, with its interval
    low, high = b * 2 * 64 ** 3 / a, b * 2 * 1024 ** 3 / a
    assert re.search(rf"cold eager, by measured time \(the un-profiled step's fitted work cost / overhead floor\): "
                     rf"overhead-bound at 64 \({low:.2g}× \[[^]]+\]\); compute-bound at 1024 \({high:.1f}×", said), said
    # ... and the terminal's last lines say the same
    out = capsys.readouterr().out
    assert "conclusions (with their tables and plots in report.html):" in out
    assert f"from size ≈{crossing:.1f}" in out
    # ... after a short answer, on the terminal and at the top of the page: the headline verdicts
    short = out[out.index("in short:"):out.index("conclusions (with")]
    assert f"matmul_add bf16 cold eager: overhead-bound below size ≈{crossing:,.0f} [" in short
    assert re.search(r"cold eager: overhead-bound below size ≈\d+ \[\d+, \d+\], compute-bound above it", short), short
    assert re.search(r"compile against eager, matmul_add bf16 cold: 2\.0\d× slower \[[\d.]+×, [\d.]+×\] at 64; "
                     r"1\.3\d× faster \(0\.7\d× \[[\d.]+×, [\d.]+×\]\) at 1024", short), short
    assert page.index("<section id='in-short'>") < page.index("<section id='conclusions'>")


def test_where_the_time_goes_per_grid_point_in_top_ops_csv(tmp_path):
    folder = tmp_path / "sweep"
    job(folder, 0, size=64, compile=False, step_us=400, mm_us=200, timed_us=100, add_us=100, steps=4)
    analyse_folder(folder)
    top = pd.read_csv(folder / "top_ops.csv")
    ops = top[top["kind"] == "op"].sort_values("rank")
    # by hand: a step of 400 µs holds aten::mm 200 and aten::add 100 of self time; the step's own
    # annotation (ProfilerStep#, 100 µs of self time) is the profiler's, not an op, but its time
    # is the step's
    assert list(ops["name"]) == ["aten::mm", "aten::add"]
    assert list(ops["us_per_step"]) == [200.0, 100.0]
    assert list(ops["share"]) == [200 / 400, 100 / 400]
    assert list(ops["calls_per_step"]) == [1.0, 1.0]
    assert list(ops["all_ops_share"]) == [300 / 400] * 2  # the ops together; the rest is the annotation's
    assert set(top["kind"]) == {"op", "compute op"}  # a CPU sweep: its "kernels" are the compute ops
    assert "where the time goes" in conclusions_html(folder)


def test_the_cpu_page_has_no_gpu_only_column(tmp_path):
    folder = known_sweep(tmp_path / "sweep")
    analyse_folder(folder)
    page = (folder / "report.html").read_text()
    for gpu_only in ("kernels/step", "launches/step", "GPU busy", "device µs/step"):
        assert gpu_only not in page, gpu_only
    assert "compute µs/step (CPU)" in page


def test_a_change_whose_interval_holds_one_has_no_direction():
    same = [jitter(100, 30), jitter(104, 30), jitter(96, 30)]
    other = [jitter(101, 30), jitter(97, 30), jitter(105, 30)]
    said, ratio = change(same, other, 100.0, 101.0)
    assert said.startswith("no clear difference") and 0.9 < ratio < 1.1
    # no interval, no verdict: one process each (the one rule decides nothing without an interval)
    said, _ = change([jitter(100, 30)], [jitter(200, 30)], 100.0, 200.0)
    assert said == ("undecided (2.00×; one process each: no interval; 3 processes a side or more (run.repeats=3) "
                    "would show the spread between processes)")
    said, _ = change([jitter(100, 30)] * 3, [jitter(150, 30)], 100.0, 150.0)  # two of one side's jobs failed
    assert said.startswith("undecided (1.50×; 3 vs 1 processes: no interval; ")
    said, _ = change([], [], 100.0, 50.0)
    assert said == "undecided (0.50×; from the two medians: no interval)"


def test_no_conclusion_from_failed_points_and_none_for_an_empty_sweep():
    assert conclude([], [], [], []) == []
    failed = {"job": "0_x", "status": "failed", "size": 64, "workload": "matmul_add", "regime": "compute-bound",
              "work_host_ratio": 3.0}
    points, jobs = [GridPoint(failed)], [Job(failed)]
    assert conclude(points, [], jobs, top_ops(points, jobs, {}, [])) == []


@pytest.mark.skipif(not (CUDA_TRACES / "a100_alexnet.json.gz").exists(), reason="../shared/fixtures not present")
def test_a_gpu_job_shows_its_top_kernels_by_device_time_and_gpu_columns(tmp_path):
    """A recorded A100 trace (AlexNet forward, no ProfilerStep#: one step): the top kernels by
    their summed duration, checked against a count made here from the trace's own events."""
    import gzip
    import shutil

    folder = tmp_path / "sweep"
    path = folder / "0_alexnet_1_fp32_cold_eager"
    path.mkdir(parents=True)
    shutil.copy(CUDA_TRACES / "a100_alexnet.json.gz", path / "t.json.gz")
    (path / "metrics.json").write_text(json.dumps({
        "job": path.name, "workload": "alexnet", "size": 1, "dtype": "fp32", "compile": False, "warmup": False,
        "train": False, "device": "cuda", "status": "ok", "error": None, "steps": 1, "trace_file": "t.json.gz",
        "table_file": "t.txt", "config_hash": "alexnet", "schema_version": 1}))
    analyse_folder(folder)
    events = json.loads(gzip.open(path / "t.json.gz").read())["traceEvents"]
    by_name: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "kernel":
            by_name[e["name"]] = by_name.get(e["name"], 0.0) + e["dur"]
    expected = sorted(by_name.items(), key=lambda kv: -kv[1])[:3]
    top = pd.read_csv(folder / "top_ops.csv")
    kernels = top[top["kind"] == "kernel"].sort_values("rank").head(3)
    assert list(kernels["name"]) == [name for name, _ in expected]
    assert [round(x, 3) for x in kernels["us_per_step"]] == [round(us, 3) for _, us in expected]
    page = (folder / "report.html").read_text()
    assert "kernels/step" in page and "compute µs/step (CPU)" not in page
    assert "device time by kernel" in conclusions_html(folder)


def test_a_job_that_ran_another_dtype_is_said_first_and_listed(tmp_path):
    folder = known_sweep(tmp_path / "sweep")
    first = sorted(folder.iterdir())[0] / "metrics.json"
    record = json.loads(first.read_text())
    record["warnings"] = ["inputs are float64, the grid asked for bf16"]
    first.write_text(json.dumps(record))
    analyse_folder(folder)
    said = conclusions_html(folder).split("→")[0]
    assert "1 of 12 jobs warned: inputs are float64, the grid asked for bf16" in said
    page = (folder / "report.html").read_text()
    assert "<h2 id='warnings' class='bad'>" in page and f"<b>{record['job']}</b>: inputs are float64" in page


def test_a_setting_that_differs_between_grid_points_makes_series_of_their_own(tmp_path):
    """compile.mode swept on eager jobs (a setting outside the series keys): two series, each with
    its own crossover, never one mixed series."""
    folder = tmp_path / "sweep"
    num = 0
    for mode, ratios in (("default", (0.5, 2.0)), ("max-autotune", (0.25, 0.5))):
        for size, ratio in zip((64, 1024), ratios):
            step = 300.0 * (1 if size == 64 else 10)
            job(folder, num, size=size, compile=False, step_us=step, mm_us=step * ratio / (1 + ratio), timed_us=100,
                compile_mode=mode)
            num += 1
    analyse_folder(folder)
    crossovers = pd.read_csv(folder / "crossovers.csv").set_index("settings")
    assert sorted(crossovers.index) == ["compile_mode=default", "compile_mode=max-autotune"]
    assert abs(crossovers.loc["compile_mode=default", "crossover_size"] - 256) < 1e-6
    assert pd.isna(crossovers.loc["compile_mode=max-autotune", "crossover_size"])
    said = conclusions_html(folder)
    assert "matmul_add compile_mode=default bf16 cold eager: compute time overtakes overhead time at size ≈256.0" in said
    assert "matmul_add compile_mode=max-autotune bf16 cold eager: no crossover between sizes 64 and 1024" in said


def test_noisy_points_and_uninformative_intervals_are_said_as_such():
    from analysis.report.conclusions import _regime

    rows = [{"size": 64, "regime": "overhead-bound", "work_host_ratio": 0.5, "work_host_ratio_low": 0.001,
             "work_host_ratio_high": 900.0, "repeats": 2, "regime_uncertain": True, "noisy": True,
             "status": "ok", "variant": "matmul_add", "dtype": "bf16", "warmup": False, "compile": False},
            {"size": 1024, "regime": "compute-bound", "work_host_ratio": 2.0, "work_host_ratio_low": 1.5,
             "work_host_ratio_high": 2.5, "repeats": 3, "noisy": False,
             "status": "ok", "variant": "matmul_add", "dtype": "bf16", "warmup": False, "compile": False}]
    said = _regime(rows, None)[0].text
    assert "overhead-bound at 64 (0.50× [too wide to read: 2 repeats], uncertain, noisy)" in said
    assert "compute-bound at 1024 (2.00× [1.50×, 2.50×])" in said


def test_the_optimizer_of_an_inference_step_makes_no_series():
    from analysis.points import series_settings, settings_text

    rows = [{"status": "ok", "train": False, "optimizer": None, "compile_mode": "default"},
            {"status": "ok", "train": True, "optimizer": "adamw", "compile_mode": "default"}]
    assert series_settings(rows) == []  # training is a series key already; its optimizer follows it
    rows.append({"status": "ok", "train": True, "optimizer": "sgd", "compile_mode": "default"})
    assert series_settings(rows) == ["optimizer"]
    assert [settings_text(r, ["optimizer"]) for r in rows] == ["", "optimizer=adamw", "optimizer=sgd"]


def test_each_series_says_where_its_own_time_goes(tmp_path):
    """Two dtypes of one grid point: each sentence quotes its own grid point's ops (they were once
    looked up by a label that left the dtype out)."""
    folder = tmp_path / "sweep"
    job(folder, 0, size=64, compile=False, step_us=400, mm_us=200, timed_us=100, add_us=100)
    job(folder, 1, size=64, compile=False, step_us=400, mm_us=50, timed_us=100, add_us=250, dtype="fp32")
    analyse_folder(folder)
    said = conclusions_html(folder)
    assert "where the time goes, matmul_add bf16 cold eager (host self time by op in a profiled step, the median over its steps; share of the step): at 64 aten::mm 50%" in said
    assert "where the time goes, matmul_add fp32 cold eager (host self time by op in a profiled step, the median over its steps; share of the step): at 64 aten::add 62%" in said
    top = pd.read_csv(folder / "top_ops.csv")
    assert top.groupby("job")["dtype"].nunique().max() == 1 and set(top["dtype"]) == {"bf16", "fp32"}


def test_an_ops_time_per_step_is_the_median_over_the_steps_not_the_mean(tmp_path):
    """A cold first step whose aten::mm takes 10x: the figure per step is the later steps' (200 µs),
    not the mean (560 µs)."""
    folder = tmp_path / "sweep"
    path = job(folder, 0, size=64, compile=False, step_us=400, mm_us=200, timed_us=100, steps=5)
    trace = json.loads((path / "t.json").read_text())
    first = [e for e in trace["traceEvents"] if e["name"] in ("ProfilerStep#1", "aten::mm")][:2]
    first[0]["dur"], first[1]["dur"] = 2200.0, 2000.0  # the first step, and its aten::mm
    for e in trace["traceEvents"]:
        if e["ts"] > first[0]["ts"] + 1:
            e["ts"] += 1800.0
    (path / "t.json").write_text(json.dumps(trace))
    analyse_folder(folder)
    top = pd.read_csv(folder / "top_ops.csv")
    mm = top[(top["kind"] == "op") & (top["name"] == "aten::mm")].iloc[0]
    assert mm["us_per_step"] == 200.0
    ops = pd.read_csv(folder / "ops.csv").set_index("name")
    assert ops.loc["aten::mm", "self_host_us"] == 2000 + 4 * 200  # the total stays the total
    assert ops.loc["aten::mm", "self_host_us_step_median"] == 200.0


def test_a_ratio_whose_interval_says_nothing_is_undecided_not_no_difference():
    """Two processes a side, one of them 80x slow: the ratio (0.011x) is far from 1 and its
    interval too wide to read; 'no clear difference' would read as 'the same'."""
    from analysis.report.conclusions import change

    base = [[100.0, 101.0, 99.0], [8000.0, 8100.0, 7900.0]]
    new = [[45.0, 46.0, 44.0], [50.0, 51.0, 49.0]]
    said, ratio = change(base, new, 4050.0, 47.5)
    assert ratio < 0.1 and said.startswith("undecided (") and "too wide to read" in said


def test_compile_against_eager_pairs_the_processes_of_each_round(tmp_path):
    """A sweep measures its grid round by round: a burst of another tenant's load that slows the
    machine 1.6x in round 2 slows both processes of that round. Compiled is 1.10x eager in every
    round; over the processes unpaired the rounds' speeds widen the interval past the band, in
    pairs by round they cancel and the verdict is decided (the sweeper's run.repeats=auto judges
    it the same way)."""
    from profsweep import stats as st

    speed = {1: 1.0, 2: 1.6, 3: 0.8}
    for r, f in speed.items():
        job(tmp_path, 2 * r, size=64, compile=False, step_us=400, mm_us=200, timed_us=100 * f, repeat=r)
        job(tmp_path, 2 * r + 1, size=64, compile=True, step_us=400, mm_us=200, timed_us=110 * f, repeat=r)
    analyse_folder(tmp_path)
    said = conclusions_html(tmp_path)
    assert re.search(r"compile against eager, matmul_add bf16 cold \(each round's two processes paired\): "
                     r"1\.1\d× slower \[1\.[01]\d×, 1\.1\d×\] at 64", said), said
    metrics = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/metrics.json"))]
    eager = [m["timed_samples_us"] for m in metrics if not m["compile"]]
    compiled = [m["timed_samples_us"] for m in metrics if m["compile"]]
    unpaired = decide_test(st.ratio_test(eager, compiled), 3)
    assert unpaired.outcome == "inconclusive" and unpaired.high > 1.3  # the rounds' speeds, not the code
    # by hand: the three pairs' log ratios, Student's t with 2 degrees of freedom
    logs = [math.log(st.median(c) / st.median(e)) for e, c in zip(eager, compiled)]
    half = st.t_quantile(0.975, 2) * statistics.stdev(logs) / math.sqrt(3)
    test = st.paired_ratio_test(list(zip(eager, compiled)))
    assert test.ratio == pytest.approx(math.exp(statistics.mean(logs)))
    assert (test.low, test.high) == pytest.approx((math.exp(statistics.mean(logs) - half),
                                                   math.exp(statistics.mean(logs) + half)))
    assert test.df == 2 and st.paired_ratio_test(list(zip(eager, compiled))[:1]).low is None
    # a fourth eager process (run.repeats=auto measured it more often): the rounds differ, so the
    # processes are judged unpaired, every one of them
    job(tmp_path, 8, size=64, compile=False, step_us=400, mm_us=200, timed_us=100, repeat=4)
    analyse_folder(tmp_path)
    said = conclusions_html(tmp_path)
    assert "compile against eager, matmul_add bf16 cold: " in said and "paired" not in said, said


def test_compile_against_eager_is_not_compared_where_torch_compile_compiled_nothing(tmp_path):
    """A GRU's compiled jobs made no graph (`compiled_nothing`): both sides ran eagerly, and a
    ratio between them (28.5x under load: helper-40) is no verdict on compile. Said so, at that
    size only, in the short answer and the conclusions."""
    from analysis.report.conclusions import NOTHING_COMPILED, in_short
    from analysis.tables import analyse_sweep

    for r in (1, 2, 3):
        job(tmp_path, 4 * r, size=64, compile=False, step_us=400, mm_us=200, timed_us=100, repeat=r)
        job(tmp_path, 4 * r + 1, size=64, compile=True, step_us=400, mm_us=200, timed_us=300, repeat=r,
            compiled_nothing=True)
        job(tmp_path, 4 * r + 2, size=256, compile=False, step_us=400, mm_us=200, timed_us=100, repeat=r)
        job(tmp_path, 4 * r + 3, size=256, compile=True, step_us=400, mm_us=200, timed_us=200, repeat=r)
    tables = analyse_sweep(tmp_path, lambda line: None)
    [short] = [line for line in in_short(tables.points, tables.crossovers, tables.jobs) if "compile against" in line]
    assert short.startswith(f"compile against eager, matmul_add bf16 cold: {NOTHING_COMPILED} at 64; 2.0")
    analyse_folder(tmp_path)
    said = conclusions_html(tmp_path)
    assert f"{NOTHING_COMPILED} at 64; 2.0" in said and "3.0" not in said, said


def test_the_short_answer_says_a_crossover_only_where_the_sizes_swept_bound_it(tmp_path):
    """A crossover beyond the sizes swept was stated as a regime above it that no grid point
    measured (`overhead-bound below size ≈5,694 [168, ∞], bound by its work above it` with 32 the
    largest size: helper-37): with its whole interval above them, `overhead-bound at every size
    swept`; with an interval reaching past them into them, or to infinity, nothing."""
    from analysis.report.conclusions import in_short
    from analysis.tables import analyse_sweep

    tables = analyse_sweep(known_sweep(tmp_path / "sweep"), lambda line: None)
    eager = [c for c in tables.crossovers if not c["compile"]]

    def short(**moved) -> str:
        crossovers = [{**c, **moved} if c in eager else c for c in tables.crossovers]
        return "\n".join(line for line in in_short(tables.points, crossovers, tables.jobs) if "cold eager" in line)

    assert re.search(r"overhead-bound below size ≈\d+ \[\d+, \d+\], compute-bound above it", short())
    assert short(fit_crossover_size=5694, fit_crossover_size_low=168, fit_crossover_size_high=math.inf) == ""
    assert short(fit_crossover_size=5694, fit_crossover_size_low=168, fit_crossover_size_high=9000) == ""
    said = short(fit_crossover_size=5694, fit_crossover_size_low=2000, fit_crossover_size_high=9000)
    assert "overhead-bound at every size swept (up to 1,024); the model puts the crossover above them, " \
           "at ≈5,694 [2,000, 9,000]" in said, said
    assert short(fit_crossover_size=20, fit_crossover_size_low=10, fit_crossover_size_high=30) == ""


def test_the_short_answer_names_the_regime_the_sizes_above_the_crossover_are_in(tmp_path):
    """Memory-bound there by the roofline: said so (before: always 'compute-bound above it')."""
    from analysis.report.conclusions import in_short
    from analysis.tables import analyse_sweep

    tables = analyse_sweep(known_sweep(tmp_path / "sweep"), lambda line: None)
    points = [p.replace(regime="memory-bound") if p["size"] == 1024 else p for p in tables.points]
    short = "\n".join(in_short(points, tables.crossovers, tables.jobs))
    assert re.search(r"cold eager: overhead-bound below size ≈\d+ \[\d+, \d+\], memory-bound above it", short), short
    # at the roofline's ridge there, neither label is claimed
    points = [p.replace(regime="memory-bound", regime_at_ridge=True) if p["size"] == 1024 else p for p in tables.points]
    short = "\n".join(in_short(points, tables.crossovers, tables.jobs))
    assert re.search(r"cold eager: overhead-bound below size ≈\d+ \[\d+, \d+\], bound by its work "
                     r"\(at the roofline's ridge at 1024\)", short), short
    from analysis.report.conclusions import _regime
    [said, *_] = _regime(sorted((p for p in points if not p["compile"]), key=lambda p: p["size"]), None)
    assert re.search(r"bound by its work at 1024 \([^)]*at the roofline's ridge: compute- or memory-bound alike\)",
                     said.text), said.text


def test_the_ceiling_a_point_at_the_ridge_is_held_against_is_both():
    from analysis.report.conclusions import _ceilings

    row = {"status": "ok", "workload": "matmul_add", "dtype": "bf16", "compile": False, "warmup": False, "size": 512,
           "regime": "memory-bound", "achieved_flops_frac": 0.36, "achieved_bandwidth_frac": 0.37,
           "peak_flops_per_s": 3.2e12, "peak_bytes_per_s": 2.4e10, "peak_source": "measured 2026-12-06"}
    [alone] = _ceilings([GridPoint(row)])
    assert "reaches 37% of this machine's measured memory bandwidth (24 GB/s, measured 2026-12-06)." in alone.text
    [both] = _ceilings([GridPoint({**row, "regime_at_ridge": "True"})])  # as summary.csv reads back
    assert ("reaches 36% of this machine's measured bf16 matmul peak (3.2 TFLOP/s, measured 2026-12-06) and 37% of "
            "this machine's measured memory bandwidth") in both.text, both.text
    assert "at the roofline's ridge" in both.text


def test_a_point_above_its_ceiling_names_what_may_overstate_it_and_the_dtype_it_ran_in():
    """helper-33: an embedding's table counted as read whole gave '755% of the memory bandwidth:
    it was measured low (a busy machine?)'; an fp32 model swept at dtype=bf16 was held against the
    bf16 peak."""
    from analysis.report.conclusions import _ceilings

    row = {"status": "ok", "workload": "custom", "dtype": "bf16", "ran_dtype": "fp32", "compile": False,
           "warmup": False, "size": 32, "regime": "memory-bound", "achieved_flops_frac": 0.01,
           "achieved_bandwidth_frac": 7.55, "peak_flops_per_s": 2.2e11, "peak_bytes_per_s": 2.4e10,
           "peak_source": "measured 2026-12-06"}
    [said] = _ceilings([GridPoint(row)])
    assert "reaches 755% of this machine's measured memory bandwidth" in said.text
    assert ("Above the ceiling: bytes_per_call counts every input and output as moved once to and from memory, "
            "which a step whose data stays in the caches moves faster than memory can, and one that reads part of "
            "an input (a gather) moves less; or the ceiling was measured low") in said.text, said.text
    [flops] = _ceilings([GridPoint({**row, "regime": "compute-bound", "achieved_flops_frac": 1.3})])
    assert "130% of this machine's measured fp32 matmul peak" in flops.text and "bytes_per_call" not in flops.text
    # a small share keeps two digits: 0.35%, not 0% (helper-40)
    [small] = _ceilings([GridPoint({**row, "regime": "compute-bound", "achieved_flops_frac": 0.0035})])
    assert "reaches 0.35% of this machine's measured fp32 matmul peak" in small.text, small.text


def _side_by_side(folder: Path, values: dict[int, tuple[float, float]]) -> None:
    """Each compiled job's eager and compiled steps timed in turn in its process, by round."""
    for path in folder.glob("*_compile*/metrics.json"):
        record = json.loads(path.read_text())
        eager, compiled = values[record["repeat"]]
        record.update(side_by_side_eager_us=eager, side_by_side_compiled_us=compiled, side_by_side_steps=30)
        path.write_text(json.dumps(record))


def test_compile_against_eager_rests_on_the_steps_timed_in_turn_in_each_compiled_process(tmp_path):
    """What a process draws for itself (where its threads run, its heap) moves its step by more
    than compile does (matmul_add 1024 on this project's machine: 0.96-1.20 from process to
    process, 1.02-1.07 side by side in one). The processes' own steps here say anything from 0.6x
    to 2x; each compiled process timed the step both ways in turn, 1.30x eager in each (± 1%): the
    verdict is that ratio, its interval Student's t over the processes, and the page says so, with
    the two steps it rests on. A compiled process without them (an older record): the point is
    judged on its processes as before, every one of them."""
    from profsweep import stats as st

    for r, (eager, compiled) in {1: (100, 60), 2: (160, 200), 3: (80, 130)}.items():
        job(tmp_path, 2 * r, size=64, compile=False, step_us=400, mm_us=200, timed_us=eager, repeat=r)
        job(tmp_path, 2 * r + 1, size=64, compile=True, step_us=400, mm_us=200, timed_us=compiled, repeat=r)
    side = {1: (100.0, 130.0), 2: (120.0, 157.2), 3: (90.0, 116.1)}
    _side_by_side(tmp_path, side)
    analyse_folder(tmp_path)
    said = conclusions_html(tmp_path)
    logs = [math.log(c / e) for e, c in side.values()]  # by hand: Student's t over the 3 processes
    mean, half = statistics.mean(logs), st.t_quantile(0.975, 2) * statistics.stdev(logs) / math.sqrt(3)
    low, high = math.exp(mean - half), math.exp(mean + half)
    assert 1.05 < low < high < 1.4
    assert (f"compile against eager, matmul_add bf16 cold (eager and compiled timed in turn in each compiled "
            f"process): {math.exp(mean):.2f}× slower [{low:.2f}×, {high:.2f}×] at 64 (100 µs → 130 µs per step)"
            in said), said
    # the same verdict in the short answer, and from the one rule the report's other verdicts use
    assert f"{math.exp(mean):.2f}× slower [{low:.2f}×, {high:.2f}×] at 64" in \
        (tmp_path / "report.html").read_text().split("<section id='conclusions'>")[0]
    # the machine's load while they ran is noise in the ratio too (it moves the two alike only by chance)
    loaded = next(tmp_path.glob("3_*/metrics.json"))
    kept = loaded.read_text()
    loaded.write_text(json.dumps({**json.loads(kept), "other_cpus": 1.5, "cpu_count": 2, "torch_threads": 2}))
    analyse_folder(tmp_path)
    assert "at 64 (100 µs → 130 µs per step, noisy)" in conclusions_html(tmp_path)
    loaded.write_text(kept)
    # one compiled process without them: judged on its processes' own steps, paired by round
    record = json.loads(next(tmp_path.glob("3_*/metrics.json")).read_text())
    del record["side_by_side_eager_us"]
    next(tmp_path.glob("3_*/metrics.json")).write_text(json.dumps(record))
    analyse_folder(tmp_path)
    said = conclusions_html(tmp_path)
    assert "(each round's two processes paired)" in said and "timed in turn" not in said, said
    assert re.search(r"no clear difference \([\d.]+× \[0\.\d+×, [\d.]+×\]", said), said


def test_compile_against_eager_rests_on_each_processs_ratio_of_paired_blocks(tmp_path):
    """matmul_add 4096 on this project's VM, 5 pairs of one step each: one process's two medians
    1.29x apart (a burst that slowed three of its compiled steps), the other processes 0.74-0.87x.
    Each pair of neighbouring blocks is slowed alike by such a burst: the verdict rests on the
    median over the pairs of their ratios (side_by_side_ratio), where a record has it."""
    for r in (1, 2, 3):
        job(tmp_path, 2 * r, size=4096, compile=False, step_us=400, mm_us=200, timed_us=90000, repeat=r)
        job(tmp_path, 2 * r + 1, size=4096, compile=True, step_us=400, mm_us=200, timed_us=80000, repeat=r)
    _side_by_side(tmp_path, {1: (95000.0, 80000.0), 2: (93000.0, 120000.0), 3: (97000.0, 81000.0)})
    analyse_folder(tmp_path)
    assert "no clear difference" in conclusions_html(tmp_path)  # the medians: 0.84, 1.29 and 0.84
    for path in tmp_path.glob("*_compile*/metrics.json"):
        record = json.loads(path.read_text())
        record["side_by_side_ratio"] = {1: 0.842, 2: 0.836, 3: 0.835}[record["repeat"]]
        path.write_text(json.dumps(record))
    analyse_folder(tmp_path)
    said = conclusions_html(tmp_path)
    assert re.search(r"1\.19× faster \(0\.84× \[0\.8\d×, 0\.8\d×\]\) at 4096 \(95 ms → 80 ms per step\)", said), said


def test_a_grid_of_compiled_points_alone_says_compile_against_eager_from_its_steps_timed_in_turn(tmp_path):
    """helper-56: compile=true alone measured eager beside compiled in every process (69 µs against
    19.7 µs: graph breaks) and no conclusion said so: the report paired nothing."""
    from profsweep import stats as st

    for r in (1, 2, 3):
        job(tmp_path, r, size=64, compile=True, step_us=400, mm_us=200, timed_us=130, repeat=r)
    side = {1: (100.0, 350.0), 2: (120.0, 414.0), 3: (90.0, 318.6)}
    _side_by_side(tmp_path, side)
    analyse_folder(tmp_path)
    said = conclusions_html(tmp_path)
    logs = [math.log(c / e) for e, c in side.values()]
    mean, half = statistics.mean(logs), st.t_quantile(0.975, 2) * statistics.stdev(logs) / math.sqrt(3)
    assert (f"compile against eager, matmul_add bf16 cold (eager and compiled timed in turn in each compiled process; "
            f"the grid has no eager point of its own): {math.exp(mean):.2f}× slower [{math.exp(mean - half):.2f}×, "
            f"{math.exp(mean + half):.2f}×] at 64 (100 µs → 350 µs per step)") in said, said
    # without the steps timed in turn (an older record), nothing to say it from
    for path in tmp_path.glob("*/metrics.json"):
        record = json.loads(path.read_text())
        del record["side_by_side_eager_us"]
        path.write_text(json.dumps(record))
    analyse_folder(tmp_path)
    assert "compile against eager" not in conclusions_html(tmp_path)


def test_the_band_of_the_conclusions_is_the_analysis_commands(tmp_path, capsys):
    """compile 3% slower than eager in every round: the same within the default ±5%, slower
    within ±1% (`python -m analysis FOLDER --band 0.01`); a band out of range is refused."""
    from analysis.__main__ import main

    folder = tmp_path / "sweep"
    num = 0
    for repeat in (1, 2, 3):
        for compile, timed in ((False, 100), (True, 103)):
            job(folder, num, size=64, compile=compile, step_us=300, mm_us=100, timed_us=timed, repeat=repeat)
            num += 1
    assert main([str(folder)]) == 0
    assert "the same within ±5% (1.03× [1.03×, 1.03×]) at 64" in conclusions_html(folder)
    assert main([str(folder), "--band", "0.01"]) == 0
    said = conclusions_html(folder)
    assert "1.03× slower [1.03×, 1.03×] at 64" in said and "within ±5%" not in said
    with pytest.raises(SystemExit) as refused:
        main([str(folder), "--band", "5"])
    assert refused.value.code == 2
    assert "--band: 5 is not allowed: give a fraction above 0 and at most 0.5" in capsys.readouterr().err


@pytest.mark.parametrize("setting", [{}, {"isolation": "none"}, {"compile_cache": "shared"}])
def test_a_first_call_is_said_a_cold_processes_only_where_the_process_was_cold(tmp_path, setting):
    """run.isolation=none (one process for every job) or a shared compile cache: the compiled
    first call of 0.25 ms was called `first call of a cold process` (helper-37)."""
    folder = tmp_path / "sweep"
    num = 0
    for repeat in (1, 2, 3):
        for compile, timed in ((False, 100), (True, 200)):
            job(folder, num, size=64, compile=compile, step_us=300, mm_us=100, timed_us=timed, repeat=repeat, **setting)
            num += 1
    analyse_folder(folder)
    said = conclusions_html(folder)
    assert ("first call of a cold process, matmul_add bf16: 2 ms eager, 700 ms compiled at 64" in said) == (not setting)


def test_peak_memory_that_does_not_grow_is_said_so_not_as_size_to_the_minus_zero(tmp_path):
    from analysis.report.conclusions import _memory
    from analysis.tables import analyse_sweep

    tables = analyse_sweep(known_sweep(tmp_path / "sweep"), lambda line: None)
    said = " ".join(c.text for c in _memory(tables.points))
    assert "grows as size^2.0" in said  # size * size * 4 bytes, by hand
    flat = [p.replace(peak_memory_bytes=1000.0 - p["size"] / 1e4) for p in tables.points]  # a hair less at 1024
    said = " ".join(c.text for c in _memory(flat))
    assert "does not grow with the size" in said and "^-0.0" not in said


def test_a_series_whose_work_does_not_change_with_the_size_is_said_not_to_use_it(tmp_path):
    """A factory that ignores `size` (helper-37): the same FLOPs at 16, 256 and 1024, and no word."""
    from analysis.report.conclusions import _series, _size_unused
    from analysis.tables import analyse_sweep

    tables = analyse_sweep(known_sweep(tmp_path / "sweep"), lambda line: None)
    rows = next(iter(_series([p for p in tables.points if not p["compile"]]).values()))
    assert _size_unused(rows) == []  # 2 * size^3 FLOPs: it grows
    same = [r.replace(flops_per_call=2_000.0, bytes_per_call=4096.0) for r in rows]
    [said] = _size_unused(same)
    assert "the same work at every size (2,000 FLOPs and 4 KiB a call at 64, 1024): its factory seems not to use " \
           "`size`" in said.text, said.text


def test_a_fitted_throughput_past_the_machines_peak_is_said_to_be_no_steps():
    """A line through two noisy sizes put a training step at 12.2 TFLOP/s on a CPU whose measured
    peak is 247 GFLOP/s, said as the step's throughput (a reviewer's finding)."""
    from analysis.report.conclusions import _crossing

    rows = [{"size": 64, "peak_flops_per_s": 247e9}, {"size": 128, "peak_flops_per_s": 247e9}]
    fit = {"fit_work": "flops", "fit_overhead_us": 1320.0, "fit_throughput": 12.2e12, "fit_crossover_size": 11101.1,
           "fit_check": "2 sizes: the line passes through both, nothing to check it against"}
    said = _crossing("lm fp32 cold eager", fit, rows, "compute", "overhead")
    assert "at 12.2 TFLOP/s (49.4× this machine's matmul peak, 247 GFLOP/s, which no step outruns: the line is " \
           "not this step's throughput" in said, said
    within = _crossing("lm fp32 cold eager", {**fit, "fit_throughput": 200e9}, rows, "compute", "overhead")
    assert "outruns" not in within
    unknown = _crossing("lm fp32 cold eager", fit, [{"size": 64}, {"size": 128}], "compute", "overhead")
    assert "outruns" not in unknown  # no ceiling recorded: nothing to hold it against


def test_a_fit_with_no_floor_says_the_work_dominates_only_where_its_interval_shows_it():
    """helper-56: a 30 µs step at 16 with one process of 64 at 11.7 ms fitted 0 µs [0, 55.4 µs] of
    overhead, said as "no overhead floor measurable: compute dominates at every size" (and
    "compute" of a line through bytes, after "memory-bound at 16")."""
    from analysis.report.conclusions import _crossing

    fit = {"fit_work": "bytes", "fit_overhead_us": 0.0, "fit_overhead_us_low": 0.0, "fit_overhead_us_high": 55.4,
           "fit_throughput": 665e6, "fit_crossover_size": None, "fit_check": "fits"}
    rows = [{"size": 64, "timed_us_per_step": 36.1, "noisy": True}, {"size": 16, "timed_us_per_step": 30.2}]
    said = _crossing("argmaxout fp32 cold eager", fit, rows, "compute", "overhead")
    assert ("no overhead floor measured, and none ruled out: the floor's interval reaches 55.4 µs against a step of "
            "30.2 µs at 16 (noisy), so the work may not dominate there") in said, said
    assert "compute dominates" not in said
    tight = _crossing("argmaxout fp32 cold eager", {**fit, "fit_overhead_us_high": 2.0}, rows, "compute", "overhead")
    assert tight.endswith("; no overhead floor measurable: the work dominates at every size."), tight
