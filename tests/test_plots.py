"""plots: every figure reads on its own. The figures are inspected as matplotlib objects (legends,
titles, ticks, lines, error bars), never as pixels, drawn from hand-made sweep folders (CPU traces
with known step durations, analysed as a person's sweep is) or from their tables with device
columns added."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from analysis.text import bytes_label, duration_label, rate_label, size_label
from analysis.report import plots
from analysis.tables import analyse_sweep, frames

# --- hand-made sweeps ---------------------------------------------------------------------------


def job(folder: Path, num: int, step_us: list[float], *, size: int, compile: bool = False, warmup: bool = False,
        dtype: str = "bf16", repeat: int = 1, **settings) -> Path:
    """One finished CPU job of matmul_add whose trace has one ProfilerStep# of each duration, 80%
    of it inside aten::mm (eager: then aten::add) or aten::addmm (compiled); `repeat` of its grid
    point (the repeats of one point share a config_hash)."""
    mode, phase = ("compile" if compile else "eager"), ("warm" if warmup else "cold")
    name = f"{num}_matmul_add_{size}_{dtype}_{phase}_{mode}" + (f"_r{repeat}" if repeat > 1 else "")
    folder = folder / name
    folder.mkdir(parents=True)
    ops = [("aten::addmm", 0.8)] if compile else [("aten::mm", 0.7), ("aten::add", 0.1)]
    events, ts = [], 0.0
    for i, dur in enumerate(step_us, 1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": ts, "dur": dur})
        start = ts + 0.05 * dur
        for op, share in ops:
            events.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": start,
                           "dur": share * dur})
            start += share * dur
        ts += dur + 10
    (folder / "t.json").write_text(json.dumps({"traceEvents": events}))
    hashed = {"size": size, "compile": compile, "warmup": warmup, "dtype": dtype, **settings}
    metrics = {
        "job": name, "workload": "matmul_add", "size": size, "dtype": dtype, "compile": compile, "warmup": warmup,
        "device": "cpu", "status": "ok", "error": None, "steps": len(step_us), "repeat": repeat,
        "self_cpu_total_us": float(sum(step_us)), "trace_file": "t.json", "table_file": "t.txt",
        "flops_per_call": 2 * size ** 3, "peak_memory_bytes": 3 * 2 * size * size,
        "config_hash": json.dumps(hashed, sort_keys=True), "schema_version": 1, **settings,
    }
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


def tables(folder: Path) -> dict[str, pd.DataFrame]:
    return frames(analyse_sweep(folder))


def main_command(folder: Path) -> dict[str, pd.DataFrame]:
    """Like `size=64,256,1024 compile=false,true`: one series, eager and compiled."""
    num = 0
    for size, us in ((64, 100.0), (256, 400.0), (1024, 9000.0)):
        for compile in (False, True):
            job(folder, num, [us * 3, us, us * 1.1], size=size, compile=compile)
            num += 1
    return tables(folder)


def two_variants(folder: Path) -> dict[str, pd.DataFrame]:
    """The own-model example: hidden=512 and 1024 (its variants) at two sizes, eager, cold."""
    steps = {}
    num = 0
    for hidden, scale in ((512, 1.0), (1024, 4.0)):
        for size in (128, 512):
            steps[(hidden, size)] = [300 * scale * size / 128, 100 * scale * size / 128, 120 * scale * size / 128]
            job(folder, num, steps[(hidden, size)], size=size, workload_hidden=hidden)
            num += 1
    data = tables(folder)
    data["expected_steps"] = steps
    return data


def everything_varies(folder: Path) -> dict[str, pd.DataFrame]:
    """Two variants x two dtypes x eager/compile x cold/warm at three sizes."""
    num = 0
    for backend, slower in (("naive", 1.0), ("flash", 1.3)):
        for dtype in ("bf16", "fp32"):
            for compile in (False, True):
                for warmup in (False, True):
                    for size in (128, 512, 2048):
                        us = (size * slower * (2.1 if dtype == "fp32" else 1) * (0.55 if warmup else 1)
                              * (0.77 if compile else 1))
                        job(folder, num, [us * 2, us, us], size=size, dtype=dtype, compile=compile, warmup=warmup,
                            workload_backend=backend)
                        num += 1
    return tables(folder)


def on_a_gpu(data: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The same tables as a CUDA sweep would have them: device time, kernels and launches."""
    summary, steps = data["summary"].copy(), data["steps"].copy()
    summary["device"] = "cuda"
    summary["device_us_per_step"] = summary["host_us_per_step"] * 0.5
    summary["step_kernels_median"] = summary["compile"].map({True: 1, False: 2})
    summary["step_launches_median"] = summary["step_kernels_median"]
    summary["top_kernel"] = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn"
    steps["device"] = "cuda"
    return {**data, "summary": summary, "steps": steps}


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> dict[str, dict[str, pd.DataFrame]]:
    made = {name: make(tmp_path_factory.mktemp(name))
            for name, make in (("main", main_command), ("variants", two_variants), ("everything", everything_varies))}
    made["gpu"] = on_a_gpu(made["main"])
    return made


def figures(data: dict[str, pd.DataFrame]) -> dict[str, plt.Figure]:
    drawn = plots.draw_figures(data["summary"], data["steps"], data["crossovers"])
    for figure in drawn.values():
        figure.canvas.draw()
    return drawn


@pytest.fixture
def close_all():
    yield
    plt.close("all")


# --- what a reader sees -------------------------------------------------------------------------


def legend_sections(legend) -> list[list[str]]:
    """The legend's entries grouped under its headings (seaborn writes a heading per semantic as an
    entry with an empty handle: no line, no marker)."""
    sections: list[list[str]] = [[]]
    for text, handle in zip(legend.texts, legend.legend_handles):
        heading = handle.get_linewidth() == 0 and handle.get_marker() in ("", "None", None)
        if heading:
            sections.append([])
        else:
            sections[-1].append(text.get_text())
    return [s for s in sections if s]


def legends(figure: plt.Figure) -> list:
    return [*figure.legends, *(ax.get_legend() for ax in figure.axes if ax.get_legend() is not None)]


def log_axes(figure: plt.Figure):
    for ax in figure.axes:
        if ax.get_xscale() == "log":
            yield ax, ax.xaxis
        if ax.get_yscale() == "log":
            yield ax, ax.yaxis


def visible_tick_labels(ax, axis) -> list[str]:
    low, high = sorted(ax.get_xlim() if axis is ax.xaxis else ax.get_ylim())
    return [t.get_text() for t in axis.get_ticklabels()
            if t.get_text() and low <= (t.get_position()[0] if axis is ax.xaxis else t.get_position()[1]) <= high]


def data_lines(ax) -> list:
    """The plotted series of a panel: lines in data coordinates (not the guides drawn across the
    panel: crossover, peak and 1.0 lines), not seaborn's empty legend proxies, not error bar caps."""
    return [line for line in ax.get_lines() if len(line.get_xdata()) and line.get_transform() == ax.transData
            and line.get_linestyle() != "None"]


def guides(ax) -> list:
    """Lines drawn across a panel (a crossover, a peak), not through data points."""
    return [line for line in ax.get_lines() if line.get_transform() != ax.transData]


def same_lines(drawn, wanted) -> bool:
    """The same set of series, each a sequence of values (to 1e-9 relative)."""
    def key(values):
        return tuple(float(f"{v:.9g}") for v in values)
    return sorted(map(key, drawn)) == sorted(map(key, wanted))


@pytest.mark.parametrize("sweep", ["main", "variants", "everything", "gpu"])
def test_every_figure_reads(sweeps, sweep, close_all):
    drawn = figures(sweeps[sweep])
    assert {"crossover", "launches", "steps", "kernels", "throughput", "memory"} <= set(drawn)
    for name, figure in drawn.items():
        renderer = figure.canvas.get_renderer()
        page = figure.bbox
        for legend in legends(figure):
            for section in legend_sections(legend):
                assert len(section) >= 2, f"{name}: a legend entry alone: {section}"
        heading = figure.get_suptitle()
        assert heading, f"{name} has no title"
        title = figure._suptitle.get_window_extent(renderer)
        assert title.x0 >= page.x0 - 1 and title.x1 <= page.x1 + 1 and title.y1 <= page.y1 + 1, \
            f"{name}: title {heading!r} runs off the figure"
        for legend in legends(figure):
            spot = legend.get_window_extent(renderer)
            assert not spot.overlaps(title), f"{name}: the legend covers the figure title"
            assert spot.y0 >= page.y0 - 1 and spot.y1 <= page.y1 + 1, f"{name}: the legend runs off the figure"
        for ax in figure.axes:
            box = ax.title.get_window_extent(renderer)
            if ax.get_title():
                assert box.width <= ax.bbox.width + 1, f"{name}: panel title {ax.get_title()!r} wider than its panel"
                assert box.y1 < title.y0, f"{name}: panel title {ax.get_title()!r} under the figure title"
            for label in (ax.xaxis.label, ax.yaxis.label):
                extent = label.get_window_extent(renderer)
                assert extent.x0 >= page.x0 - 1 and extent.y0 >= page.y0 - 1 and extent.x1 <= page.x1 + 1, \
                    f"{name}: axis label {label.get_text()!r} clipped"
            for legend in legends(figure):
                spot = legend.get_window_extent(renderer)
                assert not spot.overlaps(ax.bbox), f"{name}: the legend covers a panel"
                if ax.get_title():
                    assert not spot.overlaps(box), f"{name}: the legend covers the title {ax.get_title()!r}"
        labelled = 0
        for ax, axis in log_axes(figure):
            labels = visible_tick_labels(ax, axis)  # none on the inner panels of a shared axis
            labelled += bool(labels)
            for label in labels:
                assert not any(mark in label for mark in ("×10", "^", "e+", "e-", "$", "10⁻")), \
                    f"{name}: tick label {label!r}"
        assert labelled or not list(log_axes(figure)), f"{name}: no log axis has a labelled tick"


def test_sizes_and_times_are_ticked_in_plain_numbers(sweeps, close_all):
    drawn = figures(sweeps["main"])
    ax = drawn["crossover"].axes[-1]  # the bottom panel (the panels above share its size axis)
    assert visible_tick_labels(ax, ax.xaxis) == ["64", "256", "1k"]  # the sizes the sweep ran
    units = {label.split(" ")[-1] for label in visible_tick_labels(ax, ax.yaxis)}
    assert units <= {"µs", "ms", "s"} and units
    assert [size_label(v) for v in (64, 1024, 4096, 1536, 16384, 1000)] == ["64", "1k", "4k", "1.5k", "16k", "1k"]
    assert [duration_label(v) for v in (5, 250, 2000, 2500, 999.9999, 1.5e6)] == \
        ["5 µs", "250 µs", "2 ms", "2.5 ms", "1 ms", "1.5 s"]
    assert bytes_label(2 ** 20) == "1 MiB" and rate_label(5e11) == "500G"


def test_steps_draw_one_line_per_variant_with_its_own_steps(sweeps, close_all):
    data = sweeps["variants"]
    assert set(data["summary"]["variant"]) == {"matmul_add hidden=512", "matmul_add hidden=1024"}
    figure = figures(data)["steps"]
    panels = [ax for ax in figure.axes if data_lines(ax)]
    assert len(panels) == 2  # one per size
    for ax, size in zip(panels, (128, 512)):
        drawn = [line.get_ydata() for line in data_lines(ax)]
        wanted = [data["expected_steps"][(hidden, size)] for hidden in (512, 1024)]
        assert same_lines(drawn, wanted), f"size {size}: each variant's steps, never their mean"
        assert len({line.get_color() for line in data_lines(ax)}) == 2
    entries = [t.get_text() for t in figure.legends[0].texts]
    assert "matmul_add hidden=512" in entries and "matmul_add hidden=1024" in entries


def test_repeats_of_one_point_are_one_line_at_their_median(tmp_path, close_all):
    repeats = [[300.0, 100.0, 110.0], [330.0, 90.0, 140.0], [360.0, 120.0, 100.0]]
    for k, steps in enumerate(repeats):
        job(tmp_path, 100 * k, steps, size=64, repeat=k + 1)
    figure = figures(tables(tmp_path))["steps"]
    lines = [line for ax in figure.axes for line in data_lines(ax)]
    assert len(lines) == 1
    assert list(lines[0].get_ydata()) == pytest.approx([statistics.median(s) for s in zip(*repeats)])
    assert "median over each grid point's repeats" in figure.get_suptitle().replace("\n", " ")
    assert not figure.legends  # one line: nothing to tell apart


def test_every_configuration_is_its_own_line(sweeps, close_all):
    """Two variants x two dtypes x eager/compile x cold/warm: 16 lines in every per-point figure,
    each through its own grid point's value at every size."""
    data = sweeps["everything"]
    summary = data["summary"]
    figure = figures(data)["throughput"]
    lines = [line for ax in figure.axes for line in data_lines(ax)]
    assert len(lines) == 16
    keys = ["variant", "dtype", "compile", "warmup"]
    wanted = [rows.sort_values("size")["achieved_flops_per_s"] for _, rows in summary.groupby(keys)]
    assert len({tuple(w) for w in wanted}) == 16  # every configuration measured something else
    assert same_lines([line.get_ydata() for line in lines], wanted)


def test_the_crossover_note_only_where_a_series_crosses(sweeps, close_all):
    data = sweeps["main"]
    crossed = data["crossovers"].copy()
    crossed["crossover_size"] = [float("nan"), 300.0] if len(crossed) == 2 else 300.0
    crossed["fit_overhead_us"] = float("nan")  # no model: the profiled split's crossover
    figure = figures({**data, "crossovers": crossed})["crossover"]
    assert "dashed: crossover" in figure.get_suptitle()
    marks = [(set(line.get_xdata()), line.get_linestyle()) for ax in figure.axes for line in guides(ax)]
    assert marks == [({300.0}, "--")]
    fitted = crossed.assign(fit_overhead_us=50.0, fit_throughput=1e10, fit_crossover_size=[float("nan"), 123.0]
                            if len(crossed) == 2 else 123.0, fit_check="2 sizes: the line passes through both")
    figure = figures({**data, "crossovers": fitted})["crossover"]
    marks = [(set(line.get_xdata()), line.get_linestyle()) for ax in figure.axes for line in guides(ax)]
    assert ({123.0}, "--") in marks and ({300.0}, "--") not in marks  # where the model fits, its crossover
    assert "black: the fit a + b·work of the un-profiled step" in figure.get_suptitle()
    none = crossed.assign(crossover_size=float("nan"))
    figure = figures({**data, "crossovers": none})["crossover"]
    assert "crossover" not in figure.get_suptitle().split(":")[0] + figure.get_suptitle().split("\n")[-1]
    assert not [line for ax in figure.axes for line in guides(ax)]


def test_intervals_are_error_bars_from_the_summary(sweeps, close_all):
    summary = sweeps["main"]["summary"]
    rows = summary.dropna(subset=["host_us_per_step_low", "host_us_per_step_high"])
    assert not rows.empty
    figure = figures(sweeps["main"])["crossover"]
    assert "bars: 95% interval" in figure.get_suptitle()
    spans = {(round(seg[0][0]), round(min(seg[0][1], seg[1][1]), 3), round(max(seg[0][1], seg[1][1]), 3))
             for ax in figure.axes for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()}
    for _, row in rows.iterrows():
        if row["compute_us_per_step_low"] < row["compute_us_per_step_high"]:
            assert (row["size"], round(row["compute_us_per_step_low"], 3), round(row["compute_us_per_step_high"], 3)) \
                in spans, f"no bar for {row['job']}"


def test_a_cpu_sweep_counts_aten_ops_not_kernels(sweeps, close_all):
    drawn = figures(sweeps["main"])
    launches = drawn["launches"]
    assert "Aten ops per step" in launches.get_suptitle() and "no kernels" in launches.get_suptitle()
    ax = launches.axes[0]
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)  # whole ops, not 0.2 of one
    assert "kernel" not in " ".join(t.get_text() for legend in legends(launches) for t in legend.texts)
    assert "top compute op" in drawn["kernels"].get_suptitle()
    gpu = figures(sweeps["gpu"])
    entries = [t.get_text() for legend in legends(gpu["launches"]) for t in legend.texts]
    assert "kernels" in entries and "launch calls" in entries
    assert "top kernel" in gpu["kernels"].get_suptitle() and "compute op" not in gpu["kernels"].get_suptitle()


def test_titles_wrap_to_their_figure(sweeps, close_all):
    """A title longer than a one-panel figure is wide comes out on several lines, each within it."""
    figure = figures(sweeps["main"])["memory"]
    heading = figure._suptitle
    assert "\n" in heading.get_text()
    assert heading.get_window_extent(figure.canvas.get_renderer()).width <= figure.bbox.width


def test_compare_ratio_plot_names_its_lines():
    from analysis.compare.page import ratio_figure

    pairs = [{"workload": "matmul_add", "variant": "matmul_add", "size": size, "dtype": "bf16", "compile": compiled,
              "warmup": False, "device": "cpu", "step_ratio": ratio, "interval_low": ratio / 1.1,
              "interval_high": ratio * 1.1, "verdict": verdict}
             for size, compiled, ratio, verdict in ((64, False, 1.0, "same"), (256, False, 0.5, "faster"),
                                                    (64, True, 2.0, "slower"), (256, True, 1.25, "inconclusive"))]
    figure = ratio_figure(pairs)
    figure.canvas.draw()
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_legend().texts] == ["eager", "compile"]  # what differs between the lines
    assert "matmul_add bf16 cold" in ax.get_title()  # what they share
    lines = [line for line in ax.get_lines() if line.get_linestyle() == "-" and len(line.get_xdata()) > 1]
    assert same_lines([line.get_ydata() for line in lines], [(1.0, 0.5), (2.0, 1.25)])
    hollow = [line.get_ydata()[0] for line in ax.get_lines()
              if line.get_marker() == "o" and line.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))]
    assert hollow == [1.25]  # the inconclusive pair
    one = ratio_figure([p for p in pairs if not p["compile"]])
    one.canvas.draw()
    assert one.axes[0].get_legend() is None
    labels = visible_tick_labels(one.axes[0], one.axes[0].yaxis)
    assert labels and all(label.endswith("×") and "e" not in label for label in labels)
    assert ratio_figure([{**pairs[0], "size": None}]) is None
