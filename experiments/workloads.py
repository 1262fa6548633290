"""The workloads of the "Profiling in PyTorch" series (matmul_add, bmm, linear, mlp, attention):
what one profiled step calls, and its cost.

`cost()` needs no torch and no allocation, so a job can refuse a size that cannot fit before it
allocates anything. `build()` makes the inputs on the device and returns the function to call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from experiments.config import CUDA_ONLY_SDPA_BACKENDS, JobConfig, cuda_kernel_refusal

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Cost:
    """What one call of a workload costs, counted from its shapes."""

    flops: int  # multiply-adds count 2; each elementwise output element counts 1
    bytes: int  # compulsory traffic: inputs and weights read once, the output written once
    memory_bytes: int  # estimated peak footprint: inputs, weights and live intermediates


def cost(config: JobConfig) -> Cost:
    w, n, e = config.workload, config.size, ELEMENT_BYTES[config.dtype]
    if w.name == "matmul_add":
        return Cost(flops=2 * n**3 + n**2, bytes=4 * n * n * e, memory_bytes=5 * n * n * e)
    if w.name == "bmm":
        b = w.batch
        return Cost(
            flops=b * (2 * n**3 + n**2), bytes=4 * b * n * n * e, memory_bytes=5 * b * n * n * e
        )
    if w.name == "linear":
        i, o = w.in_features, w.out_features
        moved = (n * i + i * o + o + n * o) * e
        return Cost(flops=2 * n * i * o + n * o, bytes=moved, memory_bytes=moved)
    if w.name == "mlp":
        d, h = w.dim, w.hidden
        weights, rows = 3 * d * h, 2 * n * d  # gate, up, down; input and output rows
        return Cost(
            flops=6 * n * d * h + 2 * n * h,  # three GEMMs, then gelu and mul on (n, hidden)
            bytes=(weights + rows) * e,
            memory_bytes=(weights + rows + 3 * n * h) * e,  # gate, up and their product alive
        )
    if w.name == "attention":
        b, h, d = w.batch, w.heads, w.head_dim
        scores = b * h * n * n  # one (size, size) score matrix per batch and head
        io = 4 * b * h * n * d  # q, k, v read, the output written
        useful = 0.5 if w.causal else 1.0  # a causal mask leaves half the matrix to compute
        return Cost(
            flops=int(useful * (4 * scores * d + 2 * scores)),  # q·kᵀ and p·v; scale and softmax
            bytes=io * e,
            # Only the math backend holds the scores and their softmax; fused kernels tile them.
            memory_bytes=(io + (2 * scores if w.backend == "math" else 0)) * e,
        )
    raise ValueError(f"no cost model for workload {w.name!r}")


def build(config: JobConfig, device: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The function of one step and its arguments, made on `device` in the configured dtype.

    Modules are in eval() and calls are meant to run under torch.no_grad().
    """
    import torch
    import torch.nn.functional as F
    from torch import nn

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.dtype]
    w, n = config.workload, config.size
    factory = {"device": device, "dtype": dtype}

    if w.name in ("matmul_add", "bmm"):
        shape = (n, n) if w.name == "matmul_add" else (w.batch, n, n)
        x, weight, bias = (torch.randn(shape, **factory) for _ in range(3))
        return matmul_add, (x, weight, bias)

    if w.name == "linear":
        module = nn.Linear(w.in_features, w.out_features, bias=True, **factory).eval()
        return module, (torch.randn(n, w.in_features, **factory),)

    if w.name == "mlp":

        class GeGLU(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.gate = nn.Linear(w.dim, w.hidden, bias=False, **factory)
                self.up = nn.Linear(w.dim, w.hidden, bias=False, **factory)
                self.down = nn.Linear(w.hidden, w.dim, bias=False, **factory)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x))

        return GeGLU().eval(), (torch.randn(n, w.dim, **factory),)

    if w.name == "attention":
        q, k, v = (torch.randn(w.batch, w.heads, n, w.head_dim, **factory) for _ in range(3))
        return attention(w.causal, w.backend, device), (q, k, v)

    raise ValueError(f"no builder for workload {w.name!r}")


SDPA_BACKEND_NAMES = {
    "math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
}


def attention(causal: bool, backend: str, device: str) -> Callable[..., Any]:
    """One SDPA call; with a backend other than auto, inside sdpa_kernel(that backend), which
    torch.compile traces too."""
    import torch.nn.functional as F

    if backend in CUDA_ONLY_SDPA_BACKENDS and device != "cuda":
        raise ValueError(cuda_kernel_refusal(backend, f"on {device}"))
    if backend == "auto":

        def sdpa(q: Any, k: Any, v: Any) -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return sdpa
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, SDPA_BACKEND_NAMES[backend])

    def pinned_sdpa(q: Any, k: Any, v: Any) -> Any:
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return pinned_sdpa


def matmul_add(x: Any, w: Any, b: Any) -> Any:
    import torch

    return torch.add(torch.matmul(x, w), b)
