"""The workloads of the "Profiling in PyTorch" series, as factories of the workload seam
(experiments/seam.py): matmul_add, bmm, linear, mlp, attention. Each YAML file of
conf/workload/ names one of them by `_target_`; a user's own factory plugs in the same way.

Each factory carries its cost model (`@costed`), counted from the shapes without allocating
anything, so a job can refuse a size that cannot fit first. No torch at import.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal

from experiments.seam import AtLeast, Cost, CudaOnly, Workload, costed

Count = Annotated[int, AtLeast(1)]
SDPA_BACKENDS = ("auto", "math", "flash", "efficient", "cudnn")  # auto: torch chooses
CUDA_ONLY_SDPA_BACKENDS = ("efficient", "cudnn")
HAND_WRITTEN = ("naive", "inplace")  # Part 3's attention by hand: masked_fill, and masked_fill_
ATTENTION_BACKENDS = SDPA_BACKENDS + HAND_WRITTEN
SDPA_BACKEND_NAMES = {
    "math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
}


def _randn(*shape: int, dtype: Any, device: Any) -> Any:
    import torch

    return torch.randn(shape, dtype=dtype, device=device)


# --- Part 1: matmul + add ------------------------------------------------------------------------


def add_matmul(x: Any, w: Any, b: Any) -> Any:
    """The article's step: torch.add(torch.matmul(x, w), b)."""
    import torch

    return torch.add(torch.matmul(x, w), b)


def _matmul_add_cost(*, size: int, dtype: Any, batch: int = 1, **_: Any) -> Cost:
    n, e = size, dtype.itemsize
    return Cost(flops=batch * (2 * n**3 + n**2), bytes=4 * batch * n * n * e,
                memory_bytes=5 * batch * n * n * e, param_bytes=3 * batch * n * n * e)


@costed(_matmul_add_cost)
def matmul_add(*, size: int, dtype: Any, device: Any) -> Workload:
    """torch.add(torch.matmul(x, w), b) with x, w, b all (size, size)."""
    return Workload(add_matmul, tuple(_randn(size, size, dtype=dtype, device=device) for _ in range(3)))


@costed(_matmul_add_cost)
def bmm(*, size: int, dtype: Any, device: Any, batch: Count = 8) -> Workload:
    """matmul_add with a leading batch axis: x, w, b all (batch, size, size)."""
    return Workload(add_matmul, tuple(_randn(batch, size, size, dtype=dtype, device=device) for _ in range(3)))


# --- Part 2: nn.Linear and the GeGLU MLP ------------------------------------------------------------


def _linear_cost(*, size: int, dtype: Any, in_features: int = 32, out_features: int = 64, **_: Any) -> Cost:
    n, i, o, e = size, in_features, out_features, dtype.itemsize
    moved = (n * i + i * o + o + n * o) * e
    return Cost(flops=2 * n * i * o + n * o, bytes=moved, memory_bytes=moved, param_bytes=(i * o + o) * e)


@costed(_linear_cost)
def linear(*, size: int, dtype: Any, device: Any, in_features: Count = 32, out_features: Count = 64) -> Workload:
    """nn.Linear(in_features, out_features, bias=True) on (size, in_features) rows."""
    from torch import nn

    module = nn.Linear(in_features, out_features, bias=True, device=device, dtype=dtype)
    return Workload(module, (_randn(size, in_features, dtype=dtype, device=device),))


def _mlp_cost(*, size: int, dtype: Any, dim: int = 768, hidden: int = 3072, **_: Any) -> Cost:
    n, d, h, e = size, dim, hidden, dtype.itemsize
    weights, rows = 3 * d * h, 2 * n * d  # gate, up, down; input and output rows
    return Cost(
        flops=6 * n * d * h + 2 * n * h,  # three GEMMs, then gelu and mul on (n, hidden)
        bytes=(weights + rows) * e,
        memory_bytes=(weights + rows + 3 * n * h) * e,  # gate, up and their product alive
        param_bytes=weights * e,
    )


@costed(_mlp_cost)
def mlp(*, size: int, dtype: Any, device: Any, dim: Count = 768, hidden: Count = 3072) -> Workload:
    """GeGLU block down(gelu_tanh(gate(x)) * up(x)), no biases, on (size, dim) rows."""
    import torch.nn.functional as F
    from torch import nn

    class GeGLU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(dim, hidden, bias=False, device=device, dtype=dtype)
            self.up = nn.Linear(dim, hidden, bias=False, device=device, dtype=dtype)
            self.down = nn.Linear(hidden, dim, bias=False, device=device, dtype=dtype)

        def forward(self, x: Any) -> Any:
            return self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x))

    return Workload(GeGLU(), (_randn(size, dim, dtype=dtype, device=device),))


# --- Part 3: attention ------------------------------------------------------------------------------


def _attention_needs_cuda(*, backend: str = "auto", **_: Any) -> CudaOnly | None:
    """A CUDA-only SDPA backend, and what runs elsewhere."""
    if backend not in CUDA_ONLY_SDPA_BACKENDS:
        return None
    *others, last = [b for b in ATTENTION_BACKENDS if b not in CUDA_ONLY_SDPA_BACKENDS]
    return CudaOnly(f"workload.backend={backend!r}", "it is a CUDA kernel", f"choose {', '.join(others)} or {last}")


def _attention_cost(*, size: int, dtype: Any, batch: int = 4, heads: int = 8, head_dim: int = 64,
                    causal: bool = False, backend: str = "auto", **_: Any) -> Cost:
    n, e = size, dtype.itemsize
    scores = batch * heads * n * n  # one (size, size) score matrix per batch and head
    io = 4 * batch * heads * n * head_dim  # q, k, v read, the output written
    # A causal mask leaves half the matrix to compute, to the SDPA kernels that skip it; the
    # hand-written attention computes every score, then masks.
    useful = 0.5 if causal and backend not in HAND_WRITTEN else 1.0
    # The math backend and the hand-written ones hold two score matrices at once (the scores and
    # their scaled, masked or softmaxed successor: naive's masked copy replaces the scores, as
    # measured) and, causal by hand, the mask, one byte per score; fused kernels tile them.
    held = (2 if backend in ("math", *HAND_WRITTEN) else 0) * scores * e
    mask = n * n if causal and backend in HAND_WRITTEN else 0
    return Cost(
        flops=int(useful * (4 * scores * head_dim + 2 * scores)),  # q·kᵀ and p·v; scale and softmax
        bytes=io * e,
        memory_bytes=io * e + held + mask,
        param_bytes=3 * io // 4 * e,
    )


@costed(_attention_cost)
def attention(*, size: int, dtype: Any, device: Any, batch: Count = 4, heads: Count = 8,
              head_dim: Count = 64, causal: bool = False,
              backend: Literal[ATTENTION_BACKENDS] = "auto") -> Workload:
    """Attention over q, k, v all (batch, heads, size, head_dim): size is the sequence length.
    backend: an SDPA kernel pinned with sdpa_kernel (auto: torch chooses), or Part 3's attention
    by hand, `naive` (out-of-place masked_fill) or `inplace` (masked_fill_), whose causal mask is
    built once here, outside the step."""
    qkv = tuple(_randn(batch, heads, size, head_dim, dtype=dtype, device=device) for _ in range(3))
    if backend in HAND_WRITTEN:
        import torch

        mask = torch.ones(size, size, dtype=torch.bool, device=device).triu(1) if causal else None
        return Workload(hand_attention(mask, head_dim**-0.5, inplace=backend == "inplace"), qkv)
    return Workload(sdpa_step(causal, backend, str(getattr(device, "type", device))), qkv)


def hand_attention(mask: Any, scale: float, *, inplace: bool) -> Callable[..., Any]:
    """Part 3's attention by hand: matmul with kᵀ, times the scale, masked_fill (or masked_fill_)
    of the masked scores with -inf, softmax, matmul with v."""
    import torch

    def attend(q: Any, k: Any, v: Any) -> Any:
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        if mask is not None:
            scores = scores.masked_fill_(mask, float("-inf")) if inplace else scores.masked_fill(mask, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    return attend


attention.needs_cuda = _attention_needs_cuda  # type: ignore[attr-defined]


def sdpa_step(causal: bool, backend: str, device: str) -> Callable[..., Any]:
    """One SDPA call; with a backend other than auto, inside sdpa_kernel(that backend), which
    torch.compile traces too."""
    import torch.nn.functional as F

    cuda_only = _attention_needs_cuda(backend=backend)
    if cuda_only and device != "cuda":
        raise ValueError(cuda_only.refusal(f"on {device}"))
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
