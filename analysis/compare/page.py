"""compare's outputs: compare.csv, ops_diff.csv, plots/ratio.png, compare.json (where the server
finds the two sides' traces) and compare.html, each written atomically."""

from __future__ import annotations

import io
import json
import os
from html import escape
from pathlib import Path
from typing import Any

from analysis import perfetto
from analysis.compare.engine import MARGIN, MORE_REPEATS, VERDICT_ORDER
from analysis.diff import DIFF_COLUMNS, DIFF_DECIMALS
from analysis.compare.side import Side
from analysis.files import atomic_write_bytes, atomic_write_text, csv_text
from analysis.html import CSS, image, table
from analysis.text import fmt, size_label, us
from profsweep import stats
from profsweep.decide import FDR, percent
from profsweep.contract import COMPARE_FILE, COMPARE_PAGE, SERVED_BASE, SERVED_NEW, amount, point_label, trace_files

GRID_WORDS = ("workload", "size", "dtype", "compile", "warmup", "train", "device")  # a pair's grid point, in short
CSV_COLUMNS_FIRST = ("verdict", "step_ratio", "interval_low", "interval_high", "p_value", "verdict_why",
                     "host_us_per_step_ratio", "device_us_per_step_ratio", "base_job", "new_job")


OUTPUTS = ("compare.csv", "ops_diff.csv", "plots/ratio.png", COMPARE_FILE, COMPARE_PAGE)


def write_compare(result: dict[str, Any], base: Side, new: Side, out: Path) -> list[Path]:
    """compare.csv, ops_diff.csv, plots/ratio.png and compare.html in `out`, each written atomically,
    as one set: an earlier comparison's are removed first, and where one cannot be written those
    written before it go too (an error then, and no mix of two comparisons' files)."""
    out.mkdir(parents=True, exist_ok=True)
    _remove_outputs(out)
    try:
        return _write_compare(result, base, new, out)
    except BaseException:
        _remove_outputs(out, quiet=True)
        raise


def _remove_outputs(out: Path, quiet: bool = False) -> None:
    """compare's files in `out` (a link itself, not what it points to); `quiet`: what cannot be
    removed stays, the error that brought us here is the one said."""
    for name in OUTPUTS:
        path = out / name
        try:
            if path.is_file() or path.is_symlink():
                path.unlink()
        except OSError:
            if not quiet:
                raise


def _write_compare(result: dict[str, Any], base: Side, new: Side, out: Path) -> list[Path]:
    pairs = result["pairs"]
    flat_rows = [{k: v for k, v in p.items() if k not in ("ops_diff", "kernels_diff")} for p in pairs]
    present = {k for row in flat_rows for k in row}
    order = list(result["columns"]) + [c for c in CSV_COLUMNS_FIRST if c in present]
    columns = order + [c for c in dict.fromkeys(k for row in flat_rows for k in row) if c not in order]
    atomic_write_text(out / "compare.csv", csv_text(flat_rows, columns))
    # per pair (in compare.csv's order), its ops then its kernels, each ranked by the change in time
    grid = [c for c in result["columns"] if c in GRID_WORDS]
    diffs = [{**{c: p.get(c) for c in grid}, "base_job": p["base_job"], "new_job": p["new_job"],
              "what": what, **d} for p in pairs for what in ("op", "kernel") for d in p[f"{what}s_diff"]]
    atomic_write_text(out / "ops_diff.csv", csv_text(diffs, [*grid, "base_job", "new_job", "what", *DIFF_COLUMNS],
                                                     DIFF_DECIMALS))
    plots = write_ratio_plot(pairs, out / "plots")
    # where `python -m analysis serve` finds the two sides' traces (SERVED_BASE/..., SERVED_NEW/...)
    atomic_write_text(out / COMPARE_FILE, json.dumps(
        {"base": str(base.folder.resolve()), "new": str(new.folder.resolve())}, indent=2) + "\n")
    html = out / COMPARE_PAGE
    atomic_write_text(html, _html(result, base, new, plots, out))
    return [out / "compare.csv", out / "ops_diff.csv", out / COMPARE_FILE, *plots, html]


def write_ratio_plot(pairs: list[dict[str, Any]], folder: Path) -> list[Path]:
    """plots/ratio.png (none where no pair has a size and a ratio)."""
    figure = ratio_figure(pairs)
    if figure is None:
        return []
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    path = folder / "ratio.png"
    atomic_write_bytes(path, buffer.getvalue())
    return [path]


SHOWN = (1e-12, 1e12)  # ratios (and interval ends) drawn on the log axis; beyond, a pair is not drawn


def ratio_figure(pairs: list[dict[str, Any]]) -> Any:
    """Each pair's ratio NEW / BASE per step, the one its verdict rests on, with its 95% interval,
    against size, one line per series (named by what differs between them; the title says what
    they share); a pair with a verdict filled, an inconclusive one hollow; log axes, 1.0 marked.
    Drawn with matplotlib alone, without the report's seaborn kit: a comparison costs a fraction
    of an analysis."""
    lines: dict[str, list[tuple[float, float, float | None, float | None, bool]]] = {}
    for p in pairs:
        size, ratio = stats.number(p.get("size")), stats.number(p.get("step_ratio"))
        if size and size > 0 and ratio and SHOWN[0] < ratio < SHOWN[1]:
            low, high = (x if x is not None and SHOWN[0] < x < SHOWN[1] else None
                         for x in (stats.number(p.get("interval_low")), stats.number(p.get("interval_high"))))
            lines.setdefault(point_label(p, without=("size",)), []).append(
                (size, ratio, low, high, p.get("verdict") != "inconclusive"))
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.ticker as ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    words = [name.split(" ") for name in lines]
    shared = [w for w in words[0] if all(w in other for other in words)]
    figure = Figure(figsize=(8.5, 4.0), dpi=110)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    shown: list[float] = [1.0]
    for i, (name, points) in enumerate(lines.items()):
        color = colors[i % len(colors)]
        points.sort(key=lambda x: x[0])
        label = " ".join(w for w in name.split(" ") if w not in shared) or name
        ax.plot([x[0] for x in points], [x[1] for x in points], "-", color=color, label=label, zorder=2)
        for size, ratio, low, high, decided in points:
            ax.plot([size], [ratio], "o", color=color, markerfacecolor=color if decided else "white", zorder=3)
            if low is not None and high is not None and 0 < low <= ratio <= high:
                ax.errorbar([size], [ratio], yerr=[[ratio - low], [high - ratio]], color=color, capsize=3,
                            elinewidth=1, zorder=2)
                shown += [low, high]
            shown.append(ratio)
    ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({x[0] for points in lines.values() for x in points})
    ax.xaxis.set_major_locator(ticker.FixedLocator(sizes[:: max(1, len(sizes) // 8)]))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: size_label(v)))
    ax.set_ylim(min(shown) / 1.15, max(shown) * 1.15)
    ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0) if max(shown) / min(shown) > 20 else
                                                 (1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 7.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}×"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.grid(True, which="major", color="0.9")
    ax.set_xlabel("size")
    ax.set_ylabel("NEW / BASE per step (below 1: faster)")
    ax.set_title(f"NEW vs BASE per grid point: {' '.join(shared) or 'each series'}\nthe verdict's ratio and "
                 "its 95% interval (filled: slower, faster or same; hollow: inconclusive)", fontsize="medium")
    if len(lines) > 1:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    figure.tight_layout()
    return figure


def _html(result: dict[str, Any], base: Side, new: Side, plots: list[Path], out: Path) -> str:

    pairs = result["pairs"]
    counts = {v: sum(1 for p in pairs if p["verdict"] == v) for v in VERDICT_ORDER}
    style = {"slower": "bad", "faster": "ok"}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>compare · profiling sweeps</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Comparison</h1><p>BASE <code>{escape(str(base.folder))}</code><br>NEW <code>{escape(str(new.folder))}</code></p>",
        f"<p>{amount(len(pairs), 'pair')}: " + ", ".join(f"<span class='{style.get(v, '')}'>{n} {escape(v)}</span>"
                                               for v, n in counts.items()) + ". Paired by "
        + escape(", ".join(result["columns"])) + ". Verdicts: the ratio NEW/BASE of the medians over repeats "
        "(one process each) of each repeat's median step, with a 95% interval from a hierarchical bootstrap over "
        f"both sides' repeats; <i>same</i> when the 90% interval (two one-sided tests at 5%) lies within "
        f"±{percent(result.get('band', MARGIN))}, <i>slower</i> or <i>faster</i> when the 95% one lies past it; <i>inconclusive</i> "
        "otherwise, or when a side has one repeat or was measured on a loaded machine. False discoveries "
        f"controlled across the grid: Benjamini–Hochberg at {result.get('fdr', FDR):g} over "
        f"{result.get('tested', 0)} pairs.</p>",
    ]
    parts.append("<p>Each pair's <b>Perfetto</b> buttons open its BASE and NEW traces in two tabs of "
                 "<a href='https://ui.perfetto.dev'>ui.perfetto.dev</a>, side by side, when this page is served: "
                 f"<code>python -m analysis serve {escape(str(out))}</code>.</p>")
    if result.get("grid_shift"):
        parts.append(f"<p class='bad'>{escape(result['grid_shift'][0].upper() + result['grid_shift'][1:])}.</p>")
    few = [p for p in pairs if "one process says nothing" in p["verdict_why"]]
    if few:
        parts.append(f"<p class='bad'>{len(few)} pair(s) have one repeat on a side: rerun both sweeps with "
                     f"<code>run.repeats={MORE_REPEATS}</code> or more.</p>")

    def link(side: Side, job: str, mount: str) -> str:
        record = side.jobs.get(job, {})
        trace = (trace_files(record) or [""])[0]
        if not trace:
            return escape(job)
        inside = f"{job}/{trace}" if job != side.folder.name else trace
        target = os.path.relpath(side.folder / inside, out)
        return (f"<a href='{escape(target, quote=True)}'>{escape(job)}</a>"
                + perfetto.button(f"{mount}/{inside}", f"{mount.strip('_')}: {job}", f"{mount.strip('_')} in Perfetto"))

    for title, wanted in (("Regressions (slower)", ("slower",)), ("Improvements (faster)", ("faster",)),
                          ("The rest", ("inconclusive", "same"))):
        chosen = [p for p in pairs if p["verdict"] in wanted]
        if not chosen:
            continue
        parts.append(f"<h2>{escape(title)}</h2>")
        rows = []
        for p in chosen:
            label = point_label({"job": p["new_job"], **p}, without=[k for k in GRID_WORDS if k not in result["columns"]])
            rows.append([escape(label), f"<span class='{style.get(p['verdict'], '')}'>{escape(p['verdict'])}</span>",
                         escape(_rests_on(p)), escape(str(p["verdict_on"])),
                         escape(fmt(p["host_us_per_step_ratio"])), escape(fmt(p["device_us_per_step_ratio"])),
                         escape(fmt(p["host_us_per_step_base"])), escape(fmt(p["host_us_per_step_new"])),
                         escape(p["verdict_why"]), escape(fmt(p["first_call_ms_ratio"])),
                         escape(fmt(p["peak_memory_ratio"])), _most_changed(p),
                         f"{link(base, p['base_job'], SERVED_BASE)} · {link(new, p['new_job'], SERVED_NEW)}"])
        parts.append(table(["grid point", "verdict", "ratio NEW/BASE [95% interval]", "the verdict is on",
                             "profiled host ratio", "device ratio", "host µs base", "host µs new",
                             "why", "first call ratio", "peak memory ratio", "op most changed (self time per step)",
                             "traces (base · new)"],
                            rows, left=2))
        for p in chosen:
            parts.append(_diff_tables(p))
    for side, other, key in (("NEW", "BASE", "failed_new"), ("BASE", "NEW", "failed_base")):
        if result.get(key):
            parts.append(f"<h2>Grid points that failed in {side} (measured in {other})</h2><ul>"
                         + "".join(f"<li>{escape(f['failed_job'])} (measured in {other}: {escape(f['measured_job'])}): "
                                   f"{escape(f['error'])}</li>" for f in result[key]) + "</ul>")
    for side, other, key in (("BASE", "NEW", "unmatched_base"), ("NEW", "BASE", "unmatched_new")):
        if result[key]:
            parts.append(f"<h2>Measured in {side} only (no such grid point in {other})</h2><ul>"
                         + "".join(f"<li>{escape(j)}</li>" for j in result[key]) + "</ul>")
    for side, key in (("BASE", "twice_base"), ("NEW", "twice_new")):
        if result.get(key):
            parts.append(f"<h2>Not judged: a second grid point in {side} that pairs alike</h2><ul>"
                         + "".join(f"<li>{escape(t['job'])}: {escape(t['why'])}</li>" for t in result[key]) + "</ul>")
    for side, key in (("BASE", "incomplete_base"), ("NEW", "incomplete_new")):
        if result.get(key):
            parts.append(f"<h2>{side} is not a whole sweep</h2><p>{escape(result[key])}</p>")
    for side, key in (("BASE", "edited_base"), ("NEW", "edited_new")):
        if result.get(key):
            parts.append(f"<h2>{side}'s tables were edited</h2><p>{escape(result[key])}</p>")
    parts.append("<h2>What differs in the environment</h2>")
    parts.append(table(["", "base", "new"], ([escape(e["key"]), escape(e["base"]), escape(e["new"])]
                                               for e in result["environment"]))
                 if result["environment"] else "<p>Nothing recorded differs.</p>")
    parts.append("<h2>Plots</h2>")
    parts += [image(p) for p in plots]
    parts.append(perfetto.script(str(out)))
    parts.append("</body></html>")
    return "\n".join(parts)


DIFF_ROWS_SHOWN = 25  # per pair and kind in compare.html; ops_diff.csv has them all


def _rests_on(pair: dict[str, Any]) -> str:
    """`2.049× [1.53, 2.75]`: the ratio and interval a pair's verdict rests on."""
    ratio, low, high = pair.get("step_ratio"), pair.get("interval_low"), pair.get("interval_high")
    if ratio is None:
        return ""
    return f"{ratio:.3f}×" + (f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else " (no interval)")


def _most_changed(pair: dict[str, Any]) -> str:
    """The pair table's cell: the op (or, without ops, the kernel) whose time changed most."""
    for what in ("op", "kernel"):
        name = pair.get(f"{what}_most_changed")
        if name:
            return (f"<code title='{escape(name, quote=True)}'>{escape(name[:40])}</code> "
                    f"{escape(us(pair[f'{what}_most_changed_us_per_step_diff'], True))}")
    return ""


def _diff_tables(pair: dict[str, Any]) -> str:
    """A pair's ops (self host time) and kernels (device time) ranked by the change per step."""

    style = {"slower": "bad", "faster": "ok"}
    parts = []
    for what, timed in (("op", "self host time"), ("kernel", "device time")):
        rows = pair[f"{what}s_diff"]
        if not rows:
            continue
        more = len(rows) - DIFF_ROWS_SHOWN
        parts.append(
            f"<details{' open' if pair['verdict'] == 'slower' else ''}><summary>{escape(pair['base_job'])} → "
            f"{escape(pair['new_job'])}: {len(rows)} {what}s by the change in {timed} per step (the biggest change, "
            "slower or faster, first)</summary>" + table(
                ["#", what, "change", "per step base", "per step new", "difference", "ratio", "calls per step base",
                 "calls per step new"],
                ([str(d["rank"]), f"<code>{escape(str(d['name'])[:110])}</code>",
                  f"<span class='{style.get(d['change'], '')}'>{escape(d['change'])}</span>",
                  escape(us(d["self_us_per_step_base"])), escape(us(d["self_us_per_step_new"])),
                  escape(us(d["self_us_per_step_diff"], True)),
                  escape(f"{d['self_us_per_step_ratio']:.2f}×" if d["self_us_per_step_ratio"] is not None else ""),
                  escape(f"{d['calls_per_step_base']:g}"), escape(f"{d['calls_per_step_new']:g}")]
                 for d in rows[:DIFF_ROWS_SHOWN]), left=3)
            + (f"<p>{more} more in ops_diff.csv.</p>" if more > 0 else "") + "</details>")
    return "\n".join(parts)
