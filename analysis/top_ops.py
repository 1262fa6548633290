"""top_ops.csv: per grid point its top ops by host self time and its top kernels by device time
(on the CPU: compute ops by their time), per step. A core table: the report's conclusions name
them, history ingests them."""

from __future__ import annotations

from typing import Any

from analysis.trace import is_op
from profsweep import stats
from profsweep.contract import SERIES_KEYS, GridPoint, Job, point_jobs

TOP = 10  # ops and kernels per grid point in top_ops.csv


def on_gpu(row: dict[str, Any]) -> bool:
    return row.get("platform") not in (None, "cpu") or stats.number(row.get("device_us_per_step")) is not None


def top_ops(points: list[GridPoint], jobs: list[Job], ops: dict[str, list[dict[str, Any]]],
            kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """top_ops.csv: per grid point the top ops by host self time and the top kernels by device time
    (on the CPU: compute ops by their time), each per step (in each repeat the median over its
    profiled steps, then the median over the point's repeats) and as a share of the step's total of
    its kind (its median over the steps: host self time, annotations' included, device time, or on
    the CPU compute), with calls per step. Annotations and Python frames are not ops (trace.is_op)."""
    by_job = {str(j.get("job")): j for j in jobs}
    kernels_of: dict[str, list[dict[str, Any]]] = {}
    for k in kernels:
        kernels_of.setdefault(str(k.get("job")), []).append(k)
    rows = []
    for p in points:
        if not p.usable:
            continue
        names = [n for n in point_jobs(p) if n in by_job]
        kernel_kind = "kernel" if on_gpu(p) else "compute op"
        for kind, of_job, time_key, median_key in (
                ("op", lambda j: ops.get(j, []), "self_host_us", "self_host_us_step_median"),
                (kernel_kind, lambda j: kernels_of.get(j, []), "total_us", "step_median_us")):
            per: dict[str, list[tuple[float, float, float]]] = {}
            held: list[float] = []  # per repeat: the share of the step all its ops take together
            # the step's median total of the kind: host self time; device time, or compute on the CPU
            whole_key = ("host_us_per_step" if kind == "op" else
                         "device_us_per_step" if kind == "kernel" else "compute_us_per_step")
            for name in names:
                steps = stats.number(by_job[name].get("steps"))
                every = of_job(name)
                total = sum(stats.number(o.get(time_key)) or 0.0 for o in every)  # the steps', annotations too
                if not steps or not total:
                    continue
                counted = [o for o in every if is_op(o)] if kind == "op" else every  # kernels are all work
                held.append(sum(stats.number(o.get(time_key)) or 0.0 for o in counted) / total)
                for o in counted:
                    t = stats.number(o.get(time_key)) or 0.0
                    # its time in a step: the median over the profiled steps (a cold first step
                    # is one of three, not a third of the figure); the mean where a table lacks it
                    step = stats.number(o.get(median_key))
                    whole = stats.number(by_job[name].get(whole_key)) if step is not None else None
                    step, whole = (t / steps, total / steps) if step is None or not whole else (step, whole)
                    per.setdefault(str(o["name"]), []).append(
                        (step, step / whole, (stats.number(o.get("calls")) or 0) / steps))
            ranked = sorted(per.items(), key=lambda kv: -stats.median([x[0] for x in kv[1]]))
            for rank, (name, values) in enumerate(ranked[:TOP], 1):
                rows.append({
                    **{k: p.get(k) for k in (*SERIES_KEYS, "size")}, "point": p.label(),
                    "job": p.get("job"),
                    "kind": kind, "rank": rank, "name": name,
                    "us_per_step": stats.median([x[0] for x in values]),
                    "share": stats.median([x[1] for x in values]),
                    "calls_per_step": stats.median([x[2] for x in values]),
                    "all_ops_share": stats.median(held),
                    "repeats": len(values),
                })
    return rows


TOP_OPS_COLUMNS = [*SERIES_KEYS, "size", "point", "job", "kind", "rank", "name", "us_per_step", "share",
                   "calls_per_step", "all_ops_share", "repeats"]


def top_ops_frame(tables: Any) -> Any:
    """top_ops.csv's table of a sweep's analysis (analysis.tables.SweepTables)."""
    from analysis.tables import frame

    return frame(top_ops(tables.points, tables.jobs, tables.ops, tables.kernels), TOP_OPS_COLUMNS)
