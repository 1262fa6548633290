"""FLOPs and bytes of one call, against hand counts."""

from __future__ import annotations

import torch

from experiments.counting import count_flops, moved_bytes, storage_bytes, tensors


def test_a_matmul_plus_bias_counts_2mnk_plus_mn():
    a, b, bias = torch.randn(8, 16), torch.randn(16, 4), torch.randn(8, 4)
    assert count_flops(lambda: a @ b + bias) == 2 * 8 * 16 * 4 + 8 * 4  # the GEMM, then one add per element
    assert count_flops(lambda: torch.addmm(bias, a, b)) == 2 * 8 * 16 * 4 + 8 * 4


def test_views_share_their_storage_and_are_counted_once():
    x = torch.zeros(10, 10)  # 400 bytes
    assert storage_bytes([x, x[2:], x.t(), torch.zeros(3, dtype=torch.int64)]) == 400 + 24


def test_moved_bytes_read_inputs_and_weights_once_and_write_the_output_once():
    x, w = torch.zeros(4, 8), torch.zeros(8, 2)
    out = x @ w
    assert moved_bytes((x, x), [w], out) == 4 * 8 * 4 + 8 * 2 * 4 + 4 * 2 * 4


def test_tensors_are_found_in_outputs_of_every_shape():
    from dataclasses import dataclass

    @dataclass
    class Output:
        loss: torch.Tensor
        logits: torch.Tensor

    a, b, c = torch.zeros(1), torch.zeros(2), torch.zeros(3)
    found = list(tensors([{"x": [a, (b,)]}, Output(loss=c, logits=a), "not a tensor", 3]))
    assert [t.numel() for t in found] == [1, 2, 3, 1]
