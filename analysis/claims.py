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


CUDA_ONLY = "CUDA only: needs the CUDA kernels' trace"


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
        out.append(Claim(P, c, e, f"size {math['size']}: {ratio:.2f}× ({_us(math[key])} vs {_us(inplace[key])} per "
                         f"forward, {'device' if key.startswith('device') else 'host (CPU)'})",
                         _verdict(ratio > 1), f"{math['job']}, {inplace['job']}"))

    c, e = "math's GEMMs run in FP32 on CUDA cores although the inputs are bf16", "sgemm kernels, no tensor cores"
    math = jobs.get("math")
    if math is None or not _on_gpu(math):
        out.append(_na(P, c, e, CUDA_ONLY if math is not None else "needs the math attention job"))
    else:
        k = d.kernels[(d.kernels["job"] == math["job"]) & d.kernels["name"].str.contains("gemm", case=False)]
        cores = ", ".join(sorted({"tensor cores" if t is True else "CUDA cores" if t is False else "unknown"
                                  for t in k.get("tensor_cores", pd.Series(dtype=object))}))
        out.append(Claim(P, c, e, f"{len(k)} GEMM kernels ({math['dtype']} inputs): {cores or 'none'}",
                         _verdict(not k.empty and (k["tensor_cores"] == False).all()), math["job"]))  # noqa: E712

    c, e = "the math backend rebuilds the causal mask on every call", "aten::ones -> aten::tril, aten::where per call"
    if math is None:
        out.append(_na(P, c, e, "needs the math attention job"))
    else:
        tril, where = per_step(math, "aten::tril"), per_step(math, "aten::where")
        fused = [jobs[n] for n in ("flash", "efficient", "cudnn") if n in jobs]
        others = ", ".join(f"{r['workload_backend']} {per_step(r, 'aten::tril'):.0f}" for r in fused)
        out.append(Claim(P, c, e, f"per forward: math aten::tril {tril:.0f}, aten::where {where:.0f}"
                         + (f"; aten::tril in {others}" if others else ""),
                         _verdict(tril >= 1 and where >= 1 and all(per_step(r, "aten::tril") == 0 for r in fused)),
                         math["job"]))

    c, e = "efficient, flash and cuDNN run one fused kernel per forward", "1 kernel each"
    fused = [jobs[n] for n in ("efficient", "flash", "cudnn") if n in jobs]
    if not fused:
        out.append(_na(P, c, e, "needs a flash, efficient or cudnn attention job"))
    else:
        counts = {str(r["workload_backend"]): kernels_per_step(r) for r in fused}
        missing = [n for n in ("efficient", "flash", "cudnn") if n not in counts]
        out.append(Claim(P, c, e, "; ".join(f"{n} {v:.0f} {what(jobs[n])}" for n, v in counts.items())
                         + (f" ({', '.join(missing)} not run here)" if missing else ""),
                         _verdict(all(v == 1 for v in counts.values())), ", ".join(r["job"] for r in fused)))

    gpu = {n: r for n, r in jobs.items() if _on_gpu(r)}

    c, e = "flash and efficient call four transposes per forward, cuDNN none", "4, 4 and 0 aten::transpose"
    trio = [gpu[n] for n in ("flash", "efficient", "cudnn") if n in gpu]
    if len(trio) < 3:
        out.append(_na(P, c, e, CUDA_ONLY + " of flash, efficient and cudnn (the CPU's flash attention is "
                        "another implementation)"))
    else:
        t = {str(r["workload_backend"]): per_step(r, "aten::transpose") for r in trio}
        out.append(Claim(P, c, e, ", ".join(f"{n} {v:.0f}" for n, v in t.items()),
                         _verdict(t["flash"] == 4 and t["efficient"] == 4 and t["cudnn"] == 0),
                         ", ".join(r["job"] for r in trio)))

    c, e = "cuDNN launches its kernel with cuLaunchKernelEx (driver API)", "cuLaunchKernelEx, not cudaLaunchKernel"
    cudnn = gpu.get("cudnn")
    if cudnn is None:
        out.append(_na(P, c, e, CUDA_ONLY + " of the cudnn backend"))
    else:
        ex, rt = per_step(cudnn, "cuLaunchKernelEx"), per_step(cudnn, "cudaLaunchKernel")
        out.append(Claim(P, c, e, f"per forward: cuLaunchKernelEx {ex:.0f}, cudaLaunchKernel {rt:.0f}",
                         _verdict(ex >= 1), cudnn["job"]))

    c, e = "cuDNN costs more host time per forward than flash and efficient", "CPU avg 214 µs vs 138 µs and 117 µs"
    if len(trio) < 3:
        out.append(_na(P, c, e, CUDA_ONLY + " of flash, efficient and cudnn"))
    else:
        h = {str(r["workload_backend"]): r["host_us_per_step"] for r in trio}
        out.append(Claim(P, c, e, ", ".join(f"{n} {_us(v)}" for n, v in h.items()),
                         _verdict(h["cudnn"] > h["flash"] and h["cudnn"] > h["efficient"]),
                         ", ".join(r["job"] for r in trio)))

    c, e = "flash's reported occupancy is low and cuDNN's reads 0", "13% and 0% (estimated achieved occupancy)"
    pair = [gpu[n] for n in ("flash", "cudnn") if n in gpu]
    if len(pair) < 2 or "occupancy_pct" not in d.kernels:
        out.append(_na(P, c, e, CUDA_ONLY + " of flash and cudnn"))
    else:
        occ = {}
        for r in pair:
            top = d.kernels[d.kernels["job"] == r["job"]].sort_values("total_us", ascending=False).head(1)
            occ[str(r["workload_backend"])] = float(top["occupancy_pct"].iloc[0]) if len(top) else float("nan")
        out.append(Claim(P, c, e, f"flash {occ['flash']:.0f}%, cudnn {occ['cudnn']:.0f}%",
                         _verdict(occ["flash"] < 25 and occ["cudnn"] == 0), ", ".join(r["job"] for r in pair)))
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
    if "attention" in workloads:
        claims += part3(d)
    return pd.DataFrame([asdict(c) for c in claims], columns=list(Claim.__dataclass_fields__))
