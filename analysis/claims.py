"""The claims of the "Profiling in PyTorch" series, checked against this sweep's data.

Each claim becomes one row of claims.csv: what the article says (with its A100 number where it
gives one), what this run measured, and whether the claim holds here: true, false, or n/a with
the reason (a CUDA-only claim on a CPU run, a sweep that lacks the jobs to test it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd



@dataclass(frozen=True)
class Claim:
    part: str
    claim: str
    expected: str  # the article's statement and number (A100, bf16)
    measured: str
    holds: str  # "true" | "false" | "n/a"
    jobs: str = ""  # the jobs the measurement comes from


def _na(part: str, claim: str, expected: str, why: str) -> Claim:
    return Claim(part, claim, expected, why, "n/a")


def _verdict(ok: bool) -> str:
    return "true" if ok else "false"


def _us(value: Any) -> str:
    return f"{value:,.1f} µs"


class _Data:
    def __init__(self, summary: pd.DataFrame, ops: pd.DataFrame, steps: pd.DataFrame,
                 kernels: pd.DataFrame, crossovers: pd.DataFrame) -> None:
        ok = summary[(summary.get("status") == "ok")] if len(summary) else summary
        if "trace_error" in ok:
            ok = ok[ok["trace_error"].isna()]
        self.ok = ok
        self.ops, self.steps, self.kernels, self.crossovers = ops, steps, kernels, crossovers

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

    def compute_calls_per_step(self, row: pd.Series) -> float:
        ops = self.job_ops(row["job"])
        return int(ops["compute_calls"].sum()) / row["steps"]  # counted by the trace's compute rule


def _on_gpu(row: pd.Series) -> bool:
    return pd.notna(row.get("device_us_per_step"))


def _host_vs_work(row: pd.Series) -> str:
    if _on_gpu(row):
        return f"size {row['size']}: host {_us(row['host_us_per_step'])} vs device {_us(row['device_us_per_step'])} per step"
    return (f"size {row['size']}: overhead {_us(row['overhead_us_per_step'])} vs compute "
            f"{_us(row['compute_us_per_step'])} per step (CPU)")


def part1(d: _Data) -> list[Claim]:
    eager = d.series("matmul_add")
    if eager.empty:
        eager = d.series("matmul_add", warmup=True)
    out: list[Claim] = []
    P = "part1"

    c, e = "the smallest size is overhead-bound", "size 64: Self CPU 2.314 ms ≫ Self CUDA 23.1 µs"
    if eager.empty:
        out.append(_na(P, c, e, "no eager matmul_add job"))
    else:
        small = eager.iloc[0]
        out.append(Claim(P, c, e, _host_vs_work(small) + f" -> {small['regime']}",
                         _verdict(small["regime"] == "overhead-bound"), small["job"]))

    c, e = "the largest size is compute-bound", "size 4096: Self CPU 4.908 ms vs Self CUDA 4.495 ms; the GPU is busy"
    if len(eager) < 2:
        out.append(_na(P, c, e, "needs eager matmul_add jobs at two sizes or more"))
    else:
        big = eager.iloc[-1]
        out.append(Claim(P, c, e, _host_vs_work(big) + f" -> {big['regime']}",
                         _verdict(big["regime"] == "compute-bound"), big["job"]))

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
        else:
            r = row.iloc[0]
            size = f"size ≈ {r['crossover_size']:.0f} ({r['status']})" if pd.notna(r["crossover_size"]) else r["status"]
            out.append(Claim(P, c, e, size, _verdict(pd.notna(r["crossover_size"])), ""))

    cold, warm = d.series("matmul_add", warmup=False), d.series("matmul_add", warmup=True)
    both = sorted(set(cold["size"]) & set(warm["size"])) if not cold.empty and not warm.empty else []
    c, e = "warming up removes the first step's dead window", \
        "annotation start -> first aten op: ~228 µs cold, ~5 µs warm"
    if not both:
        out.append(_na(P, c, e, "needs cold and warm eager matmul_add jobs at the same size"))
    else:
        size = both[0]
        cr, wr = cold[cold["size"] == size].iloc[0], warm[warm["size"] == size].iloc[0]
        out.append(Claim(P, c, e, f"size {size}: {_us(cr['dead_window_us'])} cold, {_us(wr['dead_window_us'])} warm",
                         _verdict(wr["dead_window_us"] < cr["dead_window_us"]), f"{cr['job']}, {wr['job']}"))

    c, e = "a cold first step costs more than the later ones; a warm one does not", \
        "cold first step slower (Figs 5–7); warm steps even"
    if not both or d.steps.empty:
        out.append(_na(P, c, e, "needs cold and warm eager matmul_add jobs at the same size"))
    else:
        size = both[0]
        ratios = {}
        for label, frame in (("cold", cold), ("warm", warm)):
            job = frame[frame["size"] == size].iloc[0]["job"]
            host = d.steps[d.steps["job"] == job].sort_values("step")["host_us"].tolist()
            ratios[label] = host[0] / pd.Series(host[1:]).median() if len(host) > 1 else float("nan")
        out.append(Claim(P, c, e, f"size {size}: first / median later step = {ratios['cold']:.2f} cold, "
                         f"{ratios['warm']:.2f} warm", _verdict(ratios["cold"] > ratios["warm"])))

    compiled = d.series("matmul_add", compile=True)
    c, e = "compile replaces aten::mm + aten::add with one aten::addmm", "compiled: aten::addmm (+ a copy), no aten::add"
    pairs = sorted(set(eager["size"]) & set(compiled["size"])) if not compiled.empty else []
    if not pairs:
        out.append(_na(P, c, e, "needs eager and compiled matmul_add jobs at the same size"))
    else:
        size = pairs[0]
        er, cr = eager[eager["size"] == size].iloc[0], compiled[compiled["size"] == size].iloc[0]
        eo, co = set(d.job_ops(er["job"]).index), set(d.job_ops(cr["job"]).index)
        holds = {"aten::mm", "aten::add"} <= eo and "aten::addmm" in co and not ({"aten::mm", "aten::add"} & co)
        seen = lambda ops: ", ".join(sorted(n for n in ops if n in ("aten::mm", "aten::add", "aten::addmm")))  # noqa: E731
        out.append(Claim(P, c, e, f"size {size}: eager {{{seen(eo)}}}, compiled {{{seen(co)}}}",
                         _verdict(holds), f"{er['job']}, {cr['job']}"))

    c, e = "the compiled step costs more host time than eager at small sizes", "~2× the CPU time per step"
    if not pairs:
        out.append(_na(P, c, e, "needs eager and compiled matmul_add jobs at the same size"))
    else:
        size = pairs[0]
        er, cr = eager[eager["size"] == size].iloc[0], compiled[compiled["size"] == size].iloc[0]
        ratio = cr["host_us_per_step"] / er["host_us_per_step"]
        out.append(Claim(P, c, e, f"size {size}: {_us(cr['host_us_per_step'])} compiled vs "
                         f"{_us(er['host_us_per_step'])} eager ({ratio:.2f}×)", _verdict(ratio > 1),
                         f"{er['job']}, {cr['job']}"))

    c, e = "GEMM launches are preceded by an occupancy query; elementwise ones are not", \
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor before each GEMM launch"
    gpu_eager = eager[eager.apply(_on_gpu, axis=1)] if not eager.empty else eager
    if gpu_eager.empty or d.kernels.empty:
        out.append(_na(P, c, e, "CUDA only"))
    else:
        job = gpu_eager.iloc[0]["job"]
        k = d.kernels[d.kernels["job"] == job]
        gemm = k[k["name"].str.contains("gemm|cutlass|xmma|sm90|sm80|ampere_|hopper", case=False, regex=True)]
        rest = k.drop(gemm.index)
        holds = (not gemm.empty and (gemm["after_occupancy_query"] == gemm["calls"]).all()
                 and (rest["after_occupancy_query"] == 0).all())
        out.append(Claim(P, c, e, f"GEMM launches after a query: {int(gemm['after_occupancy_query'].sum())}/"
                         f"{int(gemm['calls'].sum())}; other kernels: {int(rest['after_occupancy_query'].sum())}/"
                         f"{int(rest['calls'].sum())}", _verdict(holds), job))

    c, e = "compiled matmul_add runs two device activities per step from one launch", \
        "one aten::addmm GEMM + a device-to-device copy of the bias, one cudaLaunchKernel"
    gpu_compiled = compiled[compiled.apply(_on_gpu, axis=1)] if not compiled.empty else compiled
    if gpu_compiled.empty:
        out.append(_na(P, c, e, "CUDA only"))
    else:
        r = gpu_compiled.iloc[0]
        activities = r["step_kernels_median"] + r["step_memcpys_median"]
        out.append(Claim(P, c, e, f"size {r['size']}: {activities:.0f} device activities "
                         f"({r['step_kernels_median']:.0f} kernels, {r['step_memcpys_median']:.0f} memcpys), "
                         f"{r['step_launches_median']:.0f} launches per step",
                         _verdict(activities == 2 and r["step_launches_median"] == 1), r["job"]))

    c, e = "the same kernel's duration varies from step to step", "median and mean differ (Figs 17–18)"
    if eager.empty or pd.isna(eager.iloc[-1].get("top_kernel_spread")):
        out.append(_na(P, c, e, "no kernel (or compute op) timed in eager matmul_add"))
    else:
        r = eager.iloc[-1]
        out.append(Claim(P, c, e, f"size {r['size']}: {r['top_kernel']} max / median = {r['top_kernel_spread']:.2f}"
                         + (" (CPU: self time of the compute op)" if not _on_gpu(r) else ""),
                         _verdict(r["top_kernel_spread"] > 1.01), r["job"]))
    return out


def part2(d: _Data) -> list[Claim]:
    out: list[Claim] = []
    P = "part2"
    linear = d.series("linear", warmup=None)
    c, e = "aten::t does no device work", "aten::t only changes metadata: no kernel"
    gpu_linear = linear[linear.apply(_on_gpu, axis=1)] if not linear.empty else linear
    if linear.empty:
        out.append(_na(P, c, e, "no eager linear job"))
    elif gpu_linear.empty:
        out.append(_na(P, c, e, "CUDA only"))
    else:
        r = gpu_linear.iloc[0]
        ops = d.job_ops(r["job"])
        t_dev = float(ops.loc["aten::t", "self_device_us"]) if "aten::t" in ops.index else None
        out.append(Claim(P, c, e, "aten::t not in the trace" if t_dev is None else f"aten::t self device time {_us(t_dev)}",
                         _verdict(t_dev is not None and t_dev == 0), r["job"]))

    c, e = "nn.Linear has no separate add: the bias is folded into aten::addmm", "aten::linear -> aten::t + aten::addmm"
    if linear.empty:
        out.append(_na(P, c, e, "no eager linear job"))
    else:
        r = linear.iloc[0]
        ops = set(d.job_ops(r["job"]).index)
        out.append(Claim(P, c, e, "ops: " + ", ".join(sorted(n for n in ops if n in ("aten::linear", "aten::t", "aten::addmm", "aten::add"))),
                         _verdict("aten::addmm" in ops and "aten::add" not in ops), r["job"]))

    mlp = d.series("mlp", warmup=None)
    c, e = "the eager GeGLU MLP runs 5 kernels per forward", "3 GEMMs, gelu, mul"
    if mlp.empty:
        out.append(_na(P, c, e, "no eager mlp job"))
    else:
        r = mlp.iloc[0]
        if _on_gpu(r):
            n, what = r["step_kernels_median"], "kernels"
        else:
            n, what = d.compute_calls_per_step(r), "compute ops (CPU)"
        out.append(Claim(P, c, e, f"{n:.0f} {what} per forward", _verdict(n == 5), r["job"]))

    mlp_c = d.series("mlp", compile=True, warmup=None)
    c, e = "the compiled GeGLU MLP runs 4 kernels, one fused for gelu and mul", \
        "3 GEMMs + triton_poi_fused_..._gelu_mul_..."
    if mlp_c.empty:
        out.append(_na(P, c, e, "no compiled mlp job"))
    else:
        r = mlp_c.iloc[0]
        if _on_gpu(r):
            n = r["step_kernels_median"]
            names = d.kernels[d.kernels["job"] == r["job"]]["name"]
        else:
            n = d.compute_calls_per_step(r)
            names = pd.Series([str(x) for x in d.job_ops(r["job"]).index])
        fused = names[names.str.contains("fused", case=False) & names.str.contains("gelu") & names.str.contains("mul")]
        out.append(Claim(P, c, e, f"{n:.0f} {'kernels' if _on_gpu(r) else 'compute ops (CPU)'} per forward; fused: "
                         + (fused.iloc[0][:80] if not fused.empty else "none"),
                         _verdict(n == 4 and len(fused) == 1), r["job"]))
    return out


def evaluate(summary: pd.DataFrame, ops: pd.DataFrame, steps: pd.DataFrame, kernels: pd.DataFrame,
             crossovers: pd.DataFrame) -> pd.DataFrame:
    """claims.csv's rows for every part whose workloads the sweep ran (empty when none)."""
    if summary.empty or "workload" not in summary:
        return pd.DataFrame(columns=list(Claim.__dataclass_fields__))
    d = _Data(summary, ops, steps, kernels, crossovers)
    claims: list[Claim] = []
    workloads = set(summary["workload"].dropna())
    if "matmul_add" in workloads:
        claims += part1(d)
    if workloads & {"linear", "mlp"}:
        claims += part2(d)
    return pd.DataFrame([asdict(c) for c in claims], columns=list(Claim.__dataclass_fields__))
