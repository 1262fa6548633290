"""The sweep's figures: seaborn figure-level plots over the tidy tables, log axes across sizes.

Imported only when plotting (it pulls in matplotlib, seaborn and pandas).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from analysis.files import atomic_write_bytes  # noqa: E402


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame["mode"] = frame["compile"].map({True: "compile", False: "eager"})
    frame["phase"] = frame["warmup"].map({True: "warm", False: "cold"})
    series = frame["variant"] if "variant" in frame else frame["workload"]
    trained = frame["train"].map({True: " train"}).fillna("") if "train" in frame else ""
    frame["panel"] = series.astype(str) + " " + frame["dtype"].astype(str) + trained
    return frame


def _save(grid: Any, path: Path) -> Path:
    figure = grid.figure
    figure.subplots_adjust(top=1 - 0.55 / figure.get_figheight())  # room for the title
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)  # no bbox_inches="tight": a second layout pass
    plt.close(grid.figure)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _log_axes(grid: Any, x: bool = True, y: bool = True) -> None:
    grid.set_titles(row_template="{row_name}", col_template="{col_name}")
    for ax in grid.axes.flat:
        if x:
            ax.set_xscale("log", base=2)
        else:
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if y:
            ax.set_yscale("log")


def _palette(levels: Any) -> dict[Any, Any]:
    """One color per hue level, fixed, so that interval bars match their lines."""
    levels = list(dict.fromkeys(levels))
    return dict(zip(levels, sns.color_palette(n_colors=max(1, len(levels)))))


def _intervals(grid: Any, data: pd.DataFrame, y: str, hue: str, palette: dict[Any, Any],
               row: str | None = None, col: str | None = None, scale: float = 1.0) -> None:
    """Each point's 95% interval over its repeats as an error bar (columns `<y>_low`,
    `<y>_high`), and noisy grid points drawn hollow."""
    low, high = f"{y}_low", f"{y}_high"
    for key, ax in grid.axes_dict.items():
        if row and col:
            mask = (data[row] == key[0]) & (data[col] == key[1])
        else:
            mask = data[col or row] == key
        part = data[mask]
        for level, color in palette.items():
            rows = part[part[hue] == level]
            if rows.empty:
                continue
            if low in rows and high in rows:
                bars = rows.dropna(subset=[y, low, high])
                if not bars.empty:
                    ax.errorbar(bars["size"], bars[y], yerr=[(bars[y] - bars[low]).clip(lower=0) * scale,
                                                           (bars[high] - bars[y]).clip(lower=0) * scale],
                                fmt="none", ecolor=color, elinewidth=1, capsize=3, zorder=3)
            if "noisy" in rows:
                noisy = rows[rows["noisy"].fillna(False).astype(bool)]
                if not noisy.empty:
                    ax.scatter(noisy["size"], noisy[y], s=60, facecolors="white", edgecolors=color,
                               linewidths=1.5, zorder=4)


def write_plots(jobs: pd.DataFrame, steps: pd.DataFrame, crossovers: pd.DataFrame, folder: Path) -> list[Path]:
    """Every plot the data allows, as PNG files in `folder`; returns the paths written."""
    sns.set_theme(style="whitegrid", context="notebook")
    ok = jobs[(jobs["status"] == "ok") & jobs["trace_error"].isna()] if len(jobs) else jobs
    if ok.empty or "host_us_per_step" not in ok:
        return []
    ok = _labelled(ok)
    figures: list[tuple[Callable[..., Path], tuple[Any, ...]]] = [
        (_crossover, (ok, crossovers, folder / "crossover.png")),
        (_launches, (ok, folder / "launches.png")),
    ]
    if not steps.empty:
        labelled_steps = _labelled(steps)
        figures.append((_steps, (labelled_steps, folder / "steps.png")))
        if labelled_steps["top_kernel_us"].notna().any():
            figures.append((_kernels, (labelled_steps, ok, folder / "kernels.png")))
    if ok["achieved_flops_per_s"].notna().any():
        figures.append((_throughput, (ok, folder / "throughput.png")))
    if "peak_memory_bytes" in ok and ok["peak_memory_bytes"].notna().any():
        figures.append((_memory, (ok, folder / "memory.png")))
    return _draw_all(figures)


def _draw_all(figures: list[tuple[Callable[..., Path], tuple[Any, ...]]]) -> list[Path]:
    """Draw the figures in order, or several at a time in forked processes (matplotlib draws on
    one core: the 5 figures of a 6-job sweep take about 2.1 s on one core of this 2-core
    machine, 1.2 s on both)."""
    workers = drawing_processes(len(figures))
    if workers < 2:
        return [draw(*args) for draw, args in figures]
    with multiprocessing.get_context("fork").Pool(workers, initializer=_quiet_worker) as pool:
        return pool.starmap(_draw, figures, chunksize=1)


def _quiet_worker() -> None:
    """A drawing process leaves signals to its parent: Ctrl-C reaches the parent, which stops
    the pool; the pool's SIGTERM ends the worker without running the parent's handlers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def drawing_processes(figures: int) -> int:
    """How many processes draw `figures` figures: one per core, but only one (this process)
    where forking is not safe: no fork on the platform, another thread running here, or torch
    loaded (an in-process sweep: its thread pools do not survive a fork)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    safe = (
        "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
        and "torch" not in sys.modules
    )
    return min(cores, figures) if safe else 1


def _draw(draw: Callable[..., Path], args: tuple[Any, ...]) -> Path:
    return draw(*args)


def _crossover(ok: pd.DataFrame, crossovers: pd.DataFrame, path: Path) -> Path:
    gpu = ok["device_us_per_step"].notna()
    def quantity(rows: pd.DataFrame, name: str, key: str) -> pd.DataFrame:
        return rows.assign(quantity=name, us=rows[key], us_low=rows.get(f"{key}_low"), us_high=rows.get(f"{key}_high"))

    parts = [
        quantity(ok[gpu], "host (self CPU)", "host_us_per_step"),
        quantity(ok[gpu], "device (self CUDA)", "device_us_per_step"),
        quantity(ok[~gpu], "framework overhead", "overhead_us_per_step"),
        quantity(ok[~gpu], "compute", "compute_us_per_step"),
    ]
    long = pd.concat([p for p in parts if not p.empty], ignore_index=True)
    palette = _palette(long["quantity"])
    grid = sns.relplot(
        data=long, x="size", y="us", hue="quantity", style="phase", col="panel", row="mode",
        kind="line", marker="o", height=3.4, aspect=1.25, facet_kws={"sharey": False}, palette=palette,
    )
    _intervals(grid, long, "us", "quantity", palette, row="mode", col="panel")
    _log_axes(grid)
    grid.set_axis_labels("size", "µs per step")
    for (mode, panel), ax in grid.axes_dict.items():
        for _, c in crossovers.iterrows():
            label = f"{c['variant']} {c['dtype']}" + (" train" if c.get("train") is True else "")
            if label == panel and ("compile" if c["compile"] else "eager") == mode and pd.notna(c["crossover_size"]):
                phase = "warm" if c["warmup"] else "cold"
                ax.axvline(c["crossover_size"], color="0.3", linestyle="--" if phase == "cold" else ":", linewidth=1)
                ax.annotate(f" {phase}: {c['crossover_size']:.0f}", (c["crossover_size"], 0.95 if phase == "cold" else 0.87),
                            xycoords=("data", "axes fraction"), fontsize=8, ha="left")
    grid.figure.suptitle("Work vs host per step\n(bars: 95% interval; hollow: noisy)", y=0.995, va="top",
                         fontsize="medium")
    return _save(grid, path)


def _launches(ok: pd.DataFrame, path: Path) -> Path:
    gpu = ok["step_kernels_median"].fillna(0) > 0
    parts = [
        ok[gpu].assign(quantity="kernels", count=ok.loc[gpu, "step_kernels_median"]),
        ok[gpu].assign(quantity="launch calls", count=ok.loc[gpu, "step_launches_median"]),
        ok[~gpu].assign(quantity="aten ops (CPU)", count=ok.loc[~gpu, "step_aten_ops_median"]),
    ]
    long = pd.concat([p for p in parts if not p.empty], ignore_index=True)
    grid = sns.relplot(
        data=long, x="size", y="count", hue="mode", style="quantity", col="panel", row="phase",
        kind="line", marker="o", height=3.2, aspect=1.2,
    )
    _log_axes(grid, y=False)
    grid.set_axis_labels("size", "per step (median)")
    grid.figure.suptitle("Kernels and launches per step: eager vs compile", y=0.995, va="top")
    return _save(grid, path)


def _few_sizes(frame: pd.DataFrame, most: int = 4) -> pd.DataFrame:
    """The rows of at most `most` sizes, spread from the smallest to the largest."""
    sizes = sorted(frame["size"].unique())
    if len(sizes) > most:
        sizes = [sizes[round(i * (len(sizes) - 1) / (most - 1))] for i in range(most)]
    return frame[frame["size"].isin(sizes)]


def _steps(steps: pd.DataFrame, path: Path) -> Path:
    grid = sns.relplot(
        data=_few_sizes(steps), x="step", y="host_us", hue="phase", style="mode", col="size", col_wrap=4,
        kind="line", marker="o", height=2.8, aspect=1.1, facet_kws={"sharey": False},
    )
    _log_axes(grid, x=False)
    grid.set_axis_labels("profiled step", "host µs")
    grid.figure.suptitle("Host duration of each profiled step: cold vs warm", y=0.995, va="top")
    return _save(grid, path)


def _kernels(steps: pd.DataFrame, ok: pd.DataFrame, path: Path) -> Path:
    names = ok.set_index("job")["top_kernel"].astype(str).str.slice(0, 40)
    data = _few_sizes(steps.dropna(subset=["top_kernel_us"])).assign(kernel=lambda f: f["job"].map(names))
    data["size"] = data["size"].astype(str)
    grid = sns.relplot(
        data=data, x="step", y="top_kernel_us", hue="size", style="phase", col="mode",
        row="panel", kind="line", marker="o", height=3.0, aspect=1.3,
    )
    _log_axes(grid, x=False)
    grid.set_axis_labels("profiled step", "top kernel µs in the step")
    grid.figure.suptitle("Step-to-step spread of each job's top kernel (CPU: top compute op)", y=0.995, va="top")
    return _save(grid, path)


def _throughput(ok: pd.DataFrame, path: Path) -> Path:
    data = ok.dropna(subset=["achieved_flops_per_s"]).assign(
        tflops=lambda f: f["achieved_flops_per_s"] / 1e12
    )
    data["tflops_low"] = data.get("achieved_flops_per_s_low") / 1e12 if "achieved_flops_per_s_low" in data else None
    data["tflops_high"] = data.get("achieved_flops_per_s_high") / 1e12 if "achieved_flops_per_s_high" in data else None
    palette = _palette(data["mode"])
    grid = sns.relplot(
        data=data, x="size", y="tflops", hue="mode", style="phase", col="panel",
        kind="line", marker="o", height=3.2, aspect=1.25, palette=palette,
    )
    _intervals(grid, data, "tflops", "mode", palette, col="panel")
    _log_axes(grid)
    for panel, ax in grid.axes_dict.items():
        peaks = data.loc[data["panel"] == panel, "peak_flops_per_s"].dropna()
        if not peaks.empty:
            ax.axhline(peaks.iloc[0] / 1e12, color="crimson", linestyle=":", label="peak")
            ax.annotate("dense peak", (0.02, peaks.iloc[0] / 1e12), xycoords=("axes fraction", "data"),
                        fontsize=8, color="crimson", va="bottom")
    grid.set_axis_labels("size", "achieved TFLOP/s")
    grid.figure.suptitle("Achieved throughput (FLOPs per call / step time)", y=0.995, va="top")
    return _save(grid, path)


def _memory(ok: pd.DataFrame, path: Path) -> Path:
    data = ok.dropna(subset=["peak_memory_bytes"]).assign(mib=lambda f: f["peak_memory_bytes"] / 2**20)
    grid = sns.relplot(
        data=data, x="size", y="mib", hue="mode", style="phase", col="panel",
        kind="line", marker="o", height=3.2, aspect=1.25,
    )
    _log_axes(grid)
    grid.set_axis_labels("size", "peak MiB")
    grid.figure.suptitle("Peak memory per job (CUDA: allocator peak; CPU: live tensors + allocator peak)",
                         y=0.995, va="top")
    return _save(grid, path)


def write_ratio_plot(pairs: pd.DataFrame, folder: Path) -> list[Path]:
    """compare's plot: the host (and device) ratio NEW/BASE against size per series, 1.0 marked."""
    if pairs.empty or "size" not in pairs or pairs["host_us_per_step_ratio"].dropna().empty:
        return []
    sns.set_theme(style="whitegrid", context="notebook")
    data = pairs.copy()
    data["series"] = data.get("variant", data.get("workload")).astype(str)
    if "compile" in data:
        data["series"] += data["compile"].map({True: " compile", False: " eager"}).fillna("")
    parts = [data.assign(quantity="host", ratio=data["host_us_per_step_ratio"])]
    if "device_us_per_step_ratio" in data and data["device_us_per_step_ratio"].notna().any():
        parts.append(data.assign(quantity="device", ratio=data["device_us_per_step_ratio"]))
    long = pd.concat(parts, ignore_index=True).dropna(subset=["ratio"])
    grid = sns.relplot(data=long, x="size", y="ratio", hue="series", style="quantity", kind="line",
                       marker="o", height=3.6, aspect=1.5)
    for ax in grid.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1)
    grid.set_axis_labels("size", "NEW / BASE per step (below 1: faster)")
    grid.figure.suptitle("NEW vs BASE, per grid point", y=0.995, va="top")
    return [_save(grid, folder / "ratio.png")]
