"""Counts taken outside the profiled steps: FLOPs of a workload without a cost model, the bytes it
must move, and its peak memory on the CPU. Each runs one extra call, after the profiled steps,
so neither the timed first call nor a profiled step is touched.

FLOPs: torch.utils.flop_counter.FlopCounterMode over one eager call. Its own formulas count the
matrix products (mm, addmm, bmm, convolutions, attention: multiply-adds count 2; mv, addmv, dot
and vdot, which it has none for, by ours alike); we add, as the
hand cost models do, 1 FLOP per output element of every op torch tags `pointwise` (add, mul,
gelu, where, ...) and the bias add of addmm and baddbmm (and of _addmm_activation, with its
activation), and count the CPU's fused attention (_scaled_dot_product_flash_attention_for_cpu and
its backward) as torch counts the other fused attentions: its matrix products; an optimizer's
`_foreach_*` ops (its foreach path) count as the pointwise ops they loop, 1 per element written,
and a fused optimizer update (`_fused_adamw_`) is named as not counted. Reductions, softmax,
norms and copies are not counted. Complex tensors are counted in real FLOPs: a complex
multiply-add is 8 (4 multiplies, 2 adds for the product, 2 for the sum) where torch counts 2, and
an elementwise op counts 2 per complex element it writes (the rule of 1 per output element,
applied to its two real numbers: `z * z` counts 2, as `x + y` counts 1; `z.abs()` writes reals, 1). A complex convolution is counted as what runs:
torch splits it into three real ones (Gauss's trick) before the counter sees it.

An operator that does matrix products but has no formula (by a word of its name: mm, linear,
conv, attention, rnn, lstm, transformer, ...; e.g. the LSTM's mkldnn_rnn_layer on the CPU, or
nn.TransformerEncoder's fused inference path), an FFT, or an operator outside aten's namespace
(quantized::linear_dynamic, a custom op) would count as 0: where one ran, the count is
incomplete and not given (`count_flops` names them; the job records no FLOPs, and says why).

Bytes: inputs read and the output written once; of the weights what one eager call reads
(`weight_reads`: an embedding's distinct rows, a sliced buffer's slice, everything else whole).

Peak memory on the CPU: the bytes of the live tensors on the device (inputs, parameters,
gradients, optimizer state, anything a factory keeps), plus the peak that the CPU allocator
reaches above them during one extra call profiled with profile_memory=True (the trace's
"Total Allocated").
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import tempfile
import warnings
from typing import Any, Callable, Iterable, Mapping

import torch
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode  # FlopCounterMode's base; docs: Extending PyTorch
from torch.utils.flop_counter import FlopCounterMode


def _elements(out_shape: Any) -> int:
    if isinstance(out_shape, (list, tuple)) and out_shape and isinstance(out_shape[0], (list, tuple, torch.Size)):
        return sum(_elements(s) for s in out_shape)
    return math.prod(out_shape) if out_shape is not None else 0


SPARSE = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def _stored(t: torch.Tensor) -> int:
    """The elements a tensor holds: a sparse one's stored values, not its dense shape."""
    if t.layout == torch.sparse_coo:
        return t._values().numel()
    if t.layout in SPARSE:  # CSR, CSC, BSR, BSC
        return t.values().numel()
    return t.numel()


def _held(t: torch.Tensor) -> int:
    """`_stored`, a sparse COO tensor's values counted once per index (coalesced)."""
    return _stored(t.coalesce() if t.layout == torch.sparse_coo else t)


def _pointwise_flop(*args: Any, out_val: Any = None, out_shape: Any = None, **kwargs: Any) -> int:
    """1 FLOP per output element; where an input is sparse (a sparse gradient added into a
    weight), per value it holds: the op works on those alone."""
    sparse = [t for t in tensors([args, kwargs]) if t.layout in SPARSE]
    if sparse:
        return max(_stored(t) for t in sparse)
    if out_val is None:  # a torch whose counter gives every formula shapes: no layouts to see
        return _elements(out_shape)
    return sum(_stored(t) * (COMPLEX_POINTWISE if t.is_complex() else 1) for t in tensors([out_val]))


# FlopCounterMode passes this formula the tensors, not their shapes (torch's own formulas for
# fused attention ask the same; an older counter that does not gives shapes, read as before)
_pointwise_flop._get_raw = True  # type: ignore[attr-defined]


def _is_complex(*items: Any) -> bool:
    return any(t.is_complex() for t in tensors(items))


# A complex number is two real ones: a complex multiply-add is 8 real FLOPs (4 multiplies, 4 adds)
# where torch's formulas count 2, and an elementwise op on a complex element counts as on two reals.
COMPLEX_PRODUCT, COMPLEX_POINTWISE = 4, 2


def _complex_aware(formula: Callable[..., int], raw: bool) -> Callable[..., int]:
    """`formula` (a matrix-product count; `raw`: it takes the tensors, as FlopCounterMode's own
    registry does, else shapes) counted in real FLOPs: times COMPLEX_PRODUCT where a tensor it
    reads or writes is complex."""
    shaped = formula if raw else flop_counter.shape_wrapper(formula)

    def counted(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        flops = shaped(*args, out_val=out_val, **kwargs)
        return flops * COMPLEX_PRODUCT if _is_complex(args, kwargs, out_val) else flops
    counted._get_raw = True  # type: ignore[attr-defined]
    return counted


def _addmm_flop(bias: Any, a: Any, b: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """mm's 2·m·k·n, plus the bias added to each output element (the hand models count it); in
    real FLOPs where the tensors are complex (8·m·k·n, 2 per element)."""
    *batch, m, k = a.shape
    n = b.shape[-1]
    product, added = math.prod(batch) * 2 * m * k * n, sum(t.numel() for t in tensors([out_val]))
    if _is_complex(bias, a, b, out_val):
        return product * COMPLEX_PRODUCT + added * COMPLEX_POINTWISE
    return product + added


def _mv_flop(a: Any, v: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """A matrix-vector product (mv), or a dot product of two vectors (dot, vdot): 2 per
    multiply-add (2·m·n, 2·n), as mm's; real FLOPs where complex (8 per multiply-add)."""
    product = 2 * a.numel()  # m·n multiply-adds of an m×n matrix, n of an n-vector
    return product * (COMPLEX_PRODUCT if _is_complex(a, v) else 1)


def _addmv_flop(bias: Any, a: Any, v: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """mv's 2·m·n, plus the bias added to each of the m outputs."""
    added = sum(t.numel() for t in tensors([out_val]))
    return _mv_flop(a, v) + added * (COMPLEX_POINTWISE if _is_complex(bias, a, v, out_val) else 1)


def _addmm_activation_flop(bias: Any, a: Any, b: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """addmm's count, plus the activation applied to each output element."""
    return _addmm_flop(bias, a, b, out_val=out_val) + sum(t.numel() for t in tensors([out_val]))


_addmm_flop._get_raw = _addmm_activation_flop._get_raw = True  # type: ignore[attr-defined]


def _dense_only(packet: Any, formula: Callable[..., int], seen: set[str]) -> Callable[..., int]:
    """A product's formula where its operands are dense; where one is sparse (`adj @ x` with a
    sparse adjacency runs aten::mm) the formula's dense count is not the work (64x too much at
    64 nonzeros of 64x64): it counts nothing and notes the op, as a sparse product without
    formula (`torch.sparse.mm`: _sparse_addmm) is."""
    def counted(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        if any(t.layout in SPARSE for t in tensors([args, kwargs])):
            seen.add(str(packet).replace(".", "::", 1) + " (sparse)")
            return 0
        return formula(*args, out_val=out_val, **kwargs)
    counted._get_raw = True  # type: ignore[attr-defined]
    return counted


def _with_conv_bias(formula: Callable[..., int]) -> Callable[..., int]:
    """A convolution's count (`formula`, torch's: its products alone) plus its bias added to each
    output element, as addmm's is (a 1x1 convolution counted less than the same Linear)."""
    def counted(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        flops = formula(*args, out_val=out_val, **kwargs)
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        if bias is None:
            return flops
        added = sum(t.numel() for t in tensors([out_val]))
        return flops + added * (COMPLEX_POINTWISE if _is_complex(bias, out_val) else 1)
    counted._get_raw = True  # type: ignore[attr-defined]
    return counted


def _attention_flop(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """The two matrix products of attention, q @ k^T and p @ v: 2·b·h·l·s·(e + ev), as torch's own
    formula for the fused attentions counts them (no discount for a causal mask)."""
    *batch, l, e = query
    s, ev = key[-2], value[-1]
    return math.prod(batch) * 2 * l * s * (e + ev)


def _attention_backward_flop(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None,
                             **kwargs: Any) -> int:
    """Its backward, as torch counts it: the scores again, then the gradients of both products (five
    matrix products: 2·b·h·l·s·(3e + 2ev))."""
    *batch, l, e = query
    s, ev = key[-2], value[-1]
    return math.prod(batch) * 2 * l * s * (3 * e + 2 * ev)


# A word of an operator's name that says it does matrix products (conv also as conv1d/2d/3d), or
# other arithmetic no formula counts: the FFTs' (_fft_r2c, _fft_c2c, _fft_c2r), a factorization's
# or a solve's (linalg_lu_factor_ex, _linalg_svd, cholesky_solve, triangular_solve, geqrf: O(n^3)
# each), a sparse product's (smm, hspmm, sspaddmm; _sparse_addmm by addmm), cdist's at p=2
# (_euclidean_dist). Not `linalg` itself
# (linalg_vector_norm is a reduction, counted as any) nor `inverse` (slice_inverse is a view).
PRODUCT_WORDS = frozenset(
    "mm bmm addmm baddbmm addbmm addmv mv dot vdot matmul linear bilinear einsum tensordot outer ger "
    "conv convolution attention transformer rnn lstm gru trilinear cdist fft "
    "lu cholesky ldl qr geqrf orgqr ormqr householder svd eig eigh eigvals eigvalsh solve lstsq inv pinv "
    "det slogdet logdet triangular smm hspmm sspaddmm spmm euclidean".split())
# Whole names of such operators whose words alone would also name ops that do no arithmetic
PRODUCT_NAMES = frozenset({"inverse", "cholesky_inverse", "matrix_exp", "linalg_matrix_exp", "matrix_exp_backward"})

# Operator namespaces whose ops the count knows: aten's (formulas, pointwise, or no FLOPs counted by
# the rule above), and those that do no arithmetic (record_function's, collectives). An op of any
# other namespace (quantized::linear_dynamic, a torch.library custom op) may do any amount of work
# that no formula counts: where one runs, the count is incomplete, as for a product without formula.
KNOWN_NAMESPACES = frozenset({"aten", "prims", "profiler", "c10d", "_c10d_functional", "_c10d_functional_autograd",
                              "_dtensor"})


class _OtherOps(TorchDispatchMode):
    """Notes the ops outside KNOWN_NAMESPACES that a call dispatches (`ns::name`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.namespace not in KNOWN_NAMESPACES:
            self.seen.add(f"{func.namespace}::{func.__name__.split('.')[0]}")
        return func(*args, **(kwargs or {}))


def does_products(name: str) -> bool:
    """Whether an aten operator's name (`mkldnn_rnn_layer`, `_transformer_encoder_layer_fwd`) says
    it does matrix products: one of its words (split at `_`) is a PRODUCT_WORD or conv1d/2d/3d."""
    if name in PRODUCT_NAMES:
        return True
    words = [w for w in name.split("_") if w]
    return any(w in PRODUCT_WORDS or (len(w) == 6 and w.startswith("conv") and w[4] in "123" and w[5] == "d")
               for w in words)


def _product_packets(formulas: Any) -> set[Any]:
    """The aten operator packets whose names say they do matrix products but have no formula."""
    found = set()
    for name in dir(torch.ops.aten):
        if not does_products(name):
            continue
        try:
            packet = getattr(torch.ops.aten, name)
        except (AttributeError, RuntimeError):
            continue
        if hasattr(packet, "overloads") and packet not in formulas:
            found.add(packet)
    return found


def _noting(packet: Any, seen: set[str]) -> Callable[..., int]:
    """A formula that counts nothing and notes that `packet` ran (and returned a tensor)."""
    def formula(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        shapes = out_shape if isinstance(out_shape, (list, tuple)) and not isinstance(out_shape, torch.Size) \
            else [out_shape]
        if any(isinstance(s, torch.Size) for s in shapes):
            seen.add(str(packet).replace(".", "::", 1))
        return 0
    return formula


COPIES = ("clone",)  # tagged pointwise, but a copy (.contiguous() of a transposed tensor): no arithmetic
# _foreach_ ops that copy, fill, reduce or multiply matrices: not elementwise arithmetic
FOREACH_NOT_ARITHMETIC = ("copy", "clone", "zero", "norm", "powsum", "max", "mm")
# an optimizer's update in one fused kernel (fused=True): no formula, named as not counted
FUSED_OPTIMIZERS = ("_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad")


def _named_packets(wanted: Callable[[str], bool]) -> set[Any]:
    """The aten operator packets known so far whose names `wanted` takes."""
    found = set()
    for name in dir(torch.ops.aten):
        if wanted(name):
            try:
                found.add(getattr(torch.ops.aten, name))
            except (AttributeError, RuntimeError):
                continue
    return found


def _foreach_packets() -> set[Any]:
    """The aten `_foreach_*` packets known so far that do elementwise arithmetic over a list of
    tensors (an optimizer's foreach path, torch's default on CUDA): none is tagged pointwise."""
    return _named_packets(lambda name: name.startswith("_foreach_")
                          and name.removeprefix("_foreach_").rstrip("_") not in FOREACH_NOT_ARITHMETIC)


def _foreach_flop(*args: Any, out_val: Any = None, out_shape: Any = None, **kwargs: Any) -> int:
    """1 FLOP per element of the tensors of its first list (what it writes, in place or anew), as
    the pointwise op it loops counts: AdamW's foreach path counts what its loop path does."""
    first = next((a for a in args if isinstance(a, (list, tuple))), None)  # (a Scalar may come first: pow)
    return sum(_stored(t) * (COMPLEX_POINTWISE if t.is_complex() else 1) for t in tensors([first]))


_foreach_flop._get_raw = True  # type: ignore[attr-defined]


def _fused_packets() -> set[Any]:
    """The aten packets known so far of an optimizer's fused update (FUSED_OPTIMIZERS)."""
    return _named_packets(lambda name: name.rstrip("_") in FUSED_OPTIMIZERS)


def _ran(packet: Any, seen: set[str]) -> Callable[..., int]:
    """A formula that counts nothing and notes that `packet` ran (an in-place op returns nothing)."""
    def formula(*args: Any, **kwargs: Any) -> int:
        seen.add(str(packet).replace(".", "::", 1))
        return 0
    return formula


def _pointwise_packets() -> set[Any]:
    """The aten operator packets known so far with an overload tagged pointwise, but copies."""
    found = set()
    for name in dir(torch.ops.aten):
        if name in COPIES:
            continue
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = [getattr(packet, o) for o in packet.overloads()]
        except (AttributeError, RuntimeError, TypeError):
            continue
        if any(torch.Tag.pointwise in o.tags for o in overloads):
            found.add(packet)
    return found


def count_flops(call: Callable[[], Any]) -> tuple[int, list[str]]:
    """FLOPs of one `call` (an eager step), by the rule in the module's docstring, and the
    operators that ran whose matrix products no formula counts (sorted names, `aten::...`): where
    there are any, the count leaves their work out.

    Python only learns of an operator once it is dispatched to it, so when the counted call
    meets pointwise operators, or operators that do matrix products, that were unknown before it,
    it is counted again with them."""
    known: set[Any] = set()
    aten = torch.ops.aten
    # addmm's count for its in-place forms and for addbmm (the batch summed into one m x n output)
    own = {getattr(aten, name): _addmm_flop for name in ("addmm", "addmm_", "baddbmm", "baddbmm_", "addbmm", "addbmm_")}
    own[aten._addmm_activation] = _addmm_activation_flop
    # no formula in torch's counter: a matrix-vector or vector-vector product (`M @ v`) left a whole
    # model's FLOPs "not counted" (helper-56)
    own.update({getattr(aten, name): _mv_flop for name in ("mv", "dot", "vdot")})
    own.update({getattr(aten, name): _addmv_flop for name in ("addmv", "addmv_")})
    for name, formula in (("_scaled_dot_product_flash_attention_for_cpu", _attention_flop),
                          ("_scaled_dot_product_flash_attention_for_cpu_backward", _attention_backward_flop)):
        if hasattr(aten, name):  # torch >= 2.3
            own[getattr(aten, name)] = _complex_aware(formula, raw=False)
    # torch's own product formulas (mm, bmm, convolutions, attention), in real FLOPs for complex
    own = {**{p: _complex_aware(f, raw=True) for p, f in flop_counter.flop_registry.items()}, **own}
    for packet in (aten.convolution, aten._convolution):  # (input, weight, bias, ...)
        if packet in own:
            own[packet] = _with_conv_bias(own[packet])
    formulas = {**flop_counter.flop_registry, **own}
    sparse: set[str] = set()
    own = {p: _dense_only(p, f, sparse) for p, f in own.items()}
    while True:
        packets, products = _pointwise_packets(), _product_packets(formulas)
        foreach, fused = _foreach_packets(), _fused_packets()
        seen: set[str] = set()
        mapping = {p: _noting(p, seen) for p in products}
        mapping.update({p: _ran(p, seen) for p in fused})
        mapping.update({p: _pointwise_flop for p in packets})
        mapping.update({p: _foreach_flop for p in foreach})
        mapping.update(own)
        counter, other = FlopCounterMode(display=False, custom_mapping=mapping), _OtherOps()
        with counter, other:
            call()
        both = packets | products | foreach | fused
        if both <= known or not ((_pointwise_packets() - packets) or (_product_packets(formulas) - products)
                                 or (_foreach_packets() - foreach) or (_fused_packets() - fused)):
            return int(counter.get_total_flops()), sorted(seen | sparse | other.seen)
        known = both


OBJECT_DEPTH = 4  # how many objects' attributes deep `tensors(..., objects=True)` looks


def tensors(items: Iterable[Any], objects: bool = False, mappings: bool = True) -> Iterable[torch.Tensor]:
    """The tensors in `items`, and in the lists, tuples, mappings and dataclasses among them (a
    model's output with `.loss` and `.logits`), each container once; not in mappings where
    `mappings` is False and `objects` too (a batch as a dict may hold what the step never reads,
    as an object may: the job counts those where read); `objects`: in
    plain objects' attributes (and `__slots__`) too, up to OBJECT_DEPTH objects deep (an output
    class of its own; an input's, whose tensors count only where a call reads them: its objects
    may hold a dataset or an optimizer), never a module's (its parameters and buffers are counted
    as such)."""
    seen: set[int] = set()

    def within(items: Iterable[Any], depth: int) -> Iterable[torch.Tensor]:
        for obj in items:
            if isinstance(obj, torch.Tensor):
                yield obj
            elif isinstance(obj, (str, bytes, type, torch.nn.Module)) or id(obj) in seen:
                continue
            seen.add(id(obj))  # (alive while it is walked: its id is its own)
            if isinstance(obj, (list, tuple)):
                yield from within(obj, depth)
            elif isinstance(obj, Mapping):
                if mappings or objects:
                    yield from within(obj.values(), depth)
            elif dataclasses.is_dataclass(obj):
                yield from within((getattr(obj, f.name, None) for f in dataclasses.fields(obj)), depth)
            elif objects and depth > 0 and not callable(obj):
                try:
                    attributes = list(vars(obj).values())  # not getattr(obj, "__dict__"): a proxy's __getattr__
                except TypeError:  # no __dict__ (__slots__, a builtin)
                    attributes = []
                yield from within([*attributes, *slotted(obj)], depth - 1)

    yield from within(items, OBJECT_DEPTH)


def slotted(obj: Any) -> list[Any]:
    """The values an object keeps in its classes' `__slots__` (set ones only)."""
    values = []
    for cls in type(obj).__mro__:
        names = cls.__dict__.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            if name not in ("__dict__", "__weakref__"):
                try:
                    values.append(object.__getattribute__(obj, name))
                except Exception:  # noqa: BLE001 (unset, or a descriptor of its own that raises)
                    continue
    return values


_SPARSE_PARTS = {torch.sparse_coo: ("_indices", "_values"),
                 torch.sparse_csr: ("crow_indices", "col_indices", "values"),
                 torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
                 torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
                 torch.sparse_bsc: ("ccol_indices", "row_indices", "values")}


def sparse_parts(t: torch.Tensor) -> list[torch.Tensor] | None:
    """A sparse tensor's indices and values (it has no storage of its own to count: a sparse
    adjacency's 2.6 MB read as 0 bytes); None for a strided tensor."""
    parts = _SPARSE_PARTS.get(t.layout)
    if parts is None:
        return None
    try:
        return [getattr(t, name)() for name in parts]
    except (RuntimeError, NotImplementedError, AttributeError):
        return []


def storage_bytes(items: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `items` (views share theirs); of a sparse tensor, its
    indices and values, each by its own extent (a CSR tensor's column indices may be a view of
    the COO indices it was made from)."""
    seen: dict[tuple[str, int], int] = {}
    for t in items:
        parts = sparse_parts(t)
        if parts is not None:
            for part in parts:
                seen[(str(part.device), part.data_ptr())] = part.numel() * part.element_size()
            continue
        try:
            storage = t.untyped_storage()
            seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
        except (RuntimeError, NotImplementedError, ValueError):  # no storage (meta; lazy: not made yet)
            continue
    return sum(seen.values())


def moved_bytes(args: tuple[Any, ...], parameters: Iterable[torch.Tensor], output: Any) -> int:
    """Compulsory traffic of one call, as the hand models count it: inputs and weights read once,
    the output written once. An input or output that is a view counts as the bytes it spans, not
    its whole storage (helper-58: `data[:16]` of a 100,000-row tensor counted 12.8 MB for 12 kB);
    the tensors in a mapping among the inputs are not counted here (the job counts them where
    an op reads them)."""
    return view_bytes([*tensors(args, mappings=False), *tensors([output], objects=True)]) + storage_bytes(parameters)


def view_bytes(items: Iterable[torch.Tensor]) -> int:
    """Bytes that the views `items` span, each byte once: a view by its own distinct elements
    (_extent), the views of one storage together no more than the byte ranges they cover nor the
    storage itself; a sparse tensor as storage_bytes counts it."""
    sparse: list[torch.Tensor] = []
    views: dict[tuple[str, int], tuple[int, set[tuple[int, int, int]]]] = {}  # storage -> (its bytes, views' spans)
    for t in items:
        if sparse_parts(t) is not None:
            sparse.append(t)
            continue
        try:
            storage = t.untyped_storage()
            key, size = (str(t.device), storage.data_ptr()), storage.nbytes()
        except (RuntimeError, NotImplementedError, ValueError):  # no storage (meta; lazy: not made yet)
            continue
        try:
            if t.numel() == 0:
                continue
            item = t.element_size()
            start = t.storage_offset() * item
            end = start + (sum((n - 1) * stride for n, stride in zip(t.shape, t.stride())) + 1) * item
            extent = _extent(t)
        except (RuntimeError, NotImplementedError, ValueError):  # a storage without strides to read (jagged): whole
            start, end, extent = 0, size, size
        views.setdefault(key, (size, set()))[1].add((start, end, extent))
    total = storage_bytes(sparse)
    for size, spans in views.values():
        covered, reach = 0, 0
        for start, end, _ in sorted(spans):
            covered += max(0, end - max(start, reach))
            reach = max(reach, end)
        total += min(size, covered, sum(extent for _, _, extent in spans))
    return total


def _gathered_rows(func: Any, args: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor, int] | None:
    """(table, indices, dim) where `func` gathers whole rows of a table by index (an embedding
    lookup, index_select, `table[ids]`); None for any other op."""
    aten = torch.ops.aten
    if func in (aten.embedding.default, aten._embedding_bag.default, aten._embedding_bag_forward_only.default,
                aten.embedding_bag.default, aten.embedding_bag.padding_idx):
        return args[0], args[1], 0
    if func is aten.index_select.default:
        return args[0], args[2], args[1] % max(args[0].dim(), 1)
    if func is aten.index.Tensor and len(args[1]) == 1 and args[1][0] is not None \
            and args[1][0].dtype in (torch.int64, torch.int32):
        return args[0], args[1][0], 0
    return None


def _extent(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a view spans (a broadcast dimension, stride 0, once)."""
    elements = math.prod(n for n, stride in zip(t.shape, t.stride()) if stride != 0)
    return elements * t.element_size()


def storage_key(t: Any) -> int | None:
    """Where a tensor's storage lives (views share it); None for one without (meta, a subclass)."""
    try:
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None
    except (RuntimeError, NotImplementedError, ValueError, TypeError, AttributeError):
        return None


def _written(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    """The tensors an op writes into (in place, or out=), by its schema."""
    arguments = func._schema.arguments
    given = {**dict(zip((a.name for a in arguments), args)), **kwargs}
    return [t for a in arguments if a.alias_info is not None and a.alias_info.is_write
            for t in tensors([given.get(a.name)])]


# The matrix products whose inputs' dtype says which peak a step is held against (what runs under
# torch.autocast in a step of fp32 weights: bf16): the CPU's and CUDA's attention kernels too (each
# where this torch has it).
PRODUCT_OPS = {getattr(torch.ops.aten, name) for name in (
    "mm", "addmm", "bmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_cudnn_attention") if hasattr(torch.ops.aten, name)}


class _StorageReads(TorchDispatchMode):
    """What the ops of a call read of some storages: a lookup (`_gathered_rows`) its distinct
    rows, any other op that is not a view the whole extent of the view it is given. An op it
    cannot see into (a higher-order op: torch.cond, flex_attention) runs unseen, and every storage
    then counts whole."""

    supports_higher_order_operators = True  # (passed through __torch_dispatch__, not refused)

    def __init__(self, storages: set[int], inputs: set[int] = frozenset()) -> None:
        super().__init__()
        self.storages = storages
        self.inputs = inputs  # storages whose writes are noted (`written`)
        self.written: list[str] = []  # ops that wrote into an input, `aten::mul_`
        self.spans: dict[int, int] = {}  # storage -> the largest extent an op read
        self.rows: dict[int, tuple[set[int], int]] = {}  # storage -> (distinct rows, bytes a row)
        self.products: dict[torch.dtype, int] = {}  # the dtype each matrix product ran in -> how many
        self.failed = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "overloadpacket", None) in PRODUCT_OPS:  # autocast has cast its inputs by here
            held = list(tensors(args))  # a floating operand's dtype, else an integer one's (int64 products, _int_mm)
            dtype = next((t.dtype for t in held if t.is_floating_point() or t.is_complex()),
                         next((t.dtype for t in held if t.dtype != torch.bool), None))
            if dtype is not None:
                self.products[dtype] = self.products.get(dtype, 0) + 1
        if not hasattr(func, "_schema"):  # a higher-order op: what runs inside it is not seen
            self.failed = True
        elif not self.failed:
            try:
                if not getattr(func, "is_view", False):
                    self._note(func, args, kwargs)
                if self.inputs:
                    self._note_writes(func, args, kwargs)
            except Exception:  # noqa: BLE001 (an argument this reading does not know: count every storage whole)
                self.failed = True
        return func(*args, **kwargs)

    def _note_writes(self, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """An op that writes into one of `inputs` (an in-place op, out=)."""
        if any(storage_key(t) in self.inputs for t in _written(func, args, kwargs)):
            name = str(func.overloadpacket).replace(".", "::", 1)
            if name not in self.written:
                self.written.append(name)

    def _note(self, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        gathered = _gathered_rows(func, args)
        table = gathered[0] if gathered else None
        if table is not None and storage_key(table) in self.storages and table.dim() > 0:
            table, index, dim = gathered  # type: ignore[misc]
            seen, row = self.rows.setdefault(storage_key(table), (set(), _extent(table) // max(table.shape[dim], 1)))
            seen.update(index.unique().tolist())
            others = [*args[1:], *kwargs.values()]
        else:
            others = [*args, *kwargs.values()]
        given = list(tensors(others))
        # a sparse gradient added into a weight in place (SGD's, Adagrad's update): the op touches the
        # weight where the gradient holds values; any other op reads each dense tensor whole
        sparse = max((_held(t) for t in given if t.layout in SPARSE), default=None)
        updated = _written(func, args, kwargs) if sparse is not None else []
        for t in given:
            key = storage_key(t)
            if key in self.storages:
                touched = any(t is u for u in updated)
                read = min(_extent(t), sparse * t.element_size()) if touched else _extent(t)  # (touched: sparse)
                self.spans[key] = max(self.spans.get(key, 0), read)

    def seen(self, storage: int) -> bool:
        """Whether an op was seen reading `storage` (and the reading saw every op)."""
        return not self.failed and (storage in self.spans or storage in self.rows)

    def read(self, storage: int, whole: int) -> int:
        """The bytes read of one storage of `whole` bytes: all of it when no op was seen reading it
        (a kernel this mode does not see may)."""
        if self.failed or (storage not in self.spans and storage not in self.rows):
            return whole
        seen, row = self.rows.get(storage, (set(), 0))
        return min(whole, max(self.spans.get(storage, 0), len(seen) * row))


@dataclasses.dataclass(frozen=True)
class Reads:
    """What one call read and wrote (`weight_reads`)."""
    weights: int  # bytes read of the weights
    unseen: int  # of them, counted whole because no op was seen reading them (or the reading failed)
    trained: int  # bytes of the trained weights' gradients (a sparse one: the rows it holds; none: 0)
    graded: int  # bytes of the trained weights that got a gradient, whole (what an optimizer keeps state for)
    output: Any
    wrote_inputs: list[str]  # ops that wrote into an input (`aten::mul_`)
    held: int = 0  # bytes read of the tensors inside input objects (`held=`): those an op was seen reading
    products: dict[torch.dtype, int] = dataclasses.field(default_factory=dict)  # dtype a matrix product ran in -> count


def weight_reads(call: Callable[[], Any], weights: Iterable[torch.Tensor], trained: Iterable[torch.Tensor] = (),
                 inputs: Iterable[torch.Tensor] = (), held: Iterable[torch.Tensor] = ()) -> Reads:
    """The bytes one `call` reads of `weights` (parameters, buffers), each storage once and no more
    than it holds. An embedding table is read as the distinct rows looked up, a buffer sliced
    before use as the slice: counting whole tables would put a language model's traffic at its
    vocabulary's size, hundreds of times what its step can move. Of `trained`, the bytes that got
    a gradient in the call (none for one computed under no_grad; a sparse gradient's rows); the
    ops that wrote into `inputs`. Of `held` (tensors inside the inputs' plain objects: a graph's
    `Data(x, edge_index)`, or a dataset the call does not read), what an op was seen reading, and
    nothing of the others."""
    whole = {key: t.untyped_storage().nbytes() for t in weights if (key := storage_key(t)) is not None}
    inside = {key: t.untyped_storage().nbytes() for t in held
              if (key := storage_key(t)) is not None and key not in whole}
    watched = {k for k in map(storage_key, inputs) if k is not None} - {
        storage_key(t) for t in trained}  # an optimizer writes what it trains
    shares: dict[int, tuple[int, float]] = {}  # storage -> (its bytes, the share its gradient holds)

    def hook(p: torch.Tensor) -> None:
        grad = p.grad
        if grad is not None:
            share = _held(grad) / max(p.numel(), 1)
            shares[storage_key(p)] = (p.untyped_storage().nbytes(), min(share, 1.0))

    handles = [p.register_post_accumulate_grad_hook(hook) for p in trained if p.requires_grad]
    try:
        with _StorageReads(set(whole) | set(inside), watched) as reads:
            output = call()
    finally:
        for h in handles:
            h.remove()
    return Reads(weights=sum(reads.read(key, size) for key, size in whole.items()),
                 unseen=sum(size for key, size in whole.items() if not reads.seen(key)),
                 trained=round(sum(size * share for size, share in shares.values())),
                 graded=sum(size for size, _ in shares.values()),
                 output=output, wrote_inputs=reads.written,
                 held=sum(reads.read(key, size) for key, size in inside.items() if reads.seen(key)),
                 products=dict(reads.products))


def live_tensor_bytes(device: torch.device) -> int:
    """Bytes of every tensor alive in this process on `device`, counted once per storage."""
    with warnings.catch_warnings():  # isinstance() on some of torch's deprecated objects warns
        warnings.simplefilter("ignore")
        found = [o for o in gc.get_objects() if _is_tensor(o)]
    # Plain tensors and parameters only: the compiler's fake tensors own no memory.
    real = [o for o in found if type(o) in (torch.Tensor, torch.nn.Parameter)]
    return storage_bytes(o for o in real if o.device.type == device.type and not o.is_meta)


def _is_tensor(obj: Any) -> bool:
    try:
        return isinstance(obj, torch.Tensor)
    except ReferenceError:  # a weak proxy whose object is gone
        return False


def transient_peak_bytes(call: Callable[[], Any]) -> int | None:
    """The CPU allocator's peak above its starting point during one `call`, read off the memory
    events of a trace recorded with profile_memory=True; None when the trace has none."""
    return allocations(call)[0]


def allocations(call: Callable[[], Any]) -> tuple[int | None, int | None]:
    """transient_peak_bytes, and the largest single allocation during the `call` (None, None when
    the trace has no memory events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    fd, path = tempfile.mkstemp(prefix=f"profsweep-memory-{os.getpid()}-", suffix=".json")  # the pid: see point.clear_stale_scratch
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    memory = sorted(
        (e for e in events if e.get("name") == "[memory]" and int((e.get("args") or {}).get("Device Type", 0)) == 0),
        key=lambda e: float(e.get("ts", 0)),
    )
    if not memory:
        return None, None
    first = memory[0]["args"]
    start = int(first["Total Allocated"]) - int(first["Bytes"])
    return (max(0, max(int(e["args"]["Total Allocated"]) for e in memory) - start),
            max(int(e["args"]["Bytes"]) for e in memory))
