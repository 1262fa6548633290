"""Workload costs by hand count; built inputs have the shapes and dtypes the article uses."""

from __future__ import annotations

import pytest
import torch

from experiments import seam
from experiments.config import JobConfig, WorkloadConfig


def cost(config: JobConfig) -> seam.Cost:
    w = config.workload
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.dtype]
    return seam.estimate(w.target, w.settings, size=config.size, dtype=dtype, device=torch.device("cpu"))


def build(config: JobConfig, device: str) -> tuple:
    w = config.workload
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.dtype]
    made = seam.build(w.target, w.settings, size=config.size, dtype=dtype, device=torch.device(device))
    return made.fn, made.args


def test_matmul_add_cost_by_hand():
    c = cost(JobConfig(workload=WorkloadConfig.builtin("matmul_add"), size=4, dtype="fp32"))
    # 4x4 @ 4x4: 64 multiply-adds = 128 FLOPs, plus 16 adds; x, w, b read, out written.
    assert (c.flops, c.bytes) == (144, 4 * 16 * 4)


def test_mlp_cost_by_hand():
    c = cost(JobConfig(workload=WorkloadConfig.builtin("mlp", dim=2, hidden=3), size=5, dtype="bf16"))
    # gate, up: 5x2 @ 2x3; down: 5x3 @ 3x2 -> 3 * 5*2*3 multiply-adds; gelu and mul on 5x3.
    assert c.flops == 2 * 3 * 30 + 2 * 15
    assert c.bytes == (3 * 6 + 2 * 10) * 2


def test_memory_estimate_grows_with_dtype_and_size():
    small = cost(JobConfig(size=16, dtype="bf16")).memory_bytes
    assert cost(JobConfig(size=16, dtype="fp32")).memory_bytes == 2 * small
    assert cost(JobConfig(size=200_000, dtype="fp32")).memory_bytes > 700 * 2**30


@pytest.mark.parametrize(
    "workload,size,out_shape",
    [
        (WorkloadConfig.builtin("matmul_add"), 8, (8, 8)),
        (WorkloadConfig.builtin("bmm", batch=3), 8, (3, 8, 8)),
        (WorkloadConfig.builtin("linear"), 16, (16, 64)),
        (WorkloadConfig.builtin("mlp", dim=8, hidden=24), 5, (5, 8)),
        (WorkloadConfig.builtin("attention", batch=2, heads=3, head_dim=4), 8, (2, 3, 8, 4)),
    ],
)
def test_built_workloads_run_on_cpu(workload, size, out_shape):
    fn, args = build(JobConfig(workload=workload, size=size, dtype="fp32"), "cpu")
    with torch.no_grad():
        out = fn(*args)
    assert tuple(out.shape) == out_shape and out.dtype == torch.float32
    assert all(a.device.type == "cpu" for a in args)


def test_linear_has_bias_and_the_mlp_none():
    fn, _ = build(JobConfig(workload=WorkloadConfig.builtin("linear"), size=4), "cpu")
    assert fn.bias is not None and fn.weight.dtype == torch.bfloat16
    mlp, _ = build(JobConfig(workload=WorkloadConfig.builtin("mlp", dim=4, hidden=8), size=4), "cpu")
    assert all(m.bias is None for m in (mlp.gate, mlp.up, mlp.down))


def test_attention_cost_by_hand():
    w = WorkloadConfig.builtin("attention", batch=2, heads=3, head_dim=4)
    c = cost(JobConfig(workload=w, size=5, dtype="fp32"))
    # per (batch, head): q·kᵀ 5x4 @ 4x5 and p·v 5x5 @ 5x4, 100 multiply-adds each; scale and
    # softmax over the 5x5 scores; q, k, v and the output are 2*3*5*4 elements each.
    assert c.flops == 6 * (2 * 100 + 2 * 100 + 2 * 25)
    assert c.bytes == 4 * 120 * 4 and c.memory_bytes == c.bytes
    math = cost(JobConfig(workload=WorkloadConfig.builtin("attention", batch=2, heads=3, head_dim=4, backend="math"), size=5, dtype="fp32"))
    assert math.memory_bytes == c.bytes + 2 * 6 * 25 * 4  # the scores and their softmax
    causal = cost(JobConfig(workload=WorkloadConfig.builtin("attention", batch=2, heads=3, head_dim=4, causal=True), size=5, dtype="fp32"))
    assert causal.flops == c.flops // 2


@pytest.mark.parametrize("causal", [False, True])
def test_attention_backends_agree_with_a_hand_written_softmax(causal):
    torch.manual_seed(0)
    outs = {}
    for backend in ("auto", "math", "flash"):
        fn, (q, k, v) = build(JobConfig(workload=WorkloadConfig.builtin("attention", batch=1, heads=2, head_dim=8, causal=causal,
                                                                 backend=backend), size=6, dtype="fp32"), "cpu")
        if backend == "auto":
            scores = q @ k.transpose(-1, -2) / 8**0.5
            if causal:
                scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
            expected = torch.softmax(scores, dim=-1) @ v
            args = (q, k, v)
        with torch.no_grad():
            outs[backend] = fn(*args)
        torch.testing.assert_close(outs[backend], expected, rtol=1e-4, atol=1e-5)


def test_cuda_only_attention_backends_are_refused_on_the_cpu():
    with pytest.raises(ValueError, match="workload.backend='efficient' is not allowed on cpu"):
        build(JobConfig(workload=WorkloadConfig.builtin("attention", backend="efficient"), size=8), "cpu")


@pytest.mark.parametrize("backend", ["naive", "inplace"])
def test_hand_written_attention_agrees_with_sdpa(backend):
    torch.manual_seed(0)
    w = WorkloadConfig.builtin("attention", batch=1, heads=2, head_dim=8, causal=True, backend=backend)
    fn, (q, k, v) = build(JobConfig(workload=w, size=6, dtype="fp32"), "cpu")
    with torch.no_grad():
        torch.testing.assert_close(fn(q, k, v), torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_hand_written_attention_cost_counts_every_score():
    def estimate(backend):
        w = WorkloadConfig.builtin("attention", batch=2, heads=3, head_dim=4, causal=True, backend=backend)
        return cost(JobConfig(workload=w, size=5, dtype="fp32"))

    naive, inplace, flash = estimate("naive"), estimate("inplace"), estimate("flash")
    assert naive.flops == 2 * flash.flops  # the mask is applied after every score is computed
    scores = 6 * 25 * 4  # (batch x heads) 5x5 fp32 score matrices
    # Two score matrices alive at once either way (naive's masked copy replaces the scores), the bool mask.
    assert naive.memory_bytes == inplace.memory_bytes == flash.memory_bytes + 2 * scores + 25
