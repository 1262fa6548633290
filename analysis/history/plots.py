"""The history's figures: a trend per changed grid point and a small-multiples overview of every one.

The trend: each sweep's level (the geometric mean of its repeats) with its 95% interval from the
repeats as a band, each repeat as a dot, the fitted piecewise-constant level dashed, each change
marked where it happened (regression red, improvement green, unconfirmed orange) and annotated
with what changed in the environment. Titles wrap to the figure (saved with a tight bounding box:
never clipped), durations are ticked in plain units (80 µs, 1.2 ms), sweeps by name.

Imported only when plotting (matplotlib, seaborn, pandas).
"""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import Any, Sequence

import matplotlib
import matplotlib.ticker as ticker

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from analysis.text import us  # noqa: E402
from analysis.files import atomic_write_bytes  # noqa: E402

COLOURS = {"regression": "#c0392b", "improvement": "#1e8449", "unconfirmed": "#d68910"}
MOST_PANELS = 120  # in the overview; the rest are in trends.csv and the store
MOST_TICKS = 12  # sweep names along an x axis
LOG_ABOVE = 8.0  # a y axis spanning more than this factor is logarithmic


def _duration_axis(ax: Any, low: float, high: float) -> None:
    if high > 0 and low > 0 and high / low > LOG_ABOVE:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_locator(ticker.MaxNLocator(5) if ax.get_yscale() == "linear" else ticker.LogLocator(numticks=5))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: us(v) if v > 0 else "0"))


def _sweep_ticks(ax: Any, order: Sequence[int], names: Sequence[str]) -> None:
    every = max(1, math.ceil(len(order) / MOST_TICKS))
    shown = list(order)[::every]
    ax.set_xticks(shown)
    turn = len(shown) > 8
    ax.set_xticklabels([textwrap.shorten(str(names[i]), 18, placeholder="…") for i in shown],
                       rotation=30 if turn else 0, ha="right" if turn else "center", fontsize=9)


def _save(fig: Any, path: Path, tight: bool = True) -> Path:
    """`tight`: grown to whatever sticks out (a title, a legend); a figure laid out by hand saves
    without that extra drawing pass."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, **({"bbox_inches": "tight", "pad_inches": 0.15} if tight else {}))
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def trend_plot(data: pd.DataFrame, repeats: pd.DataFrame, title: str, marks: list[dict[str, Any]],
               names: Sequence[str], path: Path) -> Path:
    """One grid point: `data` its rows of trends.csv, `repeats` (order, value_us) each repeat,
    `marks` its changes (x between the sweeps, status, ratio, words), `names` every sweep's name."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(10, 4.4))
    for n, (_, part) in enumerate(data.groupby("segment")):  # each level on its own: nothing drawn across a change
        first = n == 0
        ax.fill_between(part["order"], part["low_us"], part["high_us"], color="#5d8fc9", alpha=0.22, linewidth=0,
                        label="95% interval from the sweep's repeats" if first else None)
        ax.plot(part["order"], part["level_us"], marker="o", color="#2e5c9a", zorder=4,
                label="each sweep (geometric mean of its repeats)" if first else None)
        ax.plot([part["order"].min() - 0.4, part["order"].max() + 0.4], [part["fitted_us"].iloc[0]] * 2, ls="--",
                color="black", lw=1.4, zorder=5, label="fitted level" if first else None)
    ax.scatter(repeats["order"], repeats["value_us"], s=12, color="#555", alpha=0.6, zorder=3,
               label="each repeat (one process)")
    top = max(data["high_us"].max(), repeats["value_us"].max() if len(repeats) else 0)
    low = min(data["low_us"].min(), repeats["value_us"].min() if len(repeats) else math.inf)
    for mark in marks:
        colour = COLOURS[mark["status"]]
        ax.axvline(mark["x"], color=colour, lw=2, zorder=2, label=f"{mark['status']} {mark['ratio']:.2f}×")
        if mark.get("words"):
            ax.annotate(textwrap.fill(mark["words"], 38), (mark["x"], 1.0), xycoords=("data", "axes fraction"),
                        xytext=(4, -4), textcoords="offset points", va="top", fontsize=8, color=colour,
                        bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": colour, "alpha": 0.85})
    _duration_axis(ax, low, top)
    _sweep_ticks(ax, list(range(len(names))), names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xlabel("sweep (by start time)")
    ax.set_ylabel("time per step")
    ax.set_title(textwrap.fill(title, 100), fontsize=11, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)  # beside: never on the ticks
    return _save(fig, path)


def overview_plot(data: pd.DataFrame, marks: dict[str, list[dict[str, Any]]], names: Sequence[str],
                  path: Path) -> Path:
    """Every grid point measured in two sweeps or more, one small panel each (its own y axis),
    changed ones first; each level drawn on its own, the changes marked. Laid out by hand (a
    hundred panels: no tight layout pass over them)."""
    sns.set_theme(style="whitegrid", context="paper")
    points = list(dict.fromkeys(data["point"]))
    changed = [p for p in points if marks.get(p)]
    shown = (changed + [p for p in points if p not in changed])[:MOST_PANELS]
    cols = min(5, len(shown))
    rows = math.ceil(len(shown) / cols)
    width, height, foot = 2.9, 2.1, 0.8  # inches per panel (its two-line title included), below the panels
    tall = rows * height + foot
    fig, axes = plt.subplots(rows, cols, figsize=(cols * width, tall), squeeze=False)
    fig.subplots_adjust(left=0.7 / (cols * width), right=1 - 0.25 / (cols * width), wspace=0.42, hspace=0.62,
                        top=1 - 0.45 / tall, bottom=foot / tall)
    groups = {point: part for point, part in data.groupby("point", sort=False)}
    for ax, point in zip(axes.flat, shown):
        part = groups[point]
        for _, level in part.groupby("segment"):
            ax.fill_between(level["order"], level["low_us"], level["high_us"], color="#5d8fc9", alpha=0.25, linewidth=0)
            ax.plot(level["order"], level["level_us"], color="#2e5c9a", lw=1, marker="o" if len(part) <= 40 else None,
                    markersize=2.5)
        for mark in marks.get(point, []):
            ax.axvline(mark["x"], color=COLOURS[mark["status"]], lw=1.6)
        colour = COLOURS[marks[point][0]["status"]] if marks.get(point) else "#222"
        ax.set_title(textwrap.fill(point, 34), fontsize=7.5, color=colour)
        _duration_axis(ax, float(part["low_us"].min()), float(part["high_us"].max()))
        ax.tick_params(axis="both", labelsize=7, pad=1)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    for ax in axes.flat:
        ax.set_xlim(-0.5, len(names) - 0.5)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(4, integer=True))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{int(v) + 1}"))
        ax.xaxis.set_tick_params(labelbottom=True)
    fig.supxlabel("sweep number (by start time); time per step on each panel's own axis", fontsize=9,
                  y=0.2 / tall, va="bottom")
    return _save(fig, path, tight=False)
