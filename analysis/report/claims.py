"""The claims of the "Profiling in PyTorch" series, checked against this sweep's data.

Each claim becomes one row of claims.csv: what the article says (with its A100 number where it
gives one), what this run measured, and whether the claim holds here: true, false, or n/a with
the reason (a CUDA-only claim on a CPU run, a sweep that lacks the jobs to test it), or
inconclusive where it compares numbers measured over repeats whose intervals overlap.

The claims about single jobs and series are data: `claim ...` entries of the presets' `expect`
(conf/experiment/part*.yaml; the form is analysis/report/expect.py's), judged by the expectation
machinery. They apply to every sweep that runs the preset's workloads, with or without the
preset; a sweep's own expect.json (what it composed) replaces a preset's claims of that part.
The comparisons across jobs (cold vs warm, eager vs compiled, one backend against another, the
crossover of a series) stay code: the functions below.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import points as grid_points
from analysis.text import fmt
from analysis.report.expect import CUDA_ONLY, EXPECT_FILE, INCONCLUSIVE, ClaimSpec, ExpectationError, judge, parse_claims
from analysis.html import pre_pair, read_text, table
from profsweep.contract import TIMED, GridPoint, flag, point_jobs, read_json, table_files, timed_samples, trace_files, usable_rows
from profsweep import stats
from profsweep.decide import ABOVE, BELOW, SAME, Decision, decide, decide_test

PRESETS = Path(__file__).resolve().parents[2] / "conf" / "experiment"
PARTS = ("part1", "part2", "part3")


@dataclass(frozen=True)
class Claim:
    part: str
    claim: str
    expected: str  # the article's statement and number (A100, bf16)
    measured: str
    holds: str  # "true" | "false" | "inconclusive" (intervals overlap) | "n/a"
    jobs: str = ""  # the jobs the measurement comes from


def _na(part: str, claim: str, expected: str, why: str) -> Claim:
    return Claim(part, claim, expected, why, "n/a")


def _verdict(ok: bool) -> str:
    return "true" if ok else "false"


def _interval(row: pd.Series, key: str) -> tuple[float, float] | None:
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return None
    return float(low), float(high)


def _more(d: "_Data", a: pd.Series, b: pd.Series, key: str) -> str:
    """Whether `a`'s `key` is larger than `b`'s, by the one rule (profsweep.decide) on the ratio
    a / b over their processes: "true" past +5%, "false" below -5% or within the band,
    inconclusive otherwise (or with one process a side)."""
    return _holds(_ratio(d, b, a, key))


def _ratio(d: "_Data", base: pd.Series, new: pd.Series, key: str) -> Decision:
    """NEW / BASE of `key` over the two grid points' processes, decided (in pairs by round where
    both were measured in the same rounds: compiled against eager, cold against warm). A side measured in one
    process has only its steps' interval (the summary's): the two are combined on log scale, and
    the claim says so; without any interval the values alone decide nothing."""
    b, n = d.groups(base, key), d.groups(new, key)
    paired = grid_points.rounds_paired(base, new, d.jobs, key)
    if paired:  # two grid points of one sweep, measured round by round: their processes in pairs (as conclusions)
        return decide_test(stats.paired_ratio_test(paired), len(paired))
    if len(b) >= 2 and len(n) >= 2:
        test = stats.ratio_test(b, n)
        return decide_test(test, min(len(b), len(n)))
    ib, in_ = _interval(base, key), _interval(new, key)
    vb, vn = stats.number(base.get(key)), stats.number(new.get(key))
    if not vb or not vn or vb <= 0 or vn <= 0:
        return decide(None, None, None)
    if ib is None or in_ is None or ib[0] <= 0 or in_[0] <= 0:
        return decide(vn / vb, None, None, 1)
    half = math.hypot(*(max(math.log(hi / v), math.log(v / lo)) for v, (lo, hi) in ((vb, ib), (vn, in_))))
    r = vn / vb
    found = decide(r, r * math.exp(-half), r * math.exp(half), 1)
    return replace(found, why=found.why + " (one process a side: the interval covers its steps only)")


def _first_over_later(d: "_Data", row: pd.Series) -> Decision:
    """A grid point's first profiled step over the median of its later ones, decided over its
    processes: each process's ratio is one pair (later, first) of paired_ratio_test, so the
    interval is Student's t over the processes' log ratios."""
    ratios = d.first_step_ratios(row)
    return decide_test(stats.paired_ratio_test([([1.0], r) for r in ratios]), len(ratios))


def _holds(decision: Decision) -> str:
    """A claim that NEW exceeds BASE: holds above the band, does not below it or within it."""
    if decision.outcome == ABOVE:
        return "true"
    if decision.outcome in (BELOW, SAME):
        return "false"
    return INCONCLUSIVE


def _ratio_text(decision: Decision) -> str:
    """`2.34× [2.29, 2.40]` and, undecided, how many processes would decide it."""
    need = decision.need()
    if decision.equivalence is not None:  # `same` by two one-sided tests: the 95% interval leaves the band
        need = f"the same by two one-sided tests: 90% interval [{decision.equivalence[0]:.3g}, {decision.equivalence[1]:.3g}]"
    return decision.interval().replace("x", "×", 1) + (f"; {need}" if need else "")


def _span(row: pd.Series, key: str, show: Any = None) -> str:
    """`12.3 µs [10.1, 15.0]`: a value with its interval where it has one."""
    show = show or _us
    found = _interval(row, key)
    return show(row[key]) + (f" [{found[0]:,.1f}, {found[1]:,.1f}]" if found else "")


def _us(value: Any) -> str:
    return f"{value:,.1f} µs"


class _Data:
    def __init__(self, summary: pd.DataFrame, ops: pd.DataFrame, steps: pd.DataFrame,
                 kernels: pd.DataFrame, crossovers: pd.DataFrame, jobs: list[dict[str, Any]] | None = None) -> None:
        self.ok = usable_rows(summary)
        self.ops, self.steps, self.kernels, self.crossovers = ops, steps, kernels, crossovers
        self.jobs = {str(j.get("job")): j for j in jobs or []}

    def groups(self, row: pd.Series, key: str) -> list[list[float]]:
        """A grid point's samples of `key`, one list per process: the un-profiled steps for the
        un-profiled step, else each repeat's one value (the summary's own value without the jobs)."""
        found = []
        for name in point_jobs(row):
            job = self.jobs.get(name)
            if job is None:
                continue
            values = timed_samples(job) if key == TIMED else stats.clean([job.get(key)])
            if values:
                found.append(values)
        return found or [stats.clean([row.get(key)])]

    def series(self, workload: str, compile: bool = False, warmup: bool | None = False) -> pd.DataFrame:
        """One series over size, bf16 when there is one, sorted by size."""
        rows = self.ok[(self.ok["workload"] == workload) & (self.ok["compile"] == compile)]
        if "train" in rows:  # the article profiles inference
            rows = rows[rows["train"].fillna(False).astype(bool) == False]  # noqa: E712
        if warmup is not None:
            rows = rows[rows["warmup"] == warmup]
        if rows.empty:
            return rows
        dtype = "bf16" if (rows["dtype"] == "bf16").any() else rows["dtype"].iloc[0]
        return rows[rows["dtype"] == dtype].sort_values("size")

    def job_ops(self, job: str) -> pd.DataFrame:
        return self.ops[self.ops["job"] == job].set_index("name") if len(self.ops) else pd.DataFrame()

    def first_step_ratios(self, row: pd.Series) -> list[list[float]]:
        """The first profiled step's body (the workload's annotation: the profiler's own part of
        the step left out, see first_step_outside) over the median of the later ones, in each
        repeat of a grid point, one list of one value per repeat. Steps without a body (a trace
        from before it was kept) are compared whole."""
        ratios = []
        for steps in self._job_steps(row):
            if len(steps) < 2:
                continue
            key = "body_us" if "body_us" in steps and steps["body_us"].notna().all() else "host_us"
            first, later = steps[key].iloc[0], steps[key].iloc[1:].median()
            if later > 0:
                ratios.append([first / later])
        return ratios

    def first_step_outside(self, row: pd.Series) -> tuple[float, float] | None:
        """The profiler's own time in the first profiled step and the median of the later ones
        (µs, medians over the repeats): the step's time outside its body."""
        firsts, laters = [], []
        for steps in self._job_steps(row):
            if "outside_us" in steps and len(steps) > 1 and steps["outside_us"].notna().all():
                firsts.append(steps["outside_us"].iloc[0])
                laters.append(steps["outside_us"].iloc[1:].median())
        return (float(pd.Series(firsts).median()), float(pd.Series(laters).median())) if firsts else None

    def _job_steps(self, row: pd.Series) -> list[pd.DataFrame]:
        """Each repeat's steps.csv rows, in step order."""
        if self.steps.empty:
            return []
        return [self.steps[self.steps["job"] == job].sort_values("step") for job in point_jobs(row)]

    def compute_calls_per_step(self, row: pd.Series) -> float:
        ops = self.job_ops(row["job"])
        return int(ops["compute_calls"].sum()) / row["steps"]  # counted by the trace's compute rule


def _on_gpu(row: pd.Series) -> bool:
    return pd.notna(row.get("device_us_per_step"))


def part1(d: _Data) -> list[Claim]:
    eager = d.series("matmul_add")
    if eager.empty:
        eager = d.series("matmul_add", warmup=True)
    out: list[Claim] = []
    P = "part1"

    c, e = "device (CPU: compute) time overtakes host time between the small and the large size", \
        "crossover between 64 and 4096"
    x = d.crossovers
    if len(eager) < 2 or x.empty:
        out.append(_na(P, c, e, "needs eager matmul_add jobs at two sizes or more"))
    else:
        first = eager.iloc[0]
        row = x[(x["workload"] == "matmul_add") & (x["dtype"] == first["dtype"]) & (~x["compile"].astype(bool))
                & (x["warmup"].astype(bool) == bool(first["warmup"]))]
        if row.empty:
            out.append(_na(P, c, e, "no crossover series for eager matmul_add"))
        elif _fits(row.iloc[0]) and {"regime", "regime_uncertain"} <= set(eager.columns):
            out.append(_crossing_by_fit(P, c, e, row.iloc[0], eager))
        else:
            r = row.iloc[0]
            size = f"size ≈ {r['crossover_size']:.0f} ({r['status']})" if pd.notna(r["crossover_size"]) else r["status"]
            uncertain = pd.notna(r["crossover_size"]) and flag(r.get("uncertain"))
            if pd.isna(r["crossover_size"]):  # not reached: unless an end's ratio may lie on the other side of 1
                ends = eager.iloc[[0, -1]]
                uncertain = bool(ends.get("regime_uncertain", pd.Series(dtype=object)).map(flag).any())
                if uncertain:
                    size += " (uncertain: at an end size the interval of work / host holds 1)"
            out.append(Claim(P, c, e, size, INCONCLUSIVE if uncertain else _verdict(pd.notna(r["crossover_size"])), ""))

    cold, warm = d.series("matmul_add", warmup=False), d.series("matmul_add", warmup=True)
    both = sorted(set(cold["size"]) & set(warm["size"])) if not cold.empty and not warm.empty else []
    c, e = "warming up removes the first step's dead window", \
        "annotation start -> first aten op: ~228 µs cold, ~5 µs warm"
    if not both:
        out.append(_na(P, c, e, "needs cold and warm eager matmul_add jobs at the same size"))
    else:
        size = both[0]
        cr, wr = cold[cold["size"] == size].iloc[0], warm[warm["size"] == size].iloc[0]
        found = _ratio(d, wr, cr, "dead_window_us")
        out.append(Claim(P, c, e, f"size {size}: {_span(cr, 'dead_window_us')} cold, "
                         f"{_span(wr, 'dead_window_us')} warm (cold / warm {_ratio_text(found)})", _holds(found),
                         f"{cr['job']}, {wr['job']}"))

    c, e = "a cold first step costs more than the later ones; a warm one does not", \
        "cold first step slower (Figs 5–7); warm steps even"
    if not both or d.steps.empty:
        out.append(_na(P, c, e, "needs cold and warm eager matmul_add jobs at the same size"))
    else:
        size = both[0]
        # Each side on its own, over its processes: the first step's body over the median of the
        # later ones in each process, their geometric mean with Student's t (one value a process).
        found = {k: _first_over_later(d, frame[frame["size"] == size].iloc[0]) for k, frame in (("cold", cold), ("warm", warm))}
        if any(f.ratio is None for f in found.values()):
            out.append(_na(P, c, e, "needs more than one profiled step per job"))
        else:
            cold_more, warm_more = (found[k].outcome == ABOVE for k in ("cold", "warm"))
            decided = all(f.decided for f in found.values())
            holds = "true" if cold_more and not warm_more and decided else \
                "false" if warm_more or (found["cold"].decided and not cold_more) else INCONCLUSIVE
            said = ", ".join(f"{_ratio_text(found[k])} {k}" for k in found)
            if warm_more:
                said += ": a warm first step costs more too"
            elif found["cold"].decided and not cold_more:
                said += ": a cold first step costs no more than the later ones"
            outside = {k: d.first_step_outside(frame[frame["size"] == size].iloc[0])
                       for k, frame in (("cold", cold), ("warm", warm))}
            own = "; ".join(f"{k} {_us(v[0])} first, {_us(v[1])} later" for k, v in outside.items() if v)
            own = f" (the workload's annotation; the profiler's own time in the step: {own})" if own else ""
            out.append(Claim(P, c, e, f"size {size}: first / median later step = {said}{own}", holds))

    compiled = d.series("matmul_add", compile=True)
    pairs = sorted(set(eager["size"]) & set(compiled["size"])) if not compiled.empty else []
    c, e = "the compiled step costs more host time than eager at small sizes", "~2× the CPU time per step"
    if not pairs:
        out.append(_na(P, c, e, "needs eager and compiled matmul_add jobs at the same size"))
    else:
        size = pairs[0]
        er, cr = eager[eager["size"] == size].iloc[0], compiled[compiled["size"] == size].iloc[0]
        key = TIMED if pd.notna(er.get(TIMED)) and pd.notna(cr.get(TIMED)) else "host_us_per_step"
        side = grid_points.side_by_side(cr, d.jobs) if key == TIMED else None
        if side and len(side) >= 2:  # as the conclusions judge compile against eager (compile_change)
            found = decide_test(stats.paired_ratio_test(side), len(side))
            steps = grid_points.side_by_side_steps(side)
            said = (f"size {size}, un-profiled step, eager and compiled timed in turn in each compiled process: "
                    f"{_us(steps[1])} compiled vs {_us(steps[0])} eager")
        else:
            found = _ratio(d, er, cr, key)
            said = (f"size {size}, {'un-profiled step' if key == TIMED else 'host time of a profiled step'}: "
                    f"{_span(cr, key)} compiled vs {_span(er, key)} eager")
        out.append(Claim(P, c, e, f"{said} ({_ratio_text(found)})", _holds(found), f"{er['job']}, {cr['job']}"))

    return out


def _fits(crossing: pd.Series) -> bool:
    """A series whose model of the un-profiled steps fits (profsweep.fit; crossovers.csv's fit_*)."""
    return pd.notna(crossing.get("fit_overhead_us")) and not str(crossing.get("fit_check") or "").startswith("does not")


def _crossing_by_fit(part: str, claim: str, expected: str, crossing: pd.Series, series: pd.DataFrame) -> Claim:
    """Work overtakes the overhead between the smallest and the largest size: the smallest size
    decidedly overhead-bound and the largest decidedly compute-bound by the model (both decided by
    the one rule); false when both ends are decidedly on one side."""
    ends = series.iloc[[0, -1]]
    words = [f"{r['size']}: {r['regime']}{' (undecided)' if r.get('regime_uncertain') in (True, 'True') else ''}"
             for _, r in ends.iterrows()]
    at = crossing.get("fit_crossover_size")
    said = (f"the model of the un-profiled steps crosses at size ≈ {at:.0f} "
            f"[{crossing.get('fit_crossover_size_low'):.0f}, {crossing.get('fit_crossover_size_high'):.0f}]"
            if pd.notna(at) else "the model has no overhead floor") + f"; {', '.join(words)}"
    decided = [isinstance(r.get("regime"), str) and r.get("regime_uncertain") in (False, "False")
               for _, r in ends.iterrows()]
    small, large = ends.iloc[0]["regime"], ends.iloc[-1]["regime"]
    if all(decided):
        holds = _verdict(small == "overhead-bound" and large != "overhead-bound")
    elif (decided[0] and small != "overhead-bound") or (decided[1] and large == "overhead-bound"):
        holds = "false"
    else:
        holds = INCONCLUSIVE
    return Claim(part, claim, expected, said, holds, ", ".join(str(j) for j in ends["job"]))


def _attention_jobs(d: _Data) -> dict[str, pd.Series]:
    """Part 3's jobs: one eager inference job per attention backend (warm when there is one), all
    at the largest sequence length that the backends run in this sweep have in common."""
    if "workload_backend" not in d.ok:
        return {}
    att = d.ok[(d.ok["workload"] == "attention") & (~d.ok["compile"].astype(bool))]
    if "train" in att:
        att = att[att["train"].fillna(False).astype(bool) == False]  # noqa: E712
    if att.empty:
        return {}
    if att["warmup"].astype(bool).any():
        att = att[att["warmup"].astype(bool)]
    sizes = None
    for _, rows in att.groupby("workload_backend"):
        sizes = set(rows["size"]) if sizes is None else sizes & set(rows["size"])
    size = max(sizes) if sizes else att["size"].max()
    chosen = att[att["size"] == size] if sizes else att
    return {str(r["workload_backend"]): r for _, r in chosen.sort_values("dtype", ascending=False).iterrows()}


def part3(d: _Data) -> list[Claim]:
    jobs = _attention_jobs(d)
    out: list[Claim] = []
    P = "part3"

    def per_step(job: pd.Series, op: str) -> float:
        ops = d.job_ops(job["job"])
        return float(ops["calls"].get(op, 0)) / job["steps"] if len(ops) else 0.0

    def kernels_per_step(job: pd.Series) -> float:
        return float(job["step_kernels_median"]) if _on_gpu(job) else d.compute_calls_per_step(job)

    def what(job: pd.Series) -> str:
        return "kernels" if _on_gpu(job) else "compute ops (CPU)"

    def need(*names: str) -> list[pd.Series] | None:
        return [jobs[n] for n in names] if all(n in jobs for n in names) else None

    c, e = ("naive attention runs one more device activity per forward than in-place: a memcpy",
            "naive 6 kernels incl. a Memcpy (out-of-place masked_fill), in-place 5")
    pair = need("naive", "inplace")
    if pair is None:
        out.append(_na(P, c, e, "needs the naive and in-place attention jobs"))
    else:
        naive, inplace = pair
        if _on_gpu(naive):
            a = naive["step_kernels_median"] + naive["step_memcpys_median"]
            b = inplace["step_kernels_median"] + inplace["step_memcpys_median"]
            extra = naive["step_memcpys_median"] - inplace["step_memcpys_median"]
            out.append(Claim(P, c, e, f"device activities per forward: naive {a:.0f}, in-place {b:.0f}; "
                             f"memcpys {naive['step_memcpys_median']:.0f} vs {inplace['step_memcpys_median']:.0f}",
                             _verdict(a - b == 1 and extra == 1), f"{naive['job']}, {inplace['job']}"))
        else:
            a, b = per_step(naive, "aten::copy_"), per_step(inplace, "aten::copy_")
            out.append(Claim(P, c, e, f"aten::copy_ per forward (CPU): naive {a:.0f}, in-place {b:.0f}",
                             _verdict(a - b == 1), f"{naive['job']}, {inplace['job']}"))

    c, e = "the math backend runs many more kernels per forward than in-place", "math 20 kernels, in-place 5"
    pair = need("math", "inplace")
    if pair is None:
        out.append(_na(P, c, e, "needs the math and in-place attention jobs"))
    else:
        math, inplace = pair
        a, b = kernels_per_step(math), kernels_per_step(inplace)
        out.append(Claim(P, c, e, f"{what(math)} per forward: math {a:.0f}, in-place {b:.0f}",
                         _verdict(a > b), f"{math['job']}, {inplace['job']}"))

    c, e = "the math backend is slower than in-place", "3.7× (Self CUDA 27.279 ms vs 7.194 ms)"
    if pair is None:
        out.append(_na(P, c, e, "needs the math and in-place attention jobs"))
    else:
        math, inplace = pair
        key = "device_us_per_step" if _on_gpu(math) else "host_us_per_step"
        ratio = math[key] / inplace[key]
        out.append(Claim(P, c, e, f"size {math['size']}: {ratio:.2f}× ({_span(math, key)} vs {_span(inplace, key)} per "
                         f"forward, {'device' if key.startswith('device') else 'host (CPU)'})",
                         _more(d, math, inplace, key), f"{math['job']}, {inplace['job']}"))

    gpu = {n: r for n, r in jobs.items() if _on_gpu(r)}

    c, e = "cuDNN costs more host time per forward than flash and efficient", "CPU avg 214 µs vs 138 µs and 117 µs"
    trio = [gpu[n] for n in ("flash", "efficient", "cudnn") if n in gpu]
    if len(trio) < 3:
        out.append(_na(P, c, e, CUDA_ONLY + " of flash, efficient and cudnn"))
    else:
        by = {str(r["workload_backend"]): r for r in trio}
        verdicts = {_more(d, by["cudnn"], by[n], "host_us_per_step") for n in ("flash", "efficient")}
        out.append(Claim(P, c, e, ", ".join(f"{n} {_span(r, 'host_us_per_step')}" for n, r in by.items()),
                         "false" if "false" in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else "true",
                         ", ".join(r["job"] for r in trio)))

    return out


def _preset_workloads(preset: dict[str, Any]) -> set[str]:
    """The workloads a preset runs: its `override /workload` default and a swept `workload`."""
    found = set()
    for entry in preset.get("defaults") or []:
        if isinstance(entry, dict):
            found |= {str(v) for k, v in entry.items() if str(k).strip().endswith("/workload")}
    swept = ((preset.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    if "workload" in swept:
        found |= {w.strip() for w in str(swept["workload"]).split(",")}
    return found


def preset_claims(folder: Path = PRESETS) -> list[tuple[set[str], ClaimSpec]]:
    """The presets' claims, each with the workloads of its preset (none when there is no such
    folder, e.g. an installed analysis without the project's conf/)."""
    import yaml

    out = []
    for path in sorted(Path(folder).glob("*.yaml")):
        preset = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        try:
            claims = parse_claims(preset.get("expect") or [])
        except ExpectationError as exc:
            raise ExpectationError(f"{path}: {exc}") from exc
        out += [(_preset_workloads(preset), c) for c in claims]
    return out


def sweep_claims(folder: Path | None) -> list[ClaimSpec]:
    """The claims the sweep composed (its expect.json), none when it has none."""
    try:
        texts = read_json(Path(folder) / EXPECT_FILE)["expect"]
        return parse_claims(texts)
    except (TypeError, OSError, ValueError, KeyError):  # no folder or file, or another version's
        return []


def _judged(claims: list[ClaimSpec], d: _Data) -> dict[str, list[Claim]]:
    ok = d.ok
    if "train" in ok:  # the article profiles inference
        ok = ok[ok["train"].fillna(False).astype(bool) == False]  # noqa: E712
    jobs = [GridPoint(r) for r in ok.astype(object).where(ok.notna(), None).to_dict("records")]

    def by_job(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if len(frame):
            clean = frame.astype(object).where(frame.notna(), None)
            for row in clean.to_dict("records"):
                out.setdefault(str(row["job"]), {})[str(row["name"])] = row
        return out

    ops, kernels = by_job(d.ops), by_job(d.kernels)
    out: dict[str, list[Claim]] = {}
    for c in claims:
        verdict = judge(c, jobs, ops, kernels)
        out.setdefault(c.part, []).append(Claim(c.part, c.claim, c.article, verdict["measured"], verdict["holds"],
                                                verdict["jobs"]))
    return out


CODE = {"part1": ({"matmul_add"}, part1), "part3": ({"attention"}, part3)}  # comparisons across jobs


def evaluate(summary: pd.DataFrame, ops: pd.DataFrame, steps: pd.DataFrame, kernels: pd.DataFrame,
             crossovers: pd.DataFrame, folder: Path | None = None, presets: Path = PRESETS,
             jobs: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """claims.csv's rows for every part whose workloads the sweep ran (empty when none): the
    presets' claims (the sweep's own, from `folder`'s expect.json, where it composed a preset),
    then the comparisons across jobs."""
    if summary.empty or "workload" not in summary:
        return pd.DataFrame(columns=list(Claim.__dataclass_fields__))
    d = _Data(summary, ops, steps, kernels, crossovers, jobs)
    workloads = set(summary["workload"].dropna())
    own = sweep_claims(folder)
    parts_own = {c.part for c in own}
    data = own + [c for w, c in preset_claims(presets) if w & workloads and c.part not in parts_own]
    judged = _judged(data, d)
    claims: list[Claim] = []
    for part in [*PARTS, *sorted(set(judged) - set(PARTS))]:
        claims += judged.get(part, [])
        needs, code = CODE.get(part, (set(), None))
        if code is not None and workloads & needs:
            claims += code(d)
    return pd.DataFrame([asdict(c) for c in claims], columns=list(Claim.__dataclass_fields__))


# --- the article's figures on the report page --------------------------------------------------


def article_section(folder: Path, data: dict[str, Any], claims: Any) -> list[str]:
    """Each claim beside the article's number, and the article's figures from this run's data."""
    import pandas as pd

    from analysis.trace import TraceError, op_tree

    parts = ["<h2 id='article-check'>Article check</h2><p>The claims of the Hugging Face series “Profiling in PyTorch” "
             "(its numbers: an A100, bf16) against this run (<code>claims.csv</code>).</p>"]
    verdict = {"true": "<span class='ok'>holds</span>", "false": "<span class='bad'>does not hold</span>",
               "n/a": "n/a"}
    parts.append(table(
        ["part", "claim", "article", "this run", "verdict"],
        ([escape(c["part"]), escape(c["claim"]), escape(c["expected"]), escape(c["measured"]),
          verdict.get(c["holds"], escape(c["holds"]))] for _, c in claims.iterrows()),
        left=4,
    ))
    summary = data["summary"]
    ok = usable_rows(summary)
    eager = ok[(ok["workload"] == "matmul_add") & (~ok["compile"].astype(bool))].sort_values(["warmup", "size"])
    if eager.empty:
        return parts
    cold = eager[~eager["warmup"].astype(bool)]
    series = (cold if not cold.empty else eager)
    series = series[series["dtype"] == series["dtype"].iloc[0]]
    small, big = series.iloc[0], series.iloc[-1]

    parts.append("<h3>Figs 1–2: the profiler table at the smallest and the largest size</h3>")
    parts.append(pre_pair(
        (f"size {small['size']} ({small['job']})", read_text(folder / small["job"] / (table_files(small) or [""])[0])),
        (f"size {big['size']} ({big['job']})", read_text(folder / big["job"] / (table_files(big) or [""])[0])),
    ))

    parts.append(f"<h3>Fig 12: the dispatch chain of one step (first profiled step, size {small['size']})</h3>")
    try:
        tree = op_tree([folder / small["job"] / n for n in trace_files(small)])
        lines = [f"{'  ' * r['depth']}{r['name']}  {r['dur_us']:,.1f} µs (at +{r['start_us']:,.1f})" for r in tree]
        parts.append(f"<pre style='font-size:12px'>{escape(chr(10).join(lines))}</pre>")
    except TraceError as exc:
        parts.append(f"<p class='bad'>{escape(str(exc))}</p>")

    steps = data["steps"]
    same = eager[eager["size"] == small["size"]]
    if not steps.empty and same["warmup"].nunique() == 2:
        parts.append(f"<h3>Figs 5–7: cold vs warm, step by step (size {small['size']})</h3>")
        rows = []
        for _, job in same.iterrows():
            for _, st in steps[steps["job"] == job["job"]].sort_values("step").iterrows():
                device_us = st.get("device_us") if pd.notna(job.get("device_us_per_step")) else None
                rows.append([escape("warm" if job["warmup"] else "cold"), escape(str(st["step_name"])),
                             escape(fmt(st["host_us"])), escape(fmt(device_us)),
                             escape(fmt(job["dead_window_us"]) if st["step"] == 1 else "")])
        parts.append(table(["phase", "step", "host µs", "device µs", "dead window µs"], rows, left=2))

    compiled = ok[(ok["workload"] == "matmul_add") & ok["compile"].astype(bool) & (ok["size"] == small["size"])
                  & (ok["dtype"] == small["dtype"]) & (ok["warmup"] == small["warmup"])]
    if not compiled.empty:
        parts.append(f"<h3>Eager vs compile (size {small['size']})</h3>")
        ops = data["ops"]
        gpu = small.get("platform") not in (None, "cpu")
        counts = [("step_aten_ops_median", "aten ops/step")] + (
            [("step_kernels_median", "kernels/step"), ("step_launches_median", "launches/step")] if gpu else [])
        rows = []
        for label, job in (("eager", small), ("compile", compiled.iloc[0])):
            names = ops[ops["job"] == job["job"]]["name"]
            aten = ", ".join(sorted(n for n in names if str(n).startswith("aten::")))
            rows.append([label, escape(aten)] + [escape(fmt(job.get(k))) for k, _ in counts]
                        + [escape(fmt(job["host_us_per_step"]))])
        parts.append(table(["mode", "aten ops", *(label for _, label in counts), "host µs/step"], rows, left=2))

    kernels = data["kernels"]
    if not kernels.empty:
        k = kernels[kernels["job"] == big["job"]].head(5)
        parts.append(f"<h3>Figs 17–18: the same kernel, step to step (size {big['size']})</h3>")
        parts.append(table(
            ["kernel (CPU: compute op)", "calls", "median µs", "min µs", "max µs", "max / median"],
            ([escape(str(r["name"])[:100]), escape(fmt(r["calls"])), escape(fmt(r["median_us"])),
              escape(fmt(r["min_us"])), escape(fmt(r["max_us"])),
              escape(fmt(r["max_us"] / r["median_us"]) if r["median_us"] else "")] for _, r in k.iterrows()),
        ))
    return parts
