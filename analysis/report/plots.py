"""The sweep's figures: seaborn figure-level plots over the tidy tables, log axes across sizes.

Every figure reads on its own: one line per configuration (every grid key or setting that differs
between the plotted points gets a facet, a hue or a line style; what all points share is said in
the title instead of in a one-entry legend), seaborn never averages across configurations (only
over the repeats of one grid point, by their median, in the per-step plots), titles wrap to the
figure or panel they belong to, and log axes are ticked in plain numbers (sizes 64, 1k, 4k; µs, ms;
KiB, MiB; M, G FLOP/s). The intervals of summary.csv (`<metric>_low`, `<metric>_high`) are drawn
as error bars where they exist, noisy grid points hollow.

On a CPU-only sweep there are no kernels and no launches: launches.png shows the aten ops each step
dispatches (what eager vs compile changes on the CPU, the source of its framework overhead) and
kernels.png the step-to-step spread of each job's top compute op; their titles say so.

Imported only when plotting (it pulls in matplotlib, seaborn and pandas).
"""

from __future__ import annotations

import io
import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import matplotlib
import matplotlib.ticker as ticker

matplotlib.use("Agg")
# A font matplotlib's cache does not list (a cache another install built) falls back to DejaVu
# Sans with a warning per font and plot: twenty lines of "findfont" in the analysis's output for a
# glyph that is drawn anyway
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from analysis.text import TOO_WIDE, bytes_label, duration_label, rate, rate_label, short_name, size_label, too_wide  # noqa: E402
from analysis.points import pairing_columns  # noqa: E402
from profsweep.contract import amount, flag, point_jobs, usable_rows  # noqa: E402
from profsweep.lifeline import die_with  # noqa: E402
from analysis.files import atomic_write_bytes  # noqa: E402

PLOT_NAMES = ("crossover", "launches", "steps", "kernels", "throughput", "memory", "roofline", "memory_timeline")
MODES = ["eager", "compile"]
PHASES = ["cold", "warm"]
MOST_SIZES = 4  # panels of the per-step plots: at most this many sizes, smallest to largest
PAD_PX = 6  # around the figure title and the legend
MOST_TICKS = 6  # labelled ticks on a log axis


# --- what tells the plotted points apart -------------------------------------------------------


def _plain(value: Any) -> Any:
    """A table cell as one comparable value (NaN and None alike)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


class Grouping(NamedTuple):
    """What the plotted grid points share and what sets their series apart."""

    shared: list[str]  # words every point shares, for titles ("matmul_add", "bf16", "cpu")
    differs: str  # what the `series` column tells apart, for legends ("dtype", "variant device")


def _setting_words(frame: pd.DataFrame) -> tuple[pd.Series, Grouping]:
    """Per row, the words naming its series (the settings other than size, compile and warmup that
    differ between the rows: the workload's variant, dtype, train, device, the profiler and compiler
    settings, ...), and what the rows share and what differs."""
    records = frame.to_dict("records")
    columns = [c for c in pairing_columns(records, ()) if c not in ("size", "compile", "warmup")
               and not c.startswith("workload")]  # the workload and its settings: `variant` names them
    name = "variant" if "variant" in frame and frame["variant"].notna().any() else "workload"
    columns = [name, *columns] if name in frame else columns
    varying, shared = [], []
    for column in columns:
        rows = frame
        if column == "optimizer" and "train" in frame:  # says something about training steps only
            rows = frame[frame["train"].map(_plain) == True]  # noqa: E712 (a cell, maybe numpy's bool)
        values = {_plain(v) for v in rows[column]}
        if len(values) > 1:
            varying.append(column)
        elif values and (word := _word(column, values.pop(), alone=True)):
            shared.append(word)
    words = frame.apply(lambda row: " ".join(w for c in varying if (w := _word(c, _plain(row[c]))) is not None),
                        axis=1) if len(frame) else pd.Series([], dtype=object)
    return words.astype(str), Grouping(shared, ", ".join(varying))


def _word(column: str, value: Any, alone: bool = False) -> str | None:
    """How a setting reads in a label; `alone`: shared by every point (a default says nothing)."""
    if column in ("variant", "workload", "dtype", "device"):
        return None if value is None else str(value)
    if column == "train":
        return "train" if value is True else (None if alone else "inference")
    if alone or value is None:
        return None  # the defaults of the profiler, compiler and run settings
    return f"{column}={value}"


def _prepare(frame: pd.DataFrame) -> tuple[pd.DataFrame, Grouping]:
    """The rows with `mode` (eager/compile), `phase` (cold/warm) and `series` (what else sets them
    apart, '' when nothing does), and the words every row shares. Two grid points that nothing of
    this tells apart (settings no table column names) get their config hash in `series`: they are
    never drawn as one line."""
    frame = frame.copy()
    frame["mode"] = frame["compile"].map(lambda v: "compile" if _plain(v) is True else "eager")
    frame["phase"] = frame["warmup"].map(lambda v: "warm" if _plain(v) is True else "cold")
    frame["series"], sweep = _setting_words(frame)
    if "config_hash" in frame and len(frame):
        key = ["series", "mode", "phase", "size"]
        same = frame.duplicated(key, keep=False) & frame["config_hash"].notna()
        if same.any():
            frame.loc[same, "series"] = (frame.loc[same, "series"] + " #" +
                                         frame.loc[same, "config_hash"].astype(str).str.slice(0, 6)).str.strip()
            sweep = Grouping(sweep.shared, f"{sweep.differs} #config".strip())
    return frame, sweep


def _varies(data: pd.DataFrame, column: str) -> bool:
    return column in data and data[column].nunique(dropna=False) > 1


def _order(data: pd.DataFrame, column: str) -> list[Any]:
    """The levels of a column in the order a reader expects: eager before compile, cold before warm,
    sizes ascending, a label's own order (see `_line`), else as they first appear."""
    present = list(dict.fromkeys(data[column]))
    if isinstance(data[column].dtype, pd.CategoricalDtype):
        return [v for v in data[column].cat.categories if v in present]
    known = {"mode": MODES, "phase": PHASES}.get(column)
    if known:
        return [v for v in known if v in present]
    return sorted(present) if column == "size" else present


def _line(data: pd.DataFrame, columns: list[str], sweep: Grouping) -> tuple[pd.Series, str]:
    """One label per row from those of `columns` that vary in `data` ("fp32 compile"), ordered as
    its parts are (series as they appear, then eager, compile, then cold, warm), and what it names,
    for the legend ("dtype, mode")."""
    used = [c for c in columns if _varies(data, c)]
    if not used:
        return pd.Series("", index=data.index), ""
    name = ", ".join(sweep.differs if c == "series" else c for c in used)
    rank = {c: {v: i for i, v in enumerate(_order(data, c))} for c in used}
    parts = data[used].drop_duplicates()
    parts = parts.iloc[sorted(range(len(parts)), key=lambda i: tuple(rank[c][parts[c].iloc[i]] for c in used))]

    def label(frame: pd.DataFrame) -> pd.Series:
        return frame.astype(str).agg(" ".join, axis=1).str.strip()

    order = list(dict.fromkeys(label(parts)))
    return pd.Series(pd.Categorical(label(data[used]), categories=order), index=data.index), name


def _shared(data: pd.DataFrame, sweep: Grouping, columns: list[str]) -> str:
    """What every plotted point has in common, for the title: the sweep's shared settings and each
    of `columns` that has one value here."""
    words = list(sweep.shared)
    for column in columns:
        if column in data and data[column].nunique(dropna=False) == 1:
            value = data[column].iloc[0]
            value = f"size {size_label(value)}" if column == "size" else str(value)
            if value and value not in words:
                words.append(value)
    return ", ".join(words)


# --- axes: ticks in plain numbers --------------------------------------------------------------


def _sizes_axis(ax: Any, sizes: list[float]) -> None:
    """Log base 2, ticked at the sizes the sweep ran (at most 8 of them)."""
    ax.set_xscale("log", base=2)
    sizes = sorted({float(s) for s in sizes if s and s > 0})
    if len(sizes) > 8:
        sizes = [sizes[round(i * (len(sizes) - 1) / 7)] for i in range(8)]
    ax.xaxis.set_major_locator(ticker.FixedLocator(sizes))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: size_label(v)))
    ax.xaxis.set_minor_locator(ticker.NullLocator())


def _log_axis(ax: Any, label: Callable[[float], str], base: int = 10) -> None:
    """Log y, ticked at round numbers, at most MOST_TICKS of them: 1, 2 and 5 or 1 and 3 times a
    power of ten where that many fit, else powers of ten (of two for bytes: 64 KiB, 256 KiB, 1 MiB);
    evenly spaced numbers (2.5, 5, 7.5, 10 ms) over less than a decade where those give fewer than
    three; every label written by `label`, minor ticks unlabelled."""
    ax.set_yscale("log")
    low, high = sorted(ax.get_ylim())

    def inside(subs: tuple[float, ...]) -> int:
        if not 0 < low < high:
            return 0
        first, last = math.floor(math.log(low, base)), math.ceil(math.log(high, base))
        return sum(low <= s * base ** k <= high for k in range(first, last + 1) for s in subs)

    choices = [(1.0, 2.0, 5.0), (1.0, 3.0), (1.0,)] if base == 10 else [(1.0,)]
    fewest = 2 if high >= low * base else 3
    subs = next((c for c in choices if fewest <= inside(c) <= MOST_TICKS), None)
    if subs is not None or inside((1.0,)) > MOST_TICKS:
        locator: ticker.Locator = ticker.LogLocator(base=base, subs=subs or (1.0,), numticks=MOST_TICKS)
    else:
        locator = ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10])
    ax.yaxis.set_major_locator(locator)
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: label(v)))
    ax.yaxis.set_minor_locator(ticker.NullLocator())


def _count_axis(axis: Any) -> None:
    axis.set_major_locator(ticker.MaxNLocator(integer=True, nbins=5))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: size_label(v)))


# --- figures: one grid, its facets, its layout -------------------------------------------------


def _grid(data: pd.DataFrame, x: str, y: str, *, col: str | None = None, row: str | None = None,
          hue: str | None = None, style: str | None = None, height: float = 3.2, aspect: float = 1.3,
          palette: dict[Any, Any] | None = None, hue_dashes: bool = True, **kwargs: Any) -> Any:
    """sns.relplot, lines with markers; facets and semantics only for what varies (pass None
    otherwise); several panels wrap at four a row. Without a style of its own, each hue level gets
    its own dashes and marker too (unless not `hue_dashes`), so that lines lying on each other
    stay visible."""
    if hue and not style and hue_dashes:
        style = hue
    wrap = {"col_wrap": min(4, data[col].nunique())} if col and not row and data[col].nunique() > 4 else {}
    orders = {f"{name}_order": _order(data, value) for name, value in (("col", col), ("row", row), ("hue", hue),
                                                                        ("style", style)) if value}
    markers = {"markers": True} if style else {"marker": "o"}
    return sns.relplot(data=data, x=x, y=y, col=col, row=row, hue=hue, style=style, kind="line", **markers,
                       height=height, aspect=aspect, palette=palette if hue else None, errorbar=None,
                       **orders, **wrap, **kwargs)


def _facets(grid: Any, data: pd.DataFrame, row: str | None, col: str | None) -> Iterator[tuple[Any, pd.DataFrame]]:
    """Each panel's axes with the rows drawn in it."""
    if not row and not col:
        yield grid.ax, data
        return
    for key, ax in grid.axes_dict.items():
        if row and col:
            yield ax, data[(data[row] == key[0]) & (data[col] == key[1])]
        else:
            yield ax, data[data[row or col] == key]


def _titles(grid: Any, row: str | None, col: str | None) -> None:
    if row or col:
        grid.set_titles(template="{row_name} | {col_name}" if row and col else
                        "{row_name}" if row else "{col_name}", row_template="{row_name}", col_template="{col_name}")


def _palette(data: pd.DataFrame, hue: str | None) -> dict[Any, Any]:
    """One color per hue level, fixed, so that interval bars and markers match their lines."""
    if not hue:
        return {}
    levels = _order(data, hue)
    return dict(zip(levels, sns.color_palette(n_colors=max(1, len(levels)))))


def _intervals(grid: Any, data: pd.DataFrame, y: str, hue: str | None, palette: dict[Any, Any],
               row: str | None = None, col: str | None = None, noisy: bool = True) -> list[str]:
    """Each point's 95% interval (columns `<y>_low`, `<y>_high`) as an error bar, and where `noisy`
    (a time, not a memory peak) the noisy grid points hollow; returns what was drawn, for the
    title ("bars: 95% interval", "hollow: noisy point")."""
    low, high = f"{y}_low", f"{y}_high"
    drawn: set[str] = set()
    default = sns.color_palette(n_colors=1)[0]
    for ax, part in _facets(grid, data, row, col):
        for level, rows in (part.groupby(hue, sort=False, observed=True) if hue else [(None, part)]):
            color = palette.get(level, default)
            if low in rows and high in rows:
                bars = rows.dropna(subset=[y, low, high])
                bars = bars[(bars[low] < bars[y]) | (bars[high] > bars[y])]
                readable = [not too_wide(a, b) for a, b in zip(bars[low], bars[high])]
                if not all(readable):
                    drawn.add(f"intervals wider than {TOO_WIDE}x not drawn")
                bars = bars[readable]
                if not bars.empty:
                    ax.errorbar(bars["size"], bars[y], yerr=[(bars[y] - bars[low]).clip(lower=0),
                                                           (bars[high] - bars[y]).clip(lower=0)],
                                fmt="none", ecolor=color, elinewidth=1, capsize=3, zorder=3)
                    drawn.add("bars: 95% interval")
            if noisy and "noisy" in rows:
                hollow = rows[rows["noisy"].map(flag)].dropna(subset=[y])
                if not hollow.empty:
                    ax.scatter(hollow["size"], hollow[y], s=60, facecolors="white", edgecolors=[color],
                               linewidths=1.5, zorder=4)
                    drawn.add("hollow: noisy point")
    return sorted(drawn)


def _title(what: str, shared: str = "", notes: list[str] | None = None) -> str:
    title = f"{what}: {shared}" if shared else what
    return f"{title}\n({'; '.join(notes)})" if notes else title


def _wrap(text: Text, original: str, width: float, renderer: Any) -> bool:
    """Break `original` into lines no wider than `width` pixels, at spaces (inside a word too long
    for a line of its own); returns whether the text changed."""
    before = text.get_text()

    def fits(candidate: str) -> bool:
        text.set_text(candidate)
        return text.get_window_extent(renderer).width <= width

    lines: list[str] = []
    for paragraph in original.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if fits(candidate):
                line = candidate
                continue
            if line:
                lines.append(line)
            while len(word) > 1 and not fits(word):  # a word wider than a line: cut it
                cut = len(word) - 1
                while cut > 1 and not fits(word[:cut]):
                    cut -= 1
                lines.append(word[:cut])
                word = word[cut:]
            line = word
        lines.append(line)
    text.set_text("\n".join(lines))
    return before != "\n".join(lines)


def _finish(grid: Any, title: str, names: dict[str, str] | None = None) -> Figure:
    """The figure's title over everything, wrapped to its width; panel titles wrapped to their
    panels; the legend beside the panels and under the title, never over either (the figure grows
    taller for a legend taller than it), its headings the `names` of the internal columns; then one
    tight layout of the panels in what is left."""
    figure: Figure = grid.figure
    renderer = figure.canvas.get_renderer()
    if grid.legend is not None and names:
        for text in [grid.legend.get_title(), *grid.legend.texts]:
            text.set_text(names.get(text.get_text(), text.get_text()))
    heading = figure.suptitle(title, fontsize="medium", va="top", y=1.0)
    heading.set_in_layout(False)  # its room is kept here, not by tight_layout as well
    panel_titles = [(ax.title, ax.get_title()) for ax in grid.axes.flat if ax.get_title()]
    legend = grid.legend
    for _ in range(3):
        _wrap(heading, title, figure.bbox.width - 2 * PAD_PX, renderer)
        head = heading.get_window_extent(renderer).height + 2 * PAD_PX
        right = 1.0
        if legend is not None:  # beside the panels, under the title: the figure grows to hold it
            tall = legend.get_window_extent(renderer).height + head + 2 * PAD_PX
            if tall > figure.bbox.height:
                figure.set_figheight(tall / figure.dpi)
            legend.set_bbox_to_anchor((0, 0, 1, 1 - head / figure.bbox.height), transform=figure.transFigure)
            right = 1 - (legend.get_window_extent(renderer).width + PAD_PX) / figure.bbox.width
        figure.tight_layout(rect=(0, 0, right, 1 - head / figure.bbox.height))
        changed = [_wrap(text, original, text.axes.bbox.width, renderer) for text, original in panel_titles]
        if not any(changed):
            break
    heading.set_y(1 - PAD_PX / figure.bbox.height)
    return figure


def _save(figure: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)  # no bbox_inches="tight": the layout is done
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())
    return path


# --- the sweep's figures -----------------------------------------------------------------------


def _usable(jobs: pd.DataFrame) -> pd.DataFrame:
    if jobs.empty or "host_us_per_step" not in jobs:
        return jobs.iloc[0:0]
    return usable_rows(jobs)


def _plan(jobs: pd.DataFrame, steps: pd.DataFrame, crossovers: pd.DataFrame, memory: pd.DataFrame | None = None
          ) -> list[tuple[str, Callable[..., Figure], tuple[Any, ...]]]:
    """(file stem, drawing function, its arguments) for every figure the data allows."""
    ok = _usable(jobs)
    if ok.empty:
        return []
    ok, sweep = _prepare(ok)
    plan: list[tuple[str, Callable[..., Figure], tuple[Any, ...]]] = [
        ("crossover", _crossover, (ok, sweep, crossovers)),
        ("launches", _launches, (ok, sweep)),
    ]
    labelled = _steps_of(ok, steps)
    if not labelled.empty:
        plan.append(("steps", _steps, (labelled, sweep)))
        if labelled["top_kernel_us"].notna().any():
            plan.append(("kernels", _kernels, (labelled, ok, sweep)))
    if "achieved_flops_per_s" in ok and ok["achieved_flops_per_s"].notna().any():
        plan.append(("throughput", _throughput, (ok, sweep)))
    if "peak_memory_bytes" in ok and ok["peak_memory_bytes"].notna().any():
        plan.append(("memory", _memory, (ok, sweep)))
    if not _on_roofline(ok).empty:
        plan.append(("roofline", _roofline, (ok, sweep)))
    timelines = _timelines(ok, memory)
    if not timelines.empty:
        plan.append(("memory_timeline", _memory_timeline, (timelines, sweep)))
    return plan


def draw_figures(jobs: pd.DataFrame, steps: pd.DataFrame, crossovers: pd.DataFrame,
                 memory: pd.DataFrame | None = None) -> dict[str, Figure]:
    """Every figure write_plots would save, drawn and laid out but not saved: {file stem: figure}.
    The caller closes them (plt.close)."""
    sns.set_theme(style="whitegrid", context="notebook")
    return {name: draw(*args) for name, draw, args in _plan(jobs, steps, crossovers, memory)}


def write_plots(jobs: pd.DataFrame, steps: pd.DataFrame, crossovers: pd.DataFrame, folder: Path,
                memory: pd.DataFrame | None = None) -> list[Path]:
    """Every plot the data allows, as PNG files in `folder`; returns the paths written."""
    sns.set_theme(style="whitegrid", context="notebook")
    return _draw_all([(draw, args, folder / f"{name}.png")
                      for name, draw, args in _plan(jobs, steps, crossovers, memory)])


def _draw_all(figures: list[tuple[Callable[..., Figure], tuple[Any, ...], Path]]) -> list[Path]:
    """Draw the figures in order, or several at a time in forked processes (matplotlib draws on
    one core: the 5 figures of a 6-job sweep take about 2.1 s on one core of this 2-core
    machine, 1.2 s on both)."""
    workers = drawing_processes(len(figures))
    if workers < 2:
        return [_draw(*figure) for figure in figures]
    with multiprocessing.get_context("fork").Pool(workers, initializer=_quiet_worker, initargs=(os.getpid(),)) as pool:
        return pool.starmap(_draw, figures, chunksize=1)


def _quiet_worker(parent: int) -> None:
    """A drawing process leaves signals to its parent: Ctrl-C reaches the parent, which stops
    the pool; the pool's SIGTERM ends the worker without running the parent's handlers; and it
    dies with its parent (kill -9 of the analysis left it drawing into plots/ after: helper-55)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with(parent)


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


def _draw(draw: Callable[..., Figure], args: tuple[Any, ...], path: Path) -> Path:
    return _save(draw(*args), path)


def _gpu(rows: pd.DataFrame) -> pd.Series:
    """Rows of jobs that measured device time (a CUDA trace)."""
    return rows["device_us_per_step"].notna() if "device_us_per_step" in rows else pd.Series(False, index=rows.index)


def _crossover(ok: pd.DataFrame, sweep: Grouping, crossovers: pd.DataFrame) -> Figure:
    gpu = _gpu(ok)

    def quantity(rows: pd.DataFrame, name: str, key: str) -> pd.DataFrame:
        return rows.assign(quantity=name, us=rows[key], us_low=rows.get(f"{key}_low"), us_high=rows.get(f"{key}_high"))

    parts = [
        quantity(ok[gpu], "host (self CPU)", "host_us_per_step"),
        quantity(ok[gpu], "device (self CUDA)", "device_us_per_step"),
        quantity(ok[~gpu], "framework overhead", "overhead_us_per_step"),
        quantity(ok[~gpu], "compute", "compute_us_per_step"),
        *([quantity(ok[ok["timed_us_per_step"].notna()], "un-profiled step", "timed_us_per_step")]
          if "timed_us_per_step" in ok else []),
    ]
    data = pd.concat([p for p in parts if not p.empty], ignore_index=True)
    col = "series" if _varies(data, "series") else None
    row = "mode" if _varies(data, "mode") else None
    style = "phase" if _varies(data, "phase") else None
    palette = _palette(data, "quantity")
    grid = _grid(data, "size", "us", col=col, row=row, hue="quantity", style=style, palette=palette,
                 height=3.2, aspect=1.3, hue_dashes=False, facet_kws={"sharey": False})  # dashed: crossovers
    notes = _intervals(grid, data, "us", "quantity", palette, row=row, col=col)
    _titles(grid, row, col)
    crossed = _crossover_lines(grid, data, crossovers, row, col, style)
    if crossed:
        notes.insert(0, crossed)
    if _fit_lines(grid, data, crossovers, row, col):
        notes.insert(0, "black: the fit a + b·work of the un-profiled step")
    for ax, part in _facets(grid, data, row, col):
        _sizes_axis(ax, data["size"])
        _log_axis(ax, duration_label)
    grid.set_axis_labels("size", "time per step")
    about = _shared(data, sweep, ["series", "mode", "phase"])
    return _finish(grid, _title("Work vs host per step", about, notes), {"quantity": "per step"})


def _series_rows(data: pd.DataFrame, crossovers: pd.DataFrame) -> Iterator[tuple[pd.Series, pd.DataFrame]]:
    """Each crossovers.csv row with the plotted rows of its series."""
    keys = [k for k in ("workload", "variant", "dtype", "compile", "warmup", "train", "device")
            if k in crossovers and k in data]
    for _, c in crossovers.iterrows():
        match = data
        for k in keys:
            match = match[match[k].map(_plain) == _plain(c[k])]
        if not match.empty:
            yield c, match


def _fitted(c: pd.Series) -> bool:
    """A series whose model of the un-profiled steps fits (profsweep.fit)."""
    return pd.notna(c.get("fit_overhead_us")) and not str(c.get("fit_check") or "").startswith("does not fit")


def _fit_lines(grid: Any, data: pd.DataFrame, crossovers: pd.DataFrame, row: str | None, col: str | None) -> bool:
    """Each fitted series' line a + b·work through its sizes, in its panel; whether any was drawn."""
    if crossovers.empty or "fit_overhead_us" not in crossovers:
        return False
    panels = {(ax_row, ax_col): ax for ax_row, ax_col, ax in _panel_keys(grid, row, col)}
    drawn = False
    for c, match in _series_rows(data, crossovers):
        if not _fitted(c):
            continue
        key = "bytes_per_call" if c.get("fit_work") == "bytes" else "flops_per_call"
        points = match.drop_duplicates("size").dropna(subset=[key]).sort_values("size") if key in match else match[:0]
        fitted_to = [float(v) for v in str(c.get("fit_sizes") or "").split(";") if v and v != "nan"]
        if fitted_to:  # the line of the sizes it was fitted to (profsweep.fit: the smaller ones, below a break)
            sizes = points["size"].astype(float).to_numpy()
            points = points[np.isclose(sizes[:, None], np.array(fitted_to)[None, :], rtol=1e-9).any(axis=1)]
        first = match.iloc[0]
        ax = panels.get((first[row] if row else None, first[col] if col else None))
        if ax is None or len(points) < 2:
            continue
        fitted = c["fit_overhead_us"] + points[key].astype(float) / c["fit_throughput"] * 1e6
        ax.plot(points["size"], fitted, color="black", linewidth=1, zorder=5)
        drawn = True
    return drawn


def _crossover_lines(grid: Any, data: pd.DataFrame, crossovers: pd.DataFrame, row: str | None, col: str | None,
                     style: str | None) -> str:
    """A vertical line at each series' crossover size, in the panel of that series: the model's
    (fit_crossover_size) where it fits, else the profiled split's (crossover_size); returns the
    title's note for them, '' where no series crosses."""
    if crossovers.empty or "crossover_size" not in crossovers:
        return ""
    panels = {(ax_row, ax_col): ax for ax_row, ax_col, ax in _panel_keys(grid, row, col)}
    phases = set()
    for c, match in _series_rows(data, crossovers):
        at = c.get("fit_crossover_size") if _fitted(c) else c.get("crossover_size")
        if at is None or pd.isna(at) or not match["size"].min() <= at <= match["size"].max():
            continue  # none, or the model's beyond the sizes swept: said in words, not drawn off the axis
        first = match.iloc[0]
        ax = panels.get((first[row] if row else None, first[col] if col else None))
        if ax is None:
            continue
        phase = first["phase"]
        ax.axvline(at, color="0.3", linestyle="--" if phase == "cold" else ":", linewidth=1)
        size = size_label(round(at))
        label = f" {phase}: {size}" if style else f" {size}"
        ax.annotate(label, (at, 0.95 if phase == "cold" else 0.87),
                    xycoords=("data", "axes fraction"), fontsize=8, ha="left")
        phases.add(phase)
    if not phases:
        return ""
    if style and phases == {"cold", "warm"}:
        return "dashed: cold crossover, dotted: warm"
    return "dashed: crossover" if phases == {"cold"} else "dotted: crossover"


def _panel_keys(grid: Any, row: str | None, col: str | None) -> Iterator[tuple[Any, Any, Any]]:
    if not row and not col:
        yield None, None, grid.ax
        return
    for key, ax in grid.axes_dict.items():
        if row and col:
            yield key[0], key[1], ax
        else:
            yield (key, None, ax) if row else (None, key, ax)


def _launches(ok: pd.DataFrame, sweep: Grouping) -> Figure:
    """Kernels and launch calls per step (CUDA jobs); aten ops per step (CPU jobs: no kernels)."""
    gpu = _gpu(ok)
    parts = [
        ok[gpu].assign(quantity="kernels", count=ok.loc[gpu, "step_kernels_median"]),
        ok[gpu].assign(quantity="launch calls", count=ok.loc[gpu, "step_launches_median"]),
        ok[~gpu].assign(quantity="aten ops", count=ok.loc[~gpu, "step_aten_ops_median"]),
    ]
    data = pd.concat([p for p in parts if not p.empty], ignore_index=True).dropna(subset=["count"])
    data["line"], line = _line(data, ["mode", "phase"], sweep)
    col = "series" if _varies(data, "series") else None
    hue = "line" if _varies(data, "line") else None
    if col and not hue:  # one line per series: all in one panel, a color each
        col, hue = None, "series"
    style = "quantity" if _varies(data, "quantity") else None
    grid = _grid(data, "size", "count", col=col, hue=hue, style=style, palette=_palette(data, hue),
                 height=3.0, aspect=1.3)
    _titles(grid, None, col)
    for ax, _ in _facets(grid, data, None, col):
        _sizes_axis(ax, data["size"])
        _count_axis(ax.yaxis)
    if not gpu.any():
        what, label = "Aten ops per step (CPU sweep: no kernels, no launches)", "aten ops per step"
    elif (~gpu).any():
        what, label = "Kernels and launch calls per step (CPU jobs: aten ops)", "per step (median)"
    else:
        what, label = "Kernels and launch calls per step", "per step (median)"
    grid.set_axis_labels("size", label)
    return _finish(grid, _title(what, _shared(data, sweep, ["series", "mode", "phase"])),
                   {"line": line, "series": sweep.differs, "quantity": "count"})


def _few_sizes(frame: pd.DataFrame, most: int = MOST_SIZES) -> pd.DataFrame:
    """The rows of at most `most` sizes, spread from the smallest to the largest."""
    sizes = sorted(frame["size"].unique())
    if len(sizes) > most:
        sizes = [sizes[round(i * (len(sizes) - 1) / (most - 1))] for i in range(most)]
    return frame[frame["size"].isin(sizes)]


def _steps_of(ok: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The steps of the usable jobs, each with its grid point's mode, phase and series (the point's
    `jobs` are its repeats), and how many repeats measured it."""
    if steps.empty:
        return steps
    point_of: dict[str, int] = {}
    for index, point in ok.iterrows():
        for job in point_jobs(point):
            point_of[job] = index
    labelled = steps[steps["job"].isin(point_of)].copy()
    if labelled.empty:
        return labelled
    points = labelled["job"].map(point_of)
    for column in ("mode", "phase", "series", "top_kernel"):
        if column in ok:
            labelled[column] = points.map(ok[column]).to_numpy()
    labelled["point"] = points.to_numpy()
    labelled["size"] = points.map(ok["size"]).to_numpy()
    return labelled


def _repeats_note(data: pd.DataFrame) -> list[str]:
    many = data.groupby("point")["job"].nunique().max() > 1
    return ["median over each grid point's repeats"] if many else []


def _steps(steps: pd.DataFrame, sweep: Grouping) -> Figure:
    data = _few_sizes(steps).sort_values(["size", "step"], kind="stable")
    data["line"], line = _line(data, ["series", "mode"], sweep)
    col = "size" if _varies(data, "size") else None
    hue = "line" if _varies(data, "line") else None
    style = "phase" if _varies(data, "phase") else None
    grid = _grid(data, "step", "host_us", col=col, hue=hue, style=style, palette=_palette(data, hue),
                 height=2.8, aspect=1.15, estimator="median", facet_kws={"sharey": False})
    for size, ax in grid.axes_dict.items():
        ax.set_title(f"size {size_label(size)}")
    for ax, _ in _facets(grid, data, None, col):
        _count_axis(ax.xaxis)
        _log_axis(ax, duration_label)
    grid.set_axis_labels("profiled step", "host time of the step")
    about = _shared(data, sweep, ["series", "mode", "phase", "size"])
    what = "Host duration of each profiled step" + (", cold vs warm" if style else "")
    return _finish(grid, _title(what, about, _repeats_note(data)), {"line": line})


def _kernels(steps: pd.DataFrame, ok: pd.DataFrame, sweep: Grouping) -> Figure:
    """Each job's top kernel (on the CPU: its top compute op) in each profiled step: a color per
    size, named after its kernel where the jobs' top kernels differ (else the title names it)."""
    data = _few_sizes(steps.dropna(subset=["top_kernel_us"])).sort_values(["size", "step"], kind="stable")
    gpu = bool(_gpu(ok).any())
    cpu = bool((~_gpu(ok)).any())
    names = data["top_kernel"].fillna("?").astype(str).map(lambda n: n if len(n) <= 36 else n[:35] + "…")
    one = names.nunique() == 1
    data["kernel"] = data["size"].map(size_label) + ("" if one else ": " + names)
    row = "series" if _varies(data, "series") and _varies(data, "mode") else None
    col = "mode" if _varies(data, "mode") else "series" if _varies(data, "series") else None
    hue = "kernel" if _varies(data, "kernel") else None
    style = "phase" if _varies(data, "phase") else None
    grid = _grid(data, "step", "top_kernel_us", col=col, row=row, hue=hue, style=style,
                 palette=_palette(data, hue), height=3.0, aspect=1.3, estimator="median")
    _titles(grid, row, col)
    for ax, _ in _facets(grid, data, row, col):
        _count_axis(ax.xaxis)
        _log_axis(ax, duration_label)
    what = ("Step-to-step spread of each job's top kernel" if gpu and not cpu else
            "Step-to-step spread of each job's top compute op (CPU sweep: no kernels)" if not gpu else
            "Step-to-step spread of each job's top kernel (CPU jobs: top compute op)")
    if one:
        what += f" ({data['top_kernel'].iloc[0]})"
    grid.set_axis_labels("profiled step", "top kernel per step" if gpu else "top op per step")
    about = _shared(data, sweep, ["series", "mode", "phase", "kernel"])
    headings = {"kernel": "size" if one else "size: top kernel" if gpu else "size: top op"}
    return _finish(grid, _title(what, about, _repeats_note(data)), headings)


def _by_series(data: pd.DataFrame) -> tuple[str | None, str | None, str | None]:
    """col, hue, style of a per-point plot: a panel per series, a color per mode, a style per phase;
    each only where it varies (cold/warm take the color where mode does not vary, the series where
    neither does)."""
    col = "series" if _varies(data, "series") else None
    hue = "mode" if _varies(data, "mode") else None
    style = "phase" if _varies(data, "phase") else None
    if style and not hue:
        hue, style = style, None
    if col and not hue:  # one line per series: all in one panel, a color each
        col, hue = None, col
    return col, hue, style


def _throughput(ok: pd.DataFrame, sweep: Grouping) -> Figure:
    data = ok.dropna(subset=["achieved_flops_per_s"]).copy()
    col, hue, style = _by_series(data)
    palette = _palette(data, hue)
    grid = _grid(data, "size", "achieved_flops_per_s", col=col, hue=hue, style=style, palette=palette,
                 height=3.2, aspect=1.3)
    notes = _intervals(grid, data, "achieved_flops_per_s", hue, palette, col=col)
    _titles(grid, None, col)
    for ax, part in _facets(grid, data, None, col):
        peaks = part["peak_flops_per_s"].dropna() if "peak_flops_per_s" in part else part.iloc[0:0]
        if not peaks.empty:
            ax.axhline(peaks.iloc[0], color="crimson", linestyle=":")
            ax.annotate("dense peak", (0.02, peaks.iloc[0]), xycoords=("axes fraction", "data"),
                        fontsize=8, color="crimson", va="bottom")
        _sizes_axis(ax, data["size"])
        _log_axis(ax, rate_label)
    grid.set_axis_labels("size", "achieved FLOP/s")
    about = _shared(data, sweep, ["series", "mode", "phase"])
    return _finish(grid, _title("Achieved throughput (FLOPs per call / step time)", about, notes),
                   {"series": sweep.differs})


ROOFLINE_COLUMNS = ["achieved_flops_per_s", "arithmetic_intensity", "peak_flops_per_s", "peak_bytes_per_s"]


def _on_roofline(ok: pd.DataFrame) -> pd.DataFrame:
    """The grid points a roofline can place: FLOPs and bytes counted, and the ceilings known."""
    if not set(ROOFLINE_COLUMNS) <= set(ok.columns):
        return ok.iloc[0:0]
    data = ok.dropna(subset=ROOFLINE_COLUMNS)
    return data[(data[ROOFLINE_COLUMNS] > 0).all(axis=1)]


def _ceilings_label(row: pd.Series) -> str:
    """What a point's ceilings are: its dtype, and its threads (CPU) or GPU, and where they come from."""
    words = [str(row.get("dtype"))]
    threads = row.get("torch_threads")
    if str(row.get("platform")) == "cpu" and pd.notna(threads):
        words.append(amount(int(threads), 'thread'))
    elif isinstance(row.get("device_name"), str):
        words.append(str(row["device_name"]))
    source = row.get("peak_source")
    return ", ".join(words + ([str(source)] if isinstance(source, str) else []))


def _roofline(ok: pd.DataFrame, sweep: Grouping) -> Figure:
    """Achieved FLOP/s against arithmetic intensity (FLOPs per byte moved, counted by hand), log-log,
    under the ceilings it is held against: this machine's measured matmul peak and triad bandwidth
    (or a GPU's datasheet peaks where none was measured), meeting at the ridge. One marker and
    line per series (its sizes), a panel per set of ceilings; bars: the 95% interval."""
    data = _on_roofline(ok).copy()
    data["ceilings"] = data.apply(_ceilings_label, axis=1)  # a panel per set of ceilings
    data["line"], named = _line(data, ["series", "mode", "phase"], sweep)
    col = "ceilings" if _varies(data, "ceilings") else None
    hue = "line" if _varies(data, "line") else None
    palette = _palette(data, hue)
    grid = sns.relplot(data=data.sort_values("size"), x="arithmetic_intensity", y="achieved_flops_per_s", col=col,
                       hue=hue, style=hue, markers=True if hue else None, marker=None if hue else "o",
                       kind="line", sort=False, errorbar=None, height=3.6, aspect=1.35,
                       palette=palette if hue else None, **({"hue_order": _order(data, hue)} if hue else {}))
    _titles(grid, None, col)
    default = sns.color_palette(n_colors=1)[0]
    notes: set[str] = set()
    for ax, part in _facets(grid, data, None, col):
        if part.empty:
            continue
        peak_f, peak_b = float(part["peak_flops_per_s"].iloc[0]), float(part["peak_bytes_per_s"].iloc[0])
        ridge = peak_f / peak_b
        xs = [float(part["arithmetic_intensity"].min()) / 4, max(float(part["arithmetic_intensity"].max()), ridge) * 4]
        line = [xs[0], ridge, xs[1]]
        ax.plot(line, [min(peak_f, peak_b * x) for x in line], color="crimson", linewidth=1.5, zorder=1)
        source = str(part["ceilings"].iloc[0])
        measured = "measured" in source
        ax.annotate(f"{'measured' if measured else 'datasheet'} {part['dtype'].iloc[0]} matmul "
                    f"{rate(peak_f, 'FLOP/s')}", (xs[1], peak_f), fontsize=8, color="crimson", ha="right",
                    va="bottom", xytext=(0, 6), textcoords="offset points")
        ax.annotate(f"{'triad' if measured else 'memory'} {rate(peak_b, 'B/s')}", (xs[0], peak_b * xs[0]),
                    fontsize=8, color="crimson", ha="left", va="bottom", xytext=(0, 8), textcoords="offset points")
        for _, point in part.iterrows():  # each point's size beside it
            ax.annotate(size_label(float(point["size"])), (point["arithmetic_intensity"], point["achieved_flops_per_s"]),
                        fontsize=7, color="dimgray", xytext=(4, -8), textcoords="offset points")
        ax.axvline(ridge, color="crimson", linestyle=":", linewidth=1)
        if {"ridge_flops_per_byte_low", "ridge_flops_per_byte_high"} <= set(part.columns):
            low, high = part["ridge_flops_per_byte_low"].iloc[0], part["ridge_flops_per_byte_high"].iloc[0]
            if pd.notna(low) and pd.notna(high) and 0 < low < high:  # what the ceilings' measurement leaves
                ax.axvspan(float(low), float(high), color="crimson", alpha=0.08, linewidth=0, zorder=0)
                notes.add("shaded: the ridge's range")
        for level, rows in (part.groupby(hue, sort=False, observed=True) if hue else [(None, part)]):
            bars = rows.dropna(subset=["achieved_flops_per_s_low", "achieved_flops_per_s_high"]) \
                if {"achieved_flops_per_s_low", "achieved_flops_per_s_high"} <= set(rows.columns) else rows.iloc[0:0]
            if not bars.empty:
                y = bars["achieved_flops_per_s"]
                ax.errorbar(bars["arithmetic_intensity"], y, yerr=[(y - bars["achieved_flops_per_s_low"]).clip(lower=0),
                                                                  (bars["achieved_flops_per_s_high"] - y).clip(lower=0)],
                            fmt="none", ecolor=palette.get(level, default), elinewidth=1, capsize=3, zorder=3)
                notes.add("bars: 95% interval")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        lows = [float(v) for v in part.get("achieved_flops_per_s_low", part["achieved_flops_per_s"]).dropna()]
        lowest = min([float(part["achieved_flops_per_s"].min()), peak_b * xs[0], *[v for v in lows if v > 0]])
        ax.set_yscale("log")
        ax.set_ylim(lowest / 2, peak_f * 2.5)  # log limits set, not autoscaled: the bars reach below zero linearly
        _log_axis(ax, rate_label)
    grid.set_axis_labels("arithmetic intensity (FLOP per byte moved)", "achieved FLOP/s")
    about = _shared(data, sweep, ["series", "mode", "phase"])
    sizes = ", ".join(size_label(v) for v in sorted(data["size"].unique()))
    return _finish(grid, _title("Roofline: achieved FLOP/s under this machine's ceilings (sizes " + sizes + ")",
                                about, sorted(notes)), {"line": named or "series"})


def _timelines(ok: pd.DataFrame, memory: pd.DataFrame | None) -> pd.DataFrame:
    """Each grid point's memory over its last recorded step, from its first usable repeat, with the
    point's labels (series, mode, phase, size) and the op that holds its peak."""
    if memory is None or memory.empty or "jobs" not in ok:
        return pd.DataFrame()
    first = {}
    have = set(memory["job"].astype(str))
    for index, row in ok.iterrows():
        job = next((j for j in point_jobs(row) if j in have), None)
        if job is not None:
            first[job] = index
    if not first:
        return pd.DataFrame()
    data = memory[memory["job"].astype(str).isin(first)].copy()
    labels = ok.loc[[first[j] for j in data["job"].astype(str)]]
    for column in ("series", "mode", "phase", "size", "step_allocated_peak_op", "memory_step"):
        data[column] = labels[column].to_numpy() if column in labels else None
    return data


def _memory_timeline(data: pd.DataFrame, sweep: Grouping) -> Figure:
    """Bytes allocated over one step (the last recorded one) of each grid point, a panel per size,
    a line per series; each panel's highest peak marked with the op that reached it."""
    data = data.copy()
    data["line"], named = _line(data, ["series", "mode", "phase"], sweep)
    col = "size" if _varies(data, "size") else None
    hue = "line" if _varies(data, "line") else None
    palette = _palette(data, hue)
    wrap = {"col_wrap": 3} if col and data["size"].nunique() > 3 else {}
    grid = sns.relplot(data=data, x="t_us", y="allocated_bytes", col=col, hue=hue, kind="line", drawstyle="steps-post",
                       sort=False, errorbar=None, height=3.0, aspect=1.3, palette=palette if hue else None,
                       facet_kws={"sharex": False, "sharey": False}, estimator=None,
                       **wrap, **({"hue_order": _order(data, hue)} if hue else {}))
    if col:
        grid.set_titles(template="size {col_name}")
    for ax, part in _facets(grid, data, None, col):
        if part.empty:
            continue
        top = part.loc[part["allocated_bytes"].idxmax()]
        ax.scatter([top["t_us"]], [top["allocated_bytes"]], color="crimson", zorder=4, s=20)
        if isinstance(top["step_allocated_peak_op"], str):
            ax.annotate(short_name(top["step_allocated_peak_op"], 28), (top["t_us"], top["allocated_bytes"]), fontsize=8,
                        color="crimson", ha="center", va="bottom", xytext=(0, 3), textcoords="offset points")
        top_bytes = max(float(part["allocated_bytes"].max()) * 1.2, 1.0)
        unit = 1024 ** max(0, min(4, int(math.log(top_bytes, 1024))))  # B, KiB, MiB, GiB
        ax.yaxis.set_major_locator(ticker.MultipleLocator(_nice_step(top_bytes / unit / 5) * unit))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: bytes_label(v)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: duration_label(v)))
        ax.set_ylim(bottom=0, top=top_bytes)
    grid.set_axis_labels("time from the step's start", "allocated")
    about = _shared(data, sweep, ["series", "mode", "phase"])
    step = str(data["memory_step"].dropna().iloc[0]) if data["memory_step"].notna().any() else "the last step"
    return _finish(grid, _title(f"Memory over one step ({step}, first repeat; the peak and the op that reached it)",
                                about), {"line": named or "series"})


def _nice_step(raw: float) -> float:
    """The round number (1, 2, 2.5 or 5 times a power of ten) at or above `raw`."""
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _memory(ok: pd.DataFrame, sweep: Grouping) -> Figure:
    data = ok.dropna(subset=["peak_memory_bytes"]).copy()
    col, hue, style = _by_series(data)
    grid = _grid(data, "size", "peak_memory_bytes", col=col, hue=hue, style=style, palette=_palette(data, hue),
                 height=3.2, aspect=1.3)
    notes = _intervals(grid, data, "peak_memory_bytes", hue, _palette(data, hue), col=col, noisy=False)
    _titles(grid, None, col)
    for ax, _ in _facets(grid, data, None, col):
        _sizes_axis(ax, data["size"])
        _log_axis(ax, bytes_label, base=2)
    grid.set_axis_labels("size", "peak memory")
    gpu = _gpu(data)
    sources = (["CUDA: allocator peak"] if gpu.any() else []) + (["CPU: live tensors + allocator peak"]
                                                                 if (~gpu).any() else [])
    about = _shared(data, sweep, ["series", "mode", "phase"])
    return _finish(grid, _title("Peak memory per grid point", about, sources + notes), {"series": sweep.differs})
