"""history.html: the changes first (with both sides' reports and traces), a trend per changed grid
point with what changed at its step, a small-multiples overview of every grid point, the sweeps.

Self-contained (plots embedded); every string from a sweep, a trace or a config is HTML-escaped.
"""

from __future__ import annotations

import base64
import os
from html import escape
from pathlib import Path
from typing import Any

from analysis.text import us
from analysis.files import atomic_write_text
from analysis.html import CSS, table as _table
from profsweep.contract import REPORT_FILE, amount, trace_files
from profsweep.decide import current_band, percent

DIFF_ROWS_SHOWN = 12  # per change and kind; the op diff of a step in full: compare the two sweeps
PLOTS_DIR = "plots"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img alt='{escape(alt, quote=True)}' src='data:image/png;base64,{data}'>"


def _rel(target: Path, out: Path) -> str:
    return os.path.relpath(target, out.resolve())


def _report_link(sweep: dict[str, Any], out: Path) -> str:
    folder = Path(sweep["folder"])
    report = folder / REPORT_FILE
    name = escape(str(sweep["name"]))
    if not report.is_file():
        return f"{name} <small>(no report.html: folder moved or not analysed)</small>"
    return f"<a href='{escape(_rel(report, out), quote=True)}' title='{escape(str(folder), quote=True)}'>{name}</a>"


def _trace_links(sweep: dict[str, Any], point: Any, out: Path) -> str:
    folder = Path(sweep["folder"])
    links = []
    for rep in point.repeats:
        traces = trace_files(rep)
        if not traces:
            continue
        trace = traces[0]
        job = str(rep["job"])
        path = folder / trace if job == folder.name else folder / job / trace
        if path.is_file():
            links.append(f"<a href='{escape(_rel(path, out), quote=True)}' title='{escape(job, quote=True)}'>"
                         f"r{len(links) + 1}</a>")
    return " ".join(links) or "<small>none on disk</small>"


def _interval(r: dict[str, Any]) -> str:
    if r["ratio_low"] is None:
        return f"{r['ratio']:.2f}×"
    return f"{r['ratio']:.2f}× <small>[{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]</small>"


STYLE = {"regression": "bad", "improvement": "ok", "unconfirmed": ""}


def write_page(history: Any, data: Any, out: Path) -> Path:
    """Plots into out/plots/, the page into out/history.html; `data`: trends.csv's rows."""
    out = Path(out)
    names = [str(s["name"]) for s in history.sweeps]
    marks = _marks(history)
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>history · profiling sweeps</title>",
             f"<style>{CSS}</style></head><body>"]
    parts += _intro(history, out)
    parts += _changes_table(history, out)
    parts += _change_sections(history, data, out, marks, names)
    parts += _overview(history, data, out, marks, names)
    parts += _sweeps_table(history, out)
    parts.append("</body></html>")
    page = out / "history.html"
    atomic_write_text(page, "\n".join(parts))
    return page


def _marks(history: Any) -> dict[str, list[dict[str, Any]]]:
    """Per grid point, where its trend plot marks a change: between the two sweeps of the step."""
    marks: dict[str, list[dict[str, Any]]] = {}
    for r in history.changes:
        line, shift = r["_line"], r["_shift"]
        x = (line.points[shift.at - 1].sweep + line.points[shift.at].sweep) / 2
        head = r["what_changed"].split(": ", 1)[0]
        marks.setdefault(line.label, []).append({"x": x, "status": r["status"], "ratio": r["ratio"],
                                                 "words": "" if head == "the same environment" else head})
    return marks


def _intro(history: Any, out: Path) -> list[str]:
    counts = {s: sum(1 for r in history.changes if r["status"] == s) for s in STYLE}
    s0, s1 = history.sweeps[0], history.sweeps[-1]
    return [
        f"<h1>History of {amount(len(history.sweeps), 'sweep')}</h1>",
        f"<p>From {escape(str(s0['started_at']))[:19]} to {escape(str(s1['started_at']))[:19]} (UTC, by start time), "
        f"{amount(len(history.lines), 'grid point')} paired by {escape(', '.join(history.columns))}"
        + (f", ignoring {escape(', '.join(history.ignored))}" if history.ignored else "")
        + f". Store: <code>{escape(str(out / 'history.duckdb'))}</code> "
        "(<code>python -m analysis sql</code> asks it anything).</p>",
        f"<p><span class='bad'>{counts['regression']} regression(s)</span>, <span class='ok'>{counts['improvement']} "
        f"improvement(s)</span>, {counts['unconfirmed']} unconfirmed. A change is a step of at least "
        f"{percent(current_band())} in a grid point's level (each sweep: the geometric mean of its repeats' median "
        "steps, the noise from its repeats and from how far the sweeps scatter around their level), found by "
        "circular binary segmentation (a step, or a level that came and went), placed at the first sweep of the "
        "new level, confirmed when the two sweeps from it on agree "
        "(a change in the last sweep alone is <i>unconfirmed</i>); false discoveries controlled across the grid: "
        f"Benjamini–Hochberg at 0.05 over {history.tested} tests.</p>",
    ]


def _changes_table(history: Any, out: Path) -> list[str]:
    parts = ["<h2 id='changes'>Changes</h2>"]
    untested = sum(1 for ln in history.lines if ln.series is not None and not ln.tested)
    if untested:
        parts.append(f"<p>Not testable at {amount(untested, 'grid point')}: one process a sweep says nothing of the "
                     "variation between processes (<code>run.repeats=3</code> or more).</p>")
    if not history.changes:
        return parts + ["<p>No change found" + (" where one could be tested" if untested else "") + ".</p>"]
    rows = []
    for n, r in enumerate(history.changes, 1):
        line, shift = r["_line"], r["_shift"]
        before, after = line.points[shift.at - 1], line.points[shift.at]
        sb, sa = history.sweeps[before.sweep], history.sweeps[after.sweep]
        rows.append([
            f"<a href='#change-{n}'>{escape(r['point'])}</a>",
            f"<span class='{STYLE[r['status']]}'>{escape(r['status'])}</span>",
            _report_link(sa, out), _report_link(sb, out), escape(r["what_changed"]), _interval(r),
            f"{escape(us(r['before_us']))} → {escape(us(r['after_us']))}",
            f"{_trace_links(sb, before, out)} · {_trace_links(sa, after, out)}"])
    return parts + [
        _table(["grid point", "status", "change at (report)", "sweep before (report)", "what changed at the step",
                "ratio [95%]", "level", "traces (before · after)"], rows, left=5),
        "<p>Traces open in <a href='https://ui.perfetto.dev'>ui.perfetto.dev</a> (drop the file there), "
        "or with one click from a sweep's own report served by <code>python -m analysis serve "
        "SWEEP</code>; <code>python -m analysis compare BEFORE AFTER</code> gives the step's full "
        "comparison.</p>"]


def _change_sections(history: Any, data: Any, out: Path, marks: dict[str, list[dict[str, Any]]],
                     names: list[str]) -> list[str]:
    """Per change: its trend plot, what changed at the step and the diff behind it."""
    import pandas as pd

    from analysis.history.plots import trend_plot

    parts = []
    for n, r in enumerate(history.changes, 1):
        line = r["_line"]
        repeats = pd.DataFrame([{"order": p.sweep, "value_us": v} for p in line.points for v in line.values(p)],
                               columns=["order", "value_us"])
        at = history.sweeps[line.points[r["_shift"].at].sweep]["name"]
        what = "un-profiled step" if line.metric == "timed_us_per_step" else "host self time per profiled step"
        png = trend_plot(data[data["point"] == line.label], repeats,
                         f"{line.label}: {r['_shift'].status} {r['ratio']:.2f}× at {at} ({what})",
                         marks.get(line.label, []), names, out / PLOTS_DIR / f"change-{n}.png")
        parts.append(f"<h3 id='change-{n}'>{n}. {escape(r['point'])}: <span class='{STYLE[r['status']]}'>"
                     f"{escape(r['status'])}</span> {_interval(r)}</h3>")
        parts.append(f"<p>{escape(r['what_changed'])}"
                     + (f" <span class='bad'>Noise: {escape(r['noise'])}.</span>" if r["noise"] else "") + "</p>")
        parts.append(_img(png, f"trend of {line.label}"))
        parts.append(_diff_details(r))
    return parts


def _overview(history: Any, data: Any, out: Path, marks: dict[str, list[dict[str, Any]]],
              names: list[str]) -> list[str]:
    from analysis.history.plots import overview_plot

    parts = []
    if not data.empty:
        shown = data["point"].nunique()
        png = overview_plot(data, marks, names, out / PLOTS_DIR / "overview.png")
        parts += ["<h2 id='overview'>Every grid point</h2>",
                  f"<p>{amount(shown, 'grid point')} measured in two sweeps or more, changed ones first (their titles in "
                  "colour, the change marked)"
                  + (f"; the first {min(shown, 120)} shown, all in trends.csv" if shown > 120 else "") + ".</p>",
                  _img(png, "every grid point over the sweeps")]
    once = [ln.label for ln in history.lines if len(ln.points) < 2]
    if once:
        parts.append(f"<h3>Measured in one sweep only ({len(once)})</h3><p>" + escape(", ".join(once[:200]))
                     + (" …" if len(once) > 200 else "") + "</p>")
    return parts


def _sweeps_table(history: Any, out: Path) -> list[str]:
    return ["<h2 id='sweeps'>Sweeps</h2>",
            _table(["#", "sweep (report)", "started (UTC)", "torch", "commit", "host", "grid points", "jobs",
                    "failed"],
                   ([str(i), _report_link(s, out), escape(str(s["started_at"])[:19]),
                     escape(str(s.get("torch_version") or "")), escape(str(s.get("git_commit") or "")[:10]),
                     escape(str(s.get("hostname") or "")), str(s.get("grid_points") or 0), str(s.get("jobs") or 0),
                     f"<span class='bad'>{s['jobs_failed']}</span>" if s.get("jobs_failed") else "0"]
                    for i, s in enumerate(history.sweeps, 1)), left=2)]


def _diff_details(r: dict[str, Any]) -> str:
    """The step's environment, ignored settings, ops and kernels that changed."""
    parts = []
    if r["_environment"] or r["_settings"]:
        parts.append(_table(["", "before", "after"],
                            [[escape(k), escape(str(a)), escape(str(b))] for k, a, b in r["_environment"]]
                            + [[escape(k), escape(str(a)), escape(str(b))] for k, a, b in r["_settings"]], left=3))
    for kind, timed in (("ops", "self host time"), ("kernels", "device time")):
        rows = r["_ops"].get(kind) or []
        if not rows:
            continue
        parts.append(f"<p>{len(rows)} {kind} by the change in {timed} per profiled step (the biggest first):</p>")
        parts.append(_table(["#", kind[:-1], "change", "before", "after", "ratio", "calls per step"],
                            ([str(d["rank"]), f"<code>{escape(str(d['name'])[:110])}</code>", escape(d["change"]),
                              escape(us(d["self_us_per_step_base"])), escape(us(d["self_us_per_step_new"])),
                              escape(f"{d['self_us_per_step_ratio']:.2f}×" if d["self_us_per_step_ratio"] else ""),
                              escape(f"{d['calls_per_step_base']:g} → {d['calls_per_step_new']:g}")]
                             for d in rows[:DIFF_ROWS_SHOWN]), left=3))
    if not parts:
        return ""
    return ("<details open><summary>what changed at the step (environment, ignored settings, ops and kernels)"
            "</summary>" + "".join(parts) + "</details>")

