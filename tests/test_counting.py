"""FLOPs and bytes of one call, against hand counts."""

from __future__ import annotations

import warnings

import pytest
import torch

from experiments.counting import count_flops, moved_bytes, storage_bytes, tensors, weight_reads


def test_a_matmul_plus_bias_counts_2mnk_plus_mn():
    a, b, bias = torch.randn(8, 16), torch.randn(16, 4), torch.randn(8, 4)
    assert count_flops(lambda: a @ b + bias) == (2 * 8 * 16 * 4 + 8 * 4, [])  # the GEMM, then one add per element
    assert count_flops(lambda: torch.addmm(bias, a, b)) == (2 * 8 * 16 * 4 + 8 * 4, [])
    # the fused addmm + activation of nn.TransformerEncoder's fast path: the GEMM, its bias, its gelu
    fused = count_flops(lambda: torch.ops.aten._addmm_activation(bias, a, b, use_gelu=True))
    assert fused == (2 * 8 * 16 * 4 + 8 * 4 + 8 * 4, [])
    # in place, and addbmm: the batch's products summed into one output
    out = torch.zeros(8, 4)
    assert count_flops(lambda: out.addmm_(a, b)) == (2 * 8 * 16 * 4 + 8 * 4, [])
    batch_a, batch_b = torch.randn(3, 8, 16), torch.randn(3, 16, 4)
    assert count_flops(lambda: torch.addbmm(bias, batch_a, batch_b)) == (3 * 2 * 8 * 16 * 4 + 8 * 4, [])


def test_complex_products_and_elementwise_ops_count_real_flops():
    """A complex multiply-add is 8 real FLOPs (torch's formulas count 2), an elementwise op on a
    complex element 2; a real workload's count is unchanged."""
    a, b = torch.randn(8, 16, dtype=torch.complex64), torch.randn(16, 4, dtype=torch.complex64)
    bias = torch.randn(8, 4, dtype=torch.complex64)
    assert count_flops(lambda: a @ b) == (8 * 8 * 16 * 4, [])
    assert count_flops(lambda: a @ b + bias) == (8 * 8 * 16 * 4 + 2 * 8 * 4, [])
    assert count_flops(lambda: torch.addmm(bias, a, b)) == (8 * 8 * 16 * 4 + 2 * 8 * 4, [])
    assert count_flops(lambda: torch.bmm(a[None], b[None])) == (8 * 8 * 16 * 4, [])
    real_a, real_b = a.real.contiguous(), b.real.contiguous()
    assert count_flops(lambda: real_a @ real_b) == (2 * 8 * 16 * 4, [])


def test_attention_on_the_cpu_counts_its_two_matrix_products():
    """F.scaled_dot_product_attention on the CPU runs _scaled_dot_product_flash_attention_for_cpu,
    which torch's counter has no formula for: q @ k^T and p @ v, 2·b·h·l·s·e each (and five such
    products in the backward, as torch counts its other fused attentions)."""
    import torch.nn.functional as F

    b, h, l, s, e = 2, 3, 16, 24, 8
    q, k, v = torch.randn(b, h, l, e), torch.randn(b, h, s, e), torch.randn(b, h, s, e)
    flops, uncounted = count_flops(lambda: F.scaled_dot_product_attention(q, k, v))
    assert uncounted == [] and flops == 2 * (2 * b * h * l * s * e)
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    grad = torch.randn(b, h, l, e)
    with_backward, _ = count_flops(lambda: F.scaled_dot_product_attention(q, k, v).backward(grad))
    assert with_backward - flops == 5 * (2 * b * h * l * s * e)


def test_operators_whose_matrix_products_no_formula_counts_are_named_not_counted_as_zero():
    """An LSTM on the CPU (mkldnn_rnn_layer) and nn.TransformerEncoder's fused inference path run
    matrix products that torch's counter has no formula for: the count names them."""
    lstm = torch.nn.LSTM(16, 32)
    x = torch.randn(5, 2, 16)
    with torch.no_grad():
        flops, uncounted = count_flops(lambda: lstm(x))
    if torch.backends.mkldnn.is_available():
        assert uncounted == ["aten::mkldnn_rnn_layer"]
    else:  # the LSTM runs as linear layers: counted, 4 gates of 2 GEMMs per step (x and h)
        assert uncounted == [] and flops >= 5 * 2 * (2 * 2 * 16 * 4 * 32 + 2 * 2 * 32 * 4 * 32)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    with torch.no_grad():
        _, uncounted = count_flops(lambda: encoder(torch.randn(2, 6, 32)))
    assert uncounted == ["aten::_transformer_encoder_layer_fwd"]
    # in training the same encoder runs its layers op by op: counted
    encoder.train()
    _, uncounted = count_flops(lambda: encoder(torch.randn(2, 6, 32)))
    assert uncounted == []


@torch.library.custom_op("profsweep_test::linear_gelu", mutates_args=())
def _linear_gelu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w)


def test_ffts_and_ops_outside_atens_namespace_are_named_not_counted_as_zero():
    """helper-44: a custom op's matrix product, torch.fft.fft2 and a dynamically quantized Linear
    (quantized::linear_dynamic) counted 0 FLOPs, given as counted; record_function's own ops
    (profiler::) in a training step are not work."""
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    assert count_flops(lambda: _linear_gelu(x, w)) == (0, ["profsweep_test::linear_gelu"])
    assert count_flops(lambda: torch.fft.fft2(x))[1] == ["aten::_fft_c2c"]
    assert count_flops(lambda: torch.fft.rfft(x))[1] == ["aten::_fft_r2c"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation
        quantized = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(8, 8)),
                                                           {torch.nn.Linear}, dtype=torch.qint8)
    assert count_flops(lambda: quantized(x))[1] == ["quantized::linear_dynamic"]
    linear = torch.nn.Linear(8, 8)

    def step():
        with torch.profiler.record_function("forward"):
            loss = linear(x).sum()
        loss.backward()

    # the forward's product and bias add, the weight's gradient (x needs none, the bias's is a sum)
    assert count_flops(step) == (2 * 8 * 8 * 8 + 8 * 8 + 2 * 8 * 8 * 8, [])


def test_factorizations_solves_and_sparse_products_are_named_not_counted_as_zero():
    """helper-53: torch.linalg.solve in a model counted 0 FLOPs for its LU factorization (82% of the
    step), given as counted, and achieved FLOP/s was filled in from the Linear beside it alone."""
    a, b = torch.randn(16, 16) + 16 * torch.eye(16), torch.randn(16, 4)
    linear = torch.nn.Linear(16, 16)
    flops, uncounted = count_flops(lambda: linear(torch.linalg.solve(a, b).T))
    assert uncounted == ["aten::_linalg_solve_ex"] and flops == 2 * 4 * 16 * 16 + 4 * 16
    for op in (torch.linalg.inv, torch.linalg.svd, torch.linalg.qr, torch.linalg.eigh, torch.linalg.slogdet,
               torch.linalg.matrix_exp, torch.linalg.pinv, torch.det, lambda m: torch.hspmm(m.to_sparse(), m)):
        assert count_flops(lambda: op(a))[1], op
    assert count_flops(lambda: torch.linalg.vector_norm(a)) == (0, [])  # a reduction: no product
    # helper-54: cdist at p=2 runs _euclidean_dist (counted 0, as counted); a sparse operand of
    # mm (`adj @ x`) was counted as a dense product, 16x the work of this diagonal
    y = torch.randn(40, 4)
    assert count_flops(lambda: torch.cdist(y, y)) == (0, ["aten::_euclidean_dist"])
    diagonal = torch.eye(16).to_sparse()
    assert count_flops(lambda: diagonal @ b) == (0, ["aten::mm (sparse)"])
    assert count_flops(lambda: torch.eye(16) @ b) == (2 * 16 * 16 * 4, [])


def test_a_convolutions_bias_counts_as_addmms_does():
    """helper-53: torch's formula counts a convolution's products alone; a 1x1 convolution counted
    less than the Linear it equals. The bias adds 1 per output element, as addmm's does."""
    x = torch.randn(2, 8, 16, 16)
    conv = torch.nn.Conv2d(8, 16, 3, padding=1)
    products = 2 * 2 * 16 * 16 * 16 * 8 * 9  # 2 per multiply-add: batch, out channels, 16x16 outputs, 8x3x3 each
    assert count_flops(lambda: conv(x)) == (products + 2 * 16 * 16 * 16, [])
    conv.bias = None
    assert count_flops(lambda: conv(x)) == (products, [])
    pointwise = torch.nn.Conv2d(8, 8, 1)
    linear = torch.nn.Linear(8, 8)
    assert count_flops(lambda: pointwise(x[:1, :, :1, :1]))[0] == count_flops(lambda: linear(x[0, :, 0, :1].T))[0]


def test_copies_count_no_flops_as_casts_do():
    """helper-56: aten::clone is tagged pointwise, so `.contiguous()` of a transposed tensor and
    `.clone()` counted 1 FLOP per element, against the docstring (copies are not counted) and a
    dtype cast (`_to_copy`, 0): an attention-style reshape inflated the count."""
    x = torch.randn(64, 64)
    assert count_flops(lambda: x.t().contiguous()) == (0, [])
    assert count_flops(lambda: x.clone()) == (0, [])
    assert count_flops(lambda: x.double()) == (0, [])
    assert count_flops(lambda: x + x) == (64 * 64, [])  # arithmetic still counts
    w = torch.randn(64, 64)
    assert count_flops(lambda: (x @ w).view(64, 4, 16).transpose(0, 1).contiguous()) == (2 * 64 ** 3, [])


def test_matrix_vector_and_dot_products_count_as_mm_does():
    """helper-56: torch's counter has no formula for mv, addmv, dot or vdot, so one `M @ v` in a
    model left its whole FLOP count "not counted"; by hand: 2 per multiply-add, the bias 1 each."""
    m, v, w, b = torch.randn(64, 32), torch.randn(32), torch.randn(32), torch.randn(64)
    assert count_flops(lambda: m @ v) == (2 * 64 * 32, [])
    assert count_flops(lambda: torch.addmv(b, m, v)) == (2 * 64 * 32 + 64, [])
    assert count_flops(lambda: v @ w) == (2 * 32, []) and count_flops(lambda: torch.vdot(v, w)) == (2 * 32, [])
    z = torch.randn(64, 32, dtype=torch.complex64)
    assert count_flops(lambda: z @ v.to(torch.complex64)) == (8 * 64 * 32, [])  # 8 real FLOPs a multiply-add


def test_names_that_say_matrix_products():
    from experiments.counting import does_products

    said = ["mkldnn_rnn_layer", "_transformer_encoder_layer_fwd", "_int_mm", "conv2d", "slow_conv3d_forward",
            "_trilinear", "_cdist_forward",
            "_native_multi_head_attention", "_thnn_fused_lstm_cell", "cudnn_convolution", "addmv",
            "linalg_lu_factor_ex", "_linalg_svd", "cholesky_solve", "linalg_inv_ex", "linalg_matrix_exp", "inverse",
            "hspmm", "geqrf"]
    not_said = ["upsample_bilinear2d", "upsample_linear1d", "_convert_indices_from_coo_to_csr", "mvlgamma",
                "native_layer_norm", "add", "embedding", "max_pool2d_with_indices", "commit", "conv4d",
                "linalg_vector_norm", "linalg_cross", "slice_inverse", "matrix_H", "detach"]
    assert [n for n in said if not does_products(n)] == []
    assert [n for n in not_said if does_products(n)] == []


def test_views_share_their_storage_and_are_counted_once():
    x = torch.zeros(10, 10)  # 400 bytes
    assert storage_bytes([x, x[2:], x.t(), torch.zeros(3, dtype=torch.int64)]) == 400 + 24


def test_a_sparse_tensor_counts_its_indices_and_values():
    """helper-53: a sparse adjacency (no storage of its own) counted 0 bytes in bytes_per_call, the
    memory estimate and the peak. COO: 2 int64 indices and a value per nonzero; CSR: a row pointer
    per row and one more, a column index and a value per nonzero (its column indices a view of the
    COO indices it was made from: their own extent, not that storage's)."""
    dense = torch.zeros(50, 40)
    dense[torch.arange(50), torch.arange(50) % 40] = 1.0
    coo = dense.to_sparse()
    assert coo._nnz() == 50 and storage_bytes([coo]) == 50 * (2 * 8 + 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CSR's beta warning
        csr = coo.to_sparse_csr()
    assert storage_bytes([csr]) == 51 * 8 + 50 * (8 + 4)
    assert storage_bytes([coo, coo]) == storage_bytes([coo])  # once
    assert moved_bytes((coo, torch.zeros(40, 8)), [], torch.zeros(50, 8)) == 50 * 20 + 40 * 8 * 4 + 50 * 8 * 4


def test_a_view_moves_the_bytes_it_spans_not_its_whole_storage():
    data = torch.zeros(1000, 8)
    assert moved_bytes((data[:4],), [], None) == 4 * 8 * 4  # rows of a bigger tensor
    assert moved_bytes((data[:4], data[2:6]), [], None) == 6 * 8 * 4  # overlapping views: each byte once
    assert moved_bytes((data[:, 0],), [], None) == 1000 * 4  # a column: its own elements, not the gaps
    assert moved_bytes((data, data[:4]), [], None) == 1000 * 8 * 4  # within the whole: the whole once
    assert moved_bytes((data.expand(3, 1000, 8),), [], None) == 1000 * 8 * 4  # a broadcast dimension once
    assert moved_bytes(({"unused": data},), [], None) == 0  # a mapping's tensors: the job counts them where read


def test_moved_bytes_read_inputs_and_weights_once_and_write_the_output_once():
    x, w = torch.zeros(4, 8), torch.zeros(8, 2)
    out = x @ w
    assert moved_bytes((x, x), [w], out) == 4 * 8 * 4 + 8 * 2 * 4 + 4 * 2 * 4


def test_an_embedding_is_read_as_the_distinct_rows_looked_up_and_other_weights_whole():
    emb, head = torch.nn.Embedding(1000, 8), torch.nn.Linear(8, 4)
    ids = torch.tensor([[1, 2, 2, 5]])  # 3 distinct rows of 8 fp32
    row = 8 * 4
    reads = weight_reads(lambda: head(emb(ids)), [*emb.parameters(), *head.parameters()])
    assert reads.weights == 3 * row + (8 * 4 + 4) * 4 and reads.output.shape == (1, 4, 4)
    # every way of looking rows up; a lookup twice reads a row once
    assert weight_reads(lambda: emb.weight.index_select(0, ids[0]), [emb.weight]).weights == 3 * row
    assert weight_reads(lambda: emb.weight[ids[0]], [emb.weight]).weights == 3 * row
    assert weight_reads(lambda: torch.nn.functional.embedding_bag(ids, emb.weight), [emb.weight]).weights == 3 * row
    assert weight_reads(lambda: (emb(ids), emb(torch.tensor([5, 7]))), [emb.weight]).weights == 4 * row
    # the same table also read whole (tied to a head; broadcast): whole, and once
    tied = torch.nn.Linear(8, 1000, bias=False)
    tied.weight = emb.weight
    assert weight_reads(lambda: tied(emb(ids)), [emb.weight]).weights == 1000 * row
    assert weight_reads(lambda: emb.weight.expand(3, 1000, 8).sum(), [emb.weight]).weights == 1000 * row
    # a buffer sliced before use: the slice; one no op was seen reading: whole (a kernel the reading
    # does not see may read it)
    mask, unused = torch.ones(100, 100), torch.ones(7)
    reads = weight_reads(lambda: torch.zeros(5, 5) + mask[:5, :5], [mask, unused])
    assert reads.weights == 25 * 4 + 7 * 4 and reads.unseen == 7 * 4  # the whole one, said (helper-44)


def _trains(model, optimizer, call):
    def step():
        call().sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def test_a_trained_weight_counts_what_its_gradient_holds():
    """A sparse embedding's gradient holds the rows looked up, and SGD updates those alone (the
    whole table, 3x for SGD, read 768 MB where the step moved kilobytes: helper-40); a weight used
    under no_grad gets no gradient and no update; a dense one, all of it."""
    ids = torch.tensor([[1, 2, 2, 5]])
    row = 8 * 4
    sparse = torch.nn.Embedding(1000, 8, sparse=True)
    step = _trains(sparse, torch.optim.SGD(sparse.parameters(), lr=0.1), lambda: sparse(ids))
    reads = weight_reads(step, [sparse.weight], trained=[sparse.weight])
    assert (reads.weights, reads.trained, reads.graded) == (3 * row, 3 * row, 1000 * row)  # state: whole
    # its FLOPs, by hand: the sparse gradient (the 4 rows looked up, uncoalesced: 32 values) is copied
    # (aten::clone: a copy, no FLOPs) and added into the weight (32); not 8,000 a table-wide add
    flops, _ = count_flops(step)
    assert flops == 4 * 8
    dense = torch.nn.Embedding(1000, 8)
    step = _trains(dense, torch.optim.SGD(dense.parameters(), lr=0.1), lambda: dense(ids))
    reads = weight_reads(step, [dense.weight], trained=[dense.weight])
    assert (reads.weights, reads.trained) == (1000 * row, 1000 * row)
    frozen, head, x = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.ones(2, 8)
    weights = [*frozen.parameters(), *head.parameters()]

    def forward():
        with torch.no_grad():
            h = frozen(x)
        return head(h)

    reads = weight_reads(_trains(None, torch.optim.SGD(weights, lr=0.1), forward), weights, trained=weights)
    assert (reads.weights, reads.trained, reads.graded) == (2 * (8 * 8 + 8) * 4, (8 * 8 + 8) * 4, (8 * 8 + 8) * 4)


def test_weights_beside_other_layouts_and_inside_higher_order_ops_count_whole():
    """A nested (jagged) input is no sparse one; a sparse operand caps only the weight it is added
    into in place; an op the reading cannot see into (torch.cond) counts every storage whole,
    where it made the count fail and bytes_per_call None (helper-42)."""
    lin = torch.nn.Linear(64, 64, bias=False)
    whole = 64 * 64 * 4
    jagged = torch.nested.nested_tensor([torch.ones(3, 64), torch.ones(5, 64)], layout=torch.jagged)
    assert weight_reads(lambda: lin(jagged), [lin.weight]).weights == whole
    w = torch.ones(100, 64)
    picked = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, 1]]), torch.ones(2), (2, 100))
    one = torch.sparse_coo_tensor(torch.tensor([[3], [5]]), torch.ones(1), (100, 64))
    assert weight_reads(lambda: torch.sparse.mm(picked, w), [w]).weights == 100 * 64 * 4
    assert weight_reads(lambda: w + one, [w]).weights == 100 * 64 * 4  # a copy of all of it
    assert weight_reads(lambda: w.add_(one), [w]).weights == 4  # in place: the one value it holds
    x = torch.ones(2, 64)
    cond = lambda: torch.cond(x.sum() > 0, lambda v: lin(v), lambda v: lin(v) * 2, (x,))  # noqa: E731
    assert weight_reads(cond, [lin.weight]).weights == whole


def test_a_step_that_writes_into_its_inputs_is_named():
    x, out, kept = torch.ones(3), torch.empty(3), torch.ones(3)
    assert weight_reads(lambda: x.mul_(1.5), [], inputs=[x]).wrote_inputs == ["aten::mul_"]
    assert weight_reads(lambda: torch.add(kept, 1, out=out), [], inputs=[kept, out]).wrote_inputs == ["aten::add"]
    assert weight_reads(lambda: (kept + 1, x[:2].add_(1)), [], inputs=[kept]).wrote_inputs == []
    # a trained input (a function's float input, which the optimizer updates in place) is not one
    w = torch.ones(3, requires_grad=True)
    step = _trains(None, torch.optim.SGD([w], lr=0.1), lambda: w * 2)
    assert weight_reads(step, [w], trained=[w], inputs=[w]).wrote_inputs == []


def test_tensors_are_found_in_outputs_of_every_shape():
    from dataclasses import dataclass

    @dataclass
    class Output:
        loss: torch.Tensor
        logits: torch.Tensor

    a, b, c = torch.zeros(1), torch.zeros(2), torch.zeros(3)
    found = list(tensors([{"x": [a, (b,)]}, Output(loss=c, logits=a), "not a tensor", 3]))
    assert [t.numel() for t in found] == [1, 2, 3, 1]

    class Plain:  # an output class of its own, as some libraries return: its attributes' tensors
        def __init__(self):
            self.logits, self.extra = b, {"past": [c]}
            self.model = torch.nn.Linear(2, 2)  # a module's tensors are its parameters, counted as such
            self.me = self  # a cycle ends at the depth limit

    assert [t.numel() for t in tensors([Plain()], objects=True)] == [2, 3]
    assert moved_bytes((), [], Plain()) == (2 + 3) * 4
    # an input's objects are not read (a dataset or optimizer it holds is no call's traffic); a
    # container is read however deep
    assert list(tensors([Plain()])) == [] and moved_bytes((Plain(),), [], None) == 0
    assert moved_bytes(([[[[[[b]]]]]],), [], None) == 2 * 4


def test_a_series_whose_flops_were_not_counted_says_so_before_its_regime():
    from analysis.report.conclusions import _uncounted

    row = {"workload": "make_lstm", "dtype": "fp32", "compile": False, "warmup": False, "size": 32,
           "flops_uncounted": "aten::mkldnn_rnn_layer"}
    said = _uncounted([row, {**row, "size": 64, "flops_uncounted": "aten::mkldnn_rnn_layer, aten::_int_mm"}])
    assert len(said) == 1 and said[0].topic == "flops"
    assert "FLOPs not counted: aten::_int_mm, aten::mkldnn_rnn_layer ran" in said[0].text
    assert _uncounted([{**row, "flops_uncounted": float("nan")}]) == []  # a summary's empty cell


def test_the_dtype_a_steps_matrix_products_ran_in_is_seen_under_autocast():
    """fp32 Linears under torch.autocast to bf16 ran every matmul in bf16, and the job said fp32
    (its parameters'), holding the step against the fp32 peak (a reviewer's finding)."""
    from experiments.job import _products_ran_in

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    x = torch.randn(4, 8)

    def autocast_step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)

    reads = weight_reads(autocast_step, list(model.parameters()))
    assert reads.products == {torch.bfloat16: 2}
    assert weight_reads(lambda: model(x), list(model.parameters())).products == {torch.float32: 2}
    out = {"ran_dtype": "fp32", "warnings": []}
    _products_ran_in(out, reads.products)
    assert out["ran_dtype"] == "bf16" and "matrix products ran in bf16 (torch.autocast" in out["warnings"][0]
    plain = {"ran_dtype": "fp32", "warnings": []}
    _products_ran_in(plain, {torch.float32: 2})
    _products_ran_in(plain, {torch.float32: 1, torch.bfloat16: 1})  # mixed: the parameters' dtype stands
    assert plain == {"ran_dtype": "fp32", "warnings": []}
    # integer products (an int64 mm, whose operands no floating dtype has a say in: ran_dtype was
    # empty and the step was held against the grid's bf16 peak and its ridge, "memory-bound")
    a = torch.randint(-8, 8, (16, 16))
    assert weight_reads(lambda: a @ a, []).products == {torch.int64: 1}
    ints = {"ran_dtype": None, "warnings": []}
    _products_ran_in(ints, {torch.int64: 1})
    assert ints["ran_dtype"] == "int64" and "integer arithmetic" in ints["warnings"][0]
    # products in one of the dtypes the step holds (fp32 weights, complex64 inputs it only adds):
    # no autocast and no cast to warn of (helper-56), held against that dtype's peak
    held = {"ran_dtype": "fp32+complex64", "warnings": []}
    _products_ran_in(held, {torch.float32: 3})
    assert held == {"ran_dtype": "fp32", "warnings": []}



@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD])
def test_an_optimizers_foreach_path_counts_what_its_loop_counts_and_a_fused_one_is_named(optimizer):
    """helper-56: the `_foreach_*` ops of an optimizer's foreach path (torch's default on CUDA) are
    not tagged pointwise, so AdamW's update counted 0 there against 8 FLOPs a parameter in its loop
    path (the CPU's default): one model's training FLOPs differed by the device. A fused update
    (fused=True) has no formula: named, so the count is not given as complete."""
    def counted(update: bool = True, **how) -> tuple[int, list[str]]:
        torch.manual_seed(0)
        model, x = torch.nn.Linear(64, 32), torch.randn(8, 64)
        extra = {"momentum": 0.9} if optimizer is torch.optim.SGD else {}
        opt = optimizer(model.parameters(), lr=1e-3, **extra, **how)

        def step() -> None:
            model(x).sum().backward()
            if update:
                opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # the optimizer's state made
        return count_flops(step)

    loop, foreach = counted(foreach=False), counted(foreach=True)
    assert loop == foreach and not loop[1]
    assert loop[0] - counted(update=False)[0] >= 3 * (64 * 32 + 32)  # the update: a few FLOPs a parameter
    if optimizer is not torch.optim.SGD:
        assert counted(fused=True)[1] == [f"aten::_fused_{optimizer.__name__.lower()}_"]


def test_foreach_ops_count_their_arithmetic_only():
    """1 per element of the list written; a copy or a reduction, none (helper-57); a Scalar before
    the list (pow.ScalarAndTensor) counts the list after it."""
    a = [torch.randn(10), torch.randn(5)]
    assert count_flops(lambda: torch._foreach_add(a, 1.0)) == (15, [])
    assert count_flops(lambda: torch._foreach_pow(2.0, a)) == (15, [])
    assert count_flops(lambda: torch._foreach_clone(a)) == (0, [])
    assert count_flops(lambda: torch._foreach_norm(a)) == (0, [])
