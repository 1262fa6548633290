"""report.html: one self-contained page (plots embedded) that a browser opens with no server.

Every string that comes from a trace, a config or an error is HTML-escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Callable

from analysis import perfetto
from analysis.html import CSS, image, table
from analysis.report.conclusions import Conclusion, job_warnings
from analysis.text import count, fmt, nbytes, too_wide, us
from profsweep import stats
from profsweep.contract import COPY, METRICS_FILE, REPORT_FILE, read_plan, amount, flag, table_files, trace_files
from analysis.files import atomic_write_text
from analysis.tables import SweepTables

SUMMARY_COLUMNS = [  # the summary table on the page; every column is in summary.csv
    ("point", "grid point"), ("repeats", "repeats"), ("noisy", "noisy"),
    ("timed_us_per_step", "un-profiled µs/step"), ("host_us_per_step", "host µs/step"),
    ("device_us_per_step", "device µs/step"), ("compute_us_per_step", "compute µs/step (CPU)"),
    ("overhead_us_per_step", "overhead µs/step (CPU)"), ("work_host_ratio", "work / host"),
    ("regime", "regime (by time)"), ("first_call_ms", "first call ms"), ("peak_memory_bytes", "peak memory"),
]
DETAIL_COLUMNS = [  # behind a toggle: the rest of what a grid point measured
    ("job", "first job"), ("status", "status"), ("profiler_overhead_ratio", "profiled / un-profiled"),
    ("step_aten_ops_median", "aten ops/step"), ("step_kernels_median", "kernels/step"),
    ("step_launches_median", "launches/step"), ("step_gpu_busy_median", "GPU busy"),
    ("dead_window_us", "dead window µs"), ("achieved_flops_per_s", "achieved FLOP/s"),
    ("arithmetic_intensity", "FLOP/byte"), ("flops_source", "FLOPs from"), ("top_kernel", "top kernel (CPU: compute op)"),
]
GPU_ONLY = {"device_us_per_step", "step_kernels_median", "step_launches_median", "step_gpu_busy_median"}
CPU_ONLY = {"compute_us_per_step", "overhead_us_per_step"}
PHASE_NAMES = ("forward", "backward", "optimizer")


def _trace_sizes(jobs: list[dict[str, Any]]) -> str:
    """`Traces: 12 files, 3.24 MiB in all (largest 1.05 MiB, 0_...)`, and how to make them smaller."""
    sized = [(j["trace_bytes"], str(j["job"])) for j in jobs if isinstance(j.get("trace_bytes"), (int, float))
             and j["trace_bytes"] == j["trace_bytes"]]
    files = sum(len(trace_files(j)) for j in jobs
                if isinstance(j.get("trace_bytes"), (int, float)))
    if not sized:
        return "Traces: none written."
    total = sum(b for b, _ in sized)
    largest, name = max(sized)
    gzipped = all(str(j.get("trace_file") or "").endswith(".gz") for j in jobs if j.get("trace_file"))
    hint = "" if gzipped else " <code>profiler.gzip=true</code> writes them as <code>.json.gz</code>, several times smaller."
    return (f"Traces: {amount(files, 'file')}, {nbytes(total)} in all "
            f"(largest {nbytes(largest)}, {escape(name)}).{hint}")


def _value(row: dict[str, Any], key: str) -> str:
    """A cell: the value, and its 95% interval over the repeats where it has one ("86.4 [52.1,
    385.9]"); the noise flag as a marked cell saying why."""
    if key == "noisy":
        if row.get("noisy") is True:
            return f"<span class='bad' title='{escape(str(row.get('noise_reason')), quote=True)}'>noisy</span>"
        return "" if row.get("noisy") is None else "no"
    text = escape(fmt(row.get(key)))
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    if text and fmt(low) and fmt(high) and (row.get("repeats") or 0) > 1:
        if too_wide(low, high):
            text += " <small>[too wide to read]</small>"
        else:
            text += f" <small>[{escape(fmt(low))}, {escape(fmt(high))}]</small>"
    return text


def _noise(points: list[dict[str, Any]]) -> list[str]:
    """Which grid points are noisy and why, and what a single repeat does not say."""
    from analysis.points import noise_lines

    noisy = [p for p in points if p.get("noisy") is True]
    lines = noise_lines(points)
    if not lines:
        return []
    out = [f"<h2 id='noise' class='bad'>Noise: {len(noisy)} of "
           f"{amount(len([p for p in points if p.get('noisy') is not None]), 'grid point')}</h2>" if noisy
           else "<h2 id='noise'>Noise</h2>"]
    out += [f"<p>{escape(line)}</p>" for line in lines]
    if noisy:
        out.append("<ul>" + "".join(f"<li><b>{escape(p.label())}</b>: {escape(str(p.get('noise_reason')))}</li>"
                                    for p in noisy) + "</ul>")
        out.append("<p>Their figures are marked <span class='bad'>noisy</span> below and drawn hollow in the "
                   "plots: do not read a conclusion from them.</p>")
    return out


def _link(folder: Path, job: str, name: str, base: str = "") -> str:
    """A link to a job's file; `base`: the sweep folder as seen from the report's folder."""
    target = f"{job}/{name}" if job != folder.name else name
    return f'<a href="{escape(base + target, quote=True)}">{escape(name)}</a>'


def _training_phases(jobs: list[dict[str, Any]]) -> list[str]:
    """Training grid points: host and device time of each phase of the step (medians over steps,
    then over repeats, with their intervals)."""
    trained = [j for j in jobs if j.get("step_forward_host_us_median") is not None]
    if not trained:
        return []
    header = ["job", "size", "mode"]
    keys = []
    for phase in PHASE_NAMES:
        header += [f"{phase} host µs", f"{phase} device µs" if any(
            j.get(f"step_{phase}_device_us_median") is not None for j in trained) else f"{phase} compute µs (CPU)"]
        keys += [f"step_{phase}_host_us_median", f"step_{phase}_device_us_median"
                 if any(j.get(f"step_{phase}_device_us_median") is not None for j in trained)
                 else f"step_{phase}_compute_us_median"]
    rows = ([escape(str(j["job"])), escape(fmt(j.get("size"))), escape("compile" if j.get("compile") else "eager")]
            + [_value(j, k) for k in keys] for j in trained)
    return ["<h2 id='training'>Training steps: time per phase</h2><p>Medians over the profiled steps. Host: the "
            "phase's <code>record_function</code> span; device (CPU: compute) time counts the work that "
            "starts inside the phase on any thread, autograd's own included.</p>", table(header, rows, left=3)]


def _expectations(expectations: Any) -> list[str]:
    """What the person expected, mismatches first: the findings."""
    wrong = expectations[expectations["holds"] == "false"]
    held = expectations[expectations["holds"] == "true"]
    unsure = expectations[expectations["holds"] == "inconclusive"]
    rest = expectations[~expectations["holds"].isin(["true", "false"])]
    unjudged = len(rest) - len(unsure)
    if len(wrong):
        title = f"<h2 id='expectations' class='bad'>Expectations: {amount(len(wrong), 'mismatch')}</h2>"
    elif len(unsure):
        title = f"<h2 id='expectations'>Expectations: {len(unsure)} inconclusive</h2>"
    elif len(held) and not unjudged:
        title = "<h2 id='expectations' class='ok'>Expectations: all hold</h2>"
    elif len(held):
        title = f"<h2 id='expectations'>Expectations: {len(held)} hold, {unjudged} could not be judged</h2>"
    else:
        title = "<h2 id='expectations'>Expectations: none could be judged</h2>"
    verdict = {"true": "<span class='ok'>holds</span>", "false": "<span class='bad'>does not hold</span>",
               "inconclusive": "<span class='noisy'>inconclusive: the interval straddles the value</span>"}
    rows = ([escape(str(r["expectation"])), escape(str(r["job"])), escape(str(r["expected"])),
             escape(str(r["measured"])), verdict.get(str(r["holds"]), escape(str(r["holds"])))]
            for frame in (wrong, held, rest) for _, r in frame.iterrows())
    why = ("" if not unjudged else " The ones that could not be judged say why in the “measured” column "
           "(a value the sweep has no job or column for).")
    return [title, f"<p>{len(held)} of {len(expectations)} checks hold (<code>expectations.csv</code>); "
            f"a mismatch is the finding: look at that job's trace.{why}</p>",
            table(["expectation", "job", "expected", "measured", "verdict"], rows, left=2)]


def _conclusions(found: list[Conclusion], plots: set[str]) -> list[str]:
    """The sweep's conclusions, first on the page, each with a link to what shows it."""
    if not found:
        return ["<section id='conclusions'><h2>Conclusions</h2><p>None: no grid point finished with a readable "
                "trace (see Problems below).</p></section>"]
    names = {"summary": "summary", "fusion": "what compile fused", "crossovers": "crossovers",
             "where-the-time-goes": "where the time goes", "training": "training phases", "noise": "noise", "article-check": "article check",
             "expectations": "expectations", "warnings": "warnings"}
    items = []
    for c in found:
        link = c.link if not c.link.startswith("plot-") or c.link[5:] in plots else "summary"
        label = names.get(link, f"{link[5:]}.png" if link.startswith("plot-") else link)
        items.append(f"<li>{escape(c.full)} <a href='#{escape(link, quote=True)}'>→ {escape(label)}</a></li>")
    return ["<section id='conclusions'><h2>Conclusions</h2><ul>" + "".join(items) + "</ul></section>"]


def _where_time_goes(top: Any) -> list[str]:
    """Per grid point its top ops by host self time and its top kernels by device time (on the CPU:
    compute ops), each with its share of the step (top_ops.csv has ten of each)."""
    if top is None or not len(top):
        return []
    kinds = list(dict.fromkeys(top["kind"]))
    rows = []
    for _, found in top.groupby("job" if "job" in top else "point", sort=False):
        row = [escape(str(found["point"].iloc[0]))]
        for kind in kinds:
            first = found[found["kind"] == kind].sort_values("rank").head(3)
            row.append("<br>".join(f"{escape(str(r['name'])[:60])} <b>{r['share'] * 100:.0f}%</b> "
                                   f"<small>{escape(us(r['us_per_step']))}, {count(r['calls_per_step'])} calls/step</small>"
                                   for _, r in first.iterrows()))
        rows.append(row)
    header = ["grid point"] + [f"top {k}s (share of the step, time and calls per step)" for k in kinds]
    return ["<h2 id='where-the-time-goes'>Where the time goes</h2><p>Per grid point: the ops by host self "
            "time, and the kernels by device time (on the CPU: the compute ops by their time), each as a share "
            "of the step's total of its kind; medians over the repeats. Ten of each in "
            "<code>top_ops.csv</code>.</p>", table(header, rows, left=len(header))]


def _columns(points: list[dict[str, Any]], columns: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The columns that mean something on the devices of these grid points: no kernels, launches or
    GPU busy for a CPU-only sweep, no CPU compute/overhead split for a GPU-only one."""
    gpu = [p.get("platform") not in (None, "cpu") for p in points if p.get("platform") is not None]
    leave = (GPU_ONLY if not any(gpu) else set()) | (CPU_ONLY if gpu and all(gpu) else set())
    return [(k, label) for k, label in columns if k not in leave]


def _cell(point: dict[str, Any], key: str) -> str:
    if key == "point":
        return escape(point.label())
    if key == "status":
        return f"<span class='{'ok' if point.get('status') == 'ok' else 'bad'}'>{escape(fmt(point.get(key)))}</span>"
    if key == "peak_memory_bytes":
        value = stats.number(point.get(key))
        return escape(nbytes(value)) if value is not None else ""
    if key == "regime" and point.get("regime") and (flag(point.get("regime_uncertain"))
                                                     or flag(point.get("regime_at_ridge"))):
        word = ", ".join(w for w, on in (("uncertain", flag(point.get("regime_uncertain"))),
                                         ("at the roofline's ridge", flag(point.get("regime_at_ridge")))) if on)
        return f"{escape(str(point['regime']))} <small class='noisy'>{word}</small>"
    return _value(point, key)


@dataclass
class Page:
    """What the report's sections read: the sweep's tables, built once, and where the page goes."""

    tables: SweepTables
    plots: list[Path]
    data: dict[str, Any]
    claims: Any
    expectations: Any
    conclusions: list[Conclusion]
    out: Path
    base: str  # the sweep folder as seen from the page's folder ('' when they are one)
    plan: dict[str, Any]
    short: list[str] = field(default_factory=list)  # the short answer (conclusions.in_short)

    @property
    def folder(self) -> Path:
        return self.tables.folder


def write_report(tables: SweepTables, plots: list[Path], data: dict[str, Any], claims: Any,
                 expectations: Any = None, out: Path | None = None,
                 conclusions: list[Conclusion] | None = None, short: list[str] | None = None) -> Path:
    """report.html in `out` (default: the sweep folder), its links to the jobs' files relative to
    it: the SECTIONS in order, conclusions first."""
    import os

    folder = tables.folder
    out = Path(out) if out is not None else folder
    base = "" if out.resolve() == folder.resolve() else os.path.relpath(folder.resolve(), out.resolve()) + "/"
    page = Page(tables, plots, data, claims, expectations, conclusions or [], out, base, read_plan(folder),
                short or [])
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(folder.name)} · profiling sweep"
             f"</title><style>{CSS}</style></head><body>"]
    for section in SECTIONS:
        parts += section(page)
    parts += [perfetto.script(str(folder)), "</body></html>"]
    path = out / REPORT_FILE
    atomic_write_text(path, "\n".join(parts))
    return path


def _header(page: Page) -> list[str]:
    jobs, points = page.tables.jobs, page.tables.points
    ok = sum(1 for j in jobs if j.usable)  # finished, and its trace read
    skipped = sum(1 for j in jobs if j.get("status") == "skipped")
    copies = sum(1 for j in jobs if j.get("status") == COPY)
    text = (f"{amount(len(jobs) - copies, 'job')}: {ok} ok, {len(jobs) - ok - skipped - copies} failed"
            + (f", {skipped} skipped" if skipped else "")
            + (f" (and {amount(copies, 'job folder')} copied from another's, not counted)" if copies else ""))
    if len(points) != len(jobs):
        most = max((int(p.get('repeats') or 0) for p in points), default=0)
        text += (f", measuring {amount(len(points), 'grid point')}"
                 + (f" (each in up to {most} processes: repeats)" if most else " (none measured)"))
    command = page.plan.get("command")
    said = f" Command: <code>python {escape(' '.join(map(str, command)))}</code>" if isinstance(command, list) else ""
    return [f"<h1>Profiling sweep <code>{escape(str(page.folder))}</code></h1>", f"<p>{escape(text)}.{said}</p>"]


def _conclusions_section(page: Page) -> list[str]:
    short = (["<section id='in-short'><h2>In short</h2><ul>" + "".join(f"<li><b>{escape(line)}</b></li>"
                                                                       for line in page.short) + "</ul></section>"]
             if page.short else [])
    return short + _conclusions(page.conclusions, {p.stem for p in page.plots})


def _noise_section(page: Page) -> list[str]:
    return _noise(page.tables.points)


def _expectations_section(page: Page) -> list[str]:
    """The person's own expectations, when the sweep has any (a preset's claims are the article
    check's, not these)."""
    return _expectations(page.expectations) if page.expectations is not None and len(page.expectations) else []


def _environment(page: Page) -> list[str]:
    jobs = page.tables.jobs
    first = next((j for j in jobs if j.get("status") == "ok"), jobs[0] if jobs else {})
    rows = [(escape(key), escape(fmt(first.get(key))))
            for key in ("device_name", "device", "torch_version", "cuda_version", "python_version",
                        "hostname", "git_commit", "git_dirty")]
    return ["<h2>Environment</h2>", table(["", "value"], rows)]


def _left_out(page: Page) -> list[str]:
    left_out = [j for j in page.tables.jobs if j.get("status") == "skipped"]
    if not left_out:
        return []
    return ([f"<h2>Left out on this machine</h2><p>{amount(len(left_out), 'job')} "
             "not run (<code>run.unavailable=skip</code>):</p><ul>"]
            + [f"<li><b>{escape(str(j['job']))}</b>: {escape(str(j.get('error')))}</li>" for j in left_out]
            + ["</ul>"])


def _warnings(page: Page) -> list[str]:
    warned = [(str(j["job"]), job_warnings(j)) for j in page.tables.jobs]
    warned = [(name, found) for name, found in warned if found]
    if not warned:
        return []
    return (["<h2 id='warnings' class='bad'>Warnings: jobs that ran other than asked</h2><ul>"]
            + [f"<li class='bad'><b>{escape(name)}</b>: {escape('; '.join(found))}</li>" for name, found in warned]
            + ["</ul>"])


def _problems(page: Page) -> list[str]:
    problems = page.tables.problems
    if not problems:
        return []
    return (["<h2 class='bad'>Problems</h2><ul>"]
            + [f"<li class='bad'><b>{escape(job)}</b>: {escape(what)}</li>" for job, what in problems] + ["</ul>"])


def _crossovers(page: Page) -> list[str]:
    return ["<h2 id='crossovers'>Crossovers</h2><p>Per series over size: where device time overtakes host time "
            "(on the CPU: compute overtakes framework overhead), interpolated on log axes between the "
            "medians over repeats of work / host within each step; uncertain where that ratio's interval "
            "holds 1 at a size that brackets it. Without the profiler: the same with the host (overhead) time "
            "less what the profiler added to a step (the profiled step less the un-profiled one).</p>",
            table(["workload", "dtype", "compile", "warmup", "device", "sizes", "crossover size", "status",
                    "without the profiler", "status"],
                   ([escape(fmt(c[k])) for k in ("variant", "dtype", "compile", "warmup", "device", "sizes")]
                    + [escape(fmt(c["crossover_size"])), escape(c["status"]),
                       escape(fmt(c.get("crossover_size_unprofiled"))), escape(str(c.get("status_unprofiled") or ""))]
                    for c in page.tables.crossovers), left=5)]


def _where_time_goes_section(page: Page) -> list[str]:
    return _where_time_goes(page.data.get("top_ops"))


def _fusion_section(page: Page) -> list[str]:
    """What compile fused: per compiled grid point each generated kernel, the eager ops it covers
    and their time per step in the paired eager grid point against the kernel's (fusion.csv)."""
    fusion = page.data.get("fusion")
    if fusion is None or not len(fusion):
        return []
    def words(value: Any) -> str:  # a cell pandas read as NaN (an empty one) is empty, not "nan"
        return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)

    rows = ([escape(str(r["point"])), escape(str(r["kernel"])), escape(words(r["eager_ops"])),
             escape(us(stats.number(r["eager_us_per_step"])) if stats.number(r["eager_us_per_step"]) is not None
                    else "no eager point"),
             escape(us(stats.number(r["compiled_us_per_step"]))), escape(words(r["unmatched"]))]
            for _, r in fusion.iterrows())
    return ["<h2 id='fusion'>What compile fused</h2><p>Each kernel Inductor generated for a compiled grid point, "
            "the eager aten ops its name says it covers (matched against the ops the paired eager grid point ran) "
            "and what they took there per step, against the kernel's time per step (medians over the repeats; on "
            "the CPU self host time, on a GPU device time). <code>fusion.csv</code> has every row.</p>",
            table(["grid point", "kernel", "eager ops covered", "eager per step", "compiled per step",
                   "words no eager op has"], rows, left=3)]


def _training_section(page: Page) -> list[str]:
    return _training_phases(page.tables.points)


def _article_section(page: Page) -> list[str]:
    from analysis.report.claims import article_section

    return article_section(page.folder, page.data, page.claims) if len(page.claims) else []


def _plots(page: Page) -> list[str]:
    return ["<h2>Plots</h2>", *([image(p) for p in page.plots]
                                or ["<p>No plots: no job finished with a readable trace.</p>"])]


def _allocator_note(jobs: Any) -> list[str]:
    """How the un-profiled steps were timed where the jobs held glibc's allocator thresholds, and
    what a plain process of the same code does otherwise."""
    steady = sum(1 for j in jobs if j.get("allocator") == "steady")
    fixed = sum(1 for j in jobs if j.get("allocator") == "fixed")
    said = []
    if steady:
        said.append(f"<p>The un-profiled steps of {amount(steady, 'job')} were timed with glibc's allocator "
                    "thresholds held where a long-running plain process's settle (<code>run.allocator=steady</code>: "
                    "32 MiB, 64 MiB): buffers below 32 MiB that a step frees stay in the heap for the next one in "
                    "every process, larger ones are mapped and faulted in on every step as in any plain process. "
                    "Without them, whether a process keeps its smaller buffers depends on its heap's layout "
                    "(matmul_add 1024 eager: 1.5 ms in some processes, 2.6–2.9 ms in others; docs/numbers.md, "
                    "'The allocator'); <code>run.allocator=system</code> times it that way.</p>")
    if fixed:
        said.append(f"<p>The un-profiled steps of {amount(fixed, 'job')} were timed with "
                    "<code>run.allocator=fixed</code> (256 MiB, 512 MiB): buffers of 32 MiB or more stay in the "
                    "heap too, which no plain process keeps, so a step that frees and allocates them is faster "
                    "here than in your own script (matmul_add 4096 bf16: 47–48 ms against 64–71 ms; "
                    "docs/numbers.md, 'The allocator').</p>")
    return said


def _summary(page: Page) -> list[str]:
    points = page.tables.points
    shown, detail = _columns(points, SUMMARY_COLUMNS), _columns(points, DETAIL_COLUMNS)
    return ["<h2 id='summary'>Summary</h2><p>One row per grid point: the median over its repeats (each "
            "repeat's median step) with a 95% interval from a hierarchical bootstrap in brackets; the regime "
            "by measured time within a step (work / host: device or compute time against host or framework "
            "overhead). Columns that mean nothing on this sweep's devices are left out here; all columns are in "
            "<code>summary.csv</code> (<code>summary.parquet</code>); one row per job in "
            "<code>repeats.csv</code>, per-step values in <code>steps.csv</code>, per-kernel statistics in "
            "<code>kernels.csv</code>.</p>", *_allocator_note(page.tables.jobs),
            table([label for _, label in shown], ([_cell(p, k) for k, _ in shown] for p in points)),
            "<details><summary>More columns</summary>" + table(
                ["grid point"] + [label for _, label in detail],
                ([escape(p.label())] + [_cell(p, k) for k, _ in detail] for p in points)) + "</details>"]


def _jobs(page: Page) -> list[str]:
    folder = page.folder
    parts = ["<h2>Jobs</h2><p>The <b>Perfetto</b> button opens a trace in "
             "<a href='https://ui.perfetto.dev'>ui.perfetto.dev</a> when this page is served "
             f"(<code>python -m analysis serve {escape(str(folder))}</code>); or open the file there "
             "(“Open trace file”) or in <code>chrome://tracing</code>. The table next to it is "
             "torch's <code>key_averages().table()</code>.</p>", f"<p>{_trace_sizes(page.tables.jobs)}</p>"]
    for j in page.tables.jobs:
        name = str(j["job"])
        traces = trace_files(j)
        files = traces + table_files(j)
        links = " · ".join(_link(folder, name, n, page.base) for n in files + [METRICS_FILE])
        links += "".join(perfetto.button(f"{name}/{n}" if name != folder.name else n, f"{name} {n}") for n in traces)
        parts.append(f"<details><summary><b>{escape(name)}</b> ({escape(str(j.get('status')))}) {links}</summary>"
                     f"{_job_detail(page, j)}</details>")
    return parts


def _job_detail(page: Page, j: dict[str, Any]) -> str:
    """A job's error, its top kernels (on a GPU) and its top ops."""
    name = str(j["job"])
    extra = ""
    if j.get("error"):
        extra += f"<p class='bad'>{escape(str(j['error']))}</p>"
        if j.get("stderr_tail"):
            extra += f"<pre>{escape(str(j['stderr_tail']))}</pre>"
    if j.get("trace_error"):
        extra += f"<p class='bad'>{escape(str(j['trace_error']))}</p>"
    kernels = [k for k in page.tables.kernels if k["job"] == name][:10] if j.get("platform") not in (None, "cpu") else []
    if kernels:
        cores = {True: "tensor cores", False: "CUDA cores"}
        extra += table(
            ["kernel", "calls", "median µs", "tensor cores (from the name)", "est. occupancy %",
             "registers/thread", "shared memory B", "block"],
            ([escape(str(k["name"])[:110]), escape(fmt(k["calls"])), escape(fmt(k["median_us"])),
              escape(cores.get(k.get("tensor_cores"), "unknown")), escape(fmt(k.get("occupancy_pct"))),
              escape(fmt(k.get("registers_per_thread"))), escape(fmt(k.get("shared_memory_bytes"))),
              escape(fmt(k.get("block")))] for k in kernels),
        )
    ops = page.tables.ops.get(name, [])[:15]
    if ops:
        extra += table(["op", "calls", "self host µs", "self device µs"],
                        ([escape(o["name"]), escape(fmt(o["calls"])), escape(fmt(o["self_host_us"])),
                          escape(fmt(o["self_device_us"]))] for o in ops))
    return extra


# The page, top to bottom: what the sweep shows first, then what to distrust, then the evidence.
SECTIONS: list[Callable[[Page], list[str]]] = [
    _header, _conclusions_section, _noise_section, _expectations_section, _environment, _left_out, _warnings,
    _problems, _crossovers, _where_time_goes_section, _fusion_section, _training_section, _article_section, _plots, _summary,
    _jobs,
]
