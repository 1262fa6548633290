"""A small pre-norm transformer block as a user workload: profile it over sequence lengths,
inference and training, eager and compiled, without touching the project:

    python experiments/run.py -m workload=custom workload._target_=examples.transformer:make_block \
        workload.dim=256,512 size=128,512 compile=false,true train=false,true

The factory gets `size` (here the sequence length), `dtype`, `device` and its own settings (dim,
heads, batch) as keyword arguments and returns (module, args). It brings no cost model, so the
job counts its FLOPs with torch's FlopCounterMode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x)): causal self-attention with SDPA and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(dim, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def make_block(*, size: int, dtype: torch.dtype, device: torch.device,
               dim: int = 256, heads: int = 4, batch: int = 1):
    """One Block of width `dim` on `batch` sequences of `size` tokens."""
    if dim % heads:
        raise ValueError(f"dim={dim} is not a multiple of heads={heads}")
    block = Block(dim, heads).to(device=device, dtype=dtype)
    return block, (torch.randn(batch, size, dim, device=device, dtype=dtype),)
