"""What torch.compile fused: each kernel Inductor generated for a compiled grid point, with the
eager aten ops it covers and what they cost in the eager grid point it pairs with (fusion.csv);
and each library kernel the compiled graph calls in place of several eager ops (`aten::addmm`
for a matmul and its bias add: EXTERN), where eager ran those ops and not it.

Inductor names a generated kernel after the aten ops of the graph nodes it fuses (its default
descriptive names, `original_aten`): `cpp_fused_gelu_mul_split_0` on the CPU (in the trace as
`graph_0_cpp_fused_...`: the job asks Inductor to name its C++ kernels there) and
`triton_poi_fused_add_cos_sin_0` on a GPU (a kernel on the device's stream). The name's words
are matched, longest first, against the ops the paired eager grid point ran: `native_layer_norm`
is one op, not three, where eager ran `aten::native_layer_norm`. A word no eager op has stays
in `unmatched` (a view Inductor folded in has no op of its own in eager, such as `view`, or an op
under another name). Without an eager partner no op is named: a name's words are not op names
(`native_layer_norm` would read as three) and a node's may be a Python variable's, so the words
stay in `unmatched` (sweep `compile=false,true` to match them).

Where the job read Inductor's own kernel-to-node provenance (provenance.json, experiments.provenance:
the nodes of the captured graph each kernel was made from, `gelu` and `mul`), a kernel's eager ops
are those nodes' ops (`matched_by` "inductor provenance"): a node's name without its number
(`linear_1`) and the ops that do its call's work (NODE_OPS), where eager ran them, then the ops
its name spells that they left out; a node no eager op has stays in `unmatched`. That covers what
a name leaves out (Inductor shortens a long name). A kernel whose nodes cover no op eager ran is
matched by its name.

A library op (a matrix product, a convolution, attention, a recurrent layer) the compiled grid
point still calls itself is not covered by a generated kernel, though the
kernel's name or nodes spell it: on the CPU Inductor leaves a convolution to the library
(`extern_kernels.convolution`, in the trace `aten::convolution`) and names the kernel that reads
its output after it (`cpp_fused__native_batch_norm_legit_no_training_convolution_relu_1`); the
word stays in `unmatched`.

Times per step are medians over the repeats: on the CPU an op's (and a C++ kernel's) self host
time per step, on a GPU the device time per step of the op's kernels and of the Triton kernel.
Several kernels can cover one eager op (a `mul` in two of them, a forward and a backward kernel
both named after `sum`): each row counts all of its time, and `eager_ops_shared` names such ops.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any, Iterable, Mapping

from analysis.points import pairing_columns
from profsweep import stats
from profsweep.contract import GridPoint, flag, read_json

# The ops a compiled graph leaves to a library (oneDNN, cuBLAS, cuDNN) rather than generating: matrix
# products, convolutions, attention, recurrent layers (by a word of their name).
LIBRARY = re.compile(r"(^|_|::)(conv|convolution|mm|addmm|bmm|baddbmm|linear|matmul|attention|rnn|lstm|gru)(\d?d)?(_|$)")
FUSION_COLUMNS = ["point", "size", "compiled_job", "eager_job", "kernel", "eager_ops", "eager_us_per_step",
                  "compiled_us_per_step", "unmatched", "matched_by", "eager_ops_shared"]
# graph_0_cpp_fused_gelu_mul_split_0, cpp_fused__softmax_1, triton_poi_fused_add_cos_sin_0, triton_red_fused_sum_2,
# and older Triton's names with the signature after the number: triton_poi_fused_add_0d1d2de
GENERATED = re.compile(r"(?:^|_)(?:cpp|triton)_(?:[a-z]+_)?fused_(?P<ops>.+?)_\d+[a-z0-9]*$")
BY_NAME = "kernel name"
BY_PROVENANCE = "inductor provenance"
MAX_PROVENANCE_BYTES = 64 << 20  # a provenance.json past this is not read (a big model's is a few MB)
BY_CALL = "library call"
# Library kernels a compiled graph calls in place of several eager ops (Inductor's post-grad
# patterns: a matmul and the bias add after it become one addmm; with the activation, one
# _addmm_activation). Only the ops the eager grid point ran are said to be covered.
EXTERN = {
    "aten::addmm": ("aten::mm", "aten::add", "aten::add_"),
    "aten::baddbmm": ("aten::bmm", "aten::add", "aten::add_"),
    "aten::_addmm_activation": ("aten::mm", "aten::addmm", "aten::add", "aten::gelu", "aten::relu"),
}


def fused_words(kernel: str) -> list[str] | None:
    """The op words of a generated kernel's name ([] for none), or None when it is not one."""
    found = GENERATED.search(kernel)
    return found.group("ops").split("_") if found else None


def cover(words: list[str], eager: Iterable[str]) -> tuple[list[str], list[str]]:
    """(eager ops covered, words left unmatched): runs of words joined by `_`, longest first, that
    name an op of `eager` (aten::name); an empty word (from `__`) joins the word after it."""
    names = {name.split("::", 1)[1] for name in eager if name.startswith("aten::")}
    covered: list[str] = []
    unmatched: list[str] = []
    i = 0
    while i < len(words):
        for j in range(len(words), i, -1):
            name = "_".join(words[i:j])
            if name in names:
                if f"aten::{name}" not in covered:
                    covered.append(f"aten::{name}")
                i = j
                break
        else:
            if words[i]:
                unmatched.append(words[i])
            i += 1
    return covered, unmatched


def kernel_sources(path: Path) -> dict[str, list[str]]:
    """A job's provenance.json as {the kernel's name in the trace: the captured graph's nodes it was
    made from}; {} where there is none or it cannot be read. Kernels of one name in several
    graphs (Triton's names carry no graph) get the nodes of all."""
    path = Path(path)
    try:
        if not path.is_file() or path.stat().st_size > MAX_PROVENANCE_BYTES:
            return {}
        data = read_json(path)
    except Exception:  # unreadable, not JSON, nested past the parser's depth: no provenance, never a failed job
        return {}
    listed = data.get("kernels") if isinstance(data, dict) else None
    found: dict[str, list[str]] = {}
    for k in listed if isinstance(listed, list) else []:
        if not isinstance(k, dict) or not isinstance(k.get("trace_name"), str):
            continue
        nodes = found.setdefault(k["trace_name"], [])
        for node in k.get("source_nodes") if isinstance(k.get("source_nodes"), list) else []:
            if isinstance(node, str) and node not in nodes:
                nodes.append(node)
    return {name: nodes for name, nodes in found.items() if nodes}


# A captured graph's node is named after the Python call it records (F.softmax, operator.truediv,
# `x += y`); eager ran that call as the aten op of the same name, whose work may sit in another op
# it calls (aten::softmax's in aten::_softmax, aten::layer_norm's in aten::native_layer_norm).
# Each node covers the ops of its name and these, where eager ran them.
NODE_OPS = {
    "softmax": ("softmax", "_softmax"), "log_softmax": ("log_softmax", "_log_softmax"),
    "layer_norm": ("layer_norm", "native_layer_norm"), "group_norm": ("group_norm", "native_group_norm"),
    "batch_norm": ("batch_norm", "_batch_norm_impl_index", "native_batch_norm"),
    "truediv": ("div",), "floordiv": ("floor_divide",), "iadd": ("add_",), "isub": ("sub_",), "imul": ("mul_",),
    "itruediv": ("div_",), "sub": ("sub", "rsub"),
}
NOT_OPS = ("getitem", "getattr")  # Python's indexing and attributes: no aten op of their own


def source_ops(nodes: list[str], eager: Iterable[str] | None) -> tuple[list[str], list[str]]:
    """(eager ops covered, names left unmatched) of a kernel's source nodes: each node's name less
    its number (`linear_1` -> `linear`) as the aten ops of that name (NODE_OPS), where eager ran
    them; without an eager run to match, none (every name unmatched)."""
    names = None if eager is None else set(eager)
    covered: list[str] = []
    unmatched: list[str] = []
    for node in nodes:
        base = re.sub(r"_\d+$", "", node)
        found = [] if names is None else [f"aten::{op}" for op in NODE_OPS.get(base, (base,)) if f"aten::{op}" in names]
        covered += [op for op in found if op not in covered]
        if not found and base not in unmatched:
            unmatched.append(base)
    return covered, unmatched


def name_cover(kernel: str, eager: Iterable[str] | None) -> tuple[list[str], list[str]]:
    """(eager ops covered, words left unmatched) of a generated kernel by its name's words (cover);
    without an eager run to match, none (its words unmatched)."""
    words = fused_words(kernel) or []
    return cover(words, eager) if eager is not None else ([], _joined(words))


def provenance_cover(kernel: str, nodes: list[str], eager: Iterable[str] | None) -> tuple[list[str], list[str], bool]:
    """(eager ops covered, words left unmatched, whether the provenance covered any) of a generated
    kernel with its source nodes: the ops of its nodes (source_ops), then those its name spells
    that they left out (a name word is an op the node's name may not be: `_softmax` in a kernel
    made from `softmax`)."""
    eager = None if eager is None else list(eager)
    by_nodes, unmatched = source_ops(nodes, eager)
    by_name = name_cover(kernel, eager)[0]
    return [*by_nodes, *(op for op in by_name if op not in by_nodes)], unmatched, bool(by_nodes)


def fusion_rows(points: list[GridPoint], ops: dict[str, list[dict[str, Any]]], kernels: list[dict[str, Any]],
                provenance: Mapping[str, Mapping[str, list[str]]] | None = None) -> list[dict[str, Any]]:
    """fusion.csv's rows: per compiled grid point, each generated kernel it ran (costliest first);
    `provenance`: job -> kernel -> its source nodes (kernel_sources), where the jobs read it."""
    provenance = provenance or {}
    eager_of = _eager_partners(points)
    rows: list[dict[str, Any]] = []
    first = 0  # the first row of the grid point at hand
    for point in points:
        if not point.usable or not flag(point.get("compile")):
            continue
        jobs = point.jobs
        gpu = point.get("platform") not in (None, "cpu")
        times = _kernel_times(jobs, ops, kernels, gpu)
        eager = eager_of.get(id(point))
        eager_jobs = eager.jobs if eager is not None else []
        eager_times = _op_times(eager_jobs, ops, gpu, eager) if eager is not None else {}
        called = _op_times(jobs, ops, gpu, point) if eager is not None else {}
        sources = {}
        for job in reversed(jobs):  # the first job's, where several have a kernel
            sources.update(provenance.get(job) or {})
        found = [(kernel, us, BY_PROVENANCE if kernel in sources else BY_NAME) for kernel, us in times.items()]
        # the compiled graph's calls of library kernels that stand for several eager ops
        found += [(op, called[op], BY_CALL) for op in EXTERN if op in called and op not in eager_times]
        eager_ops = eager_times if eager is not None else None
        for kernel, compiled_us, how in sorted(found, key=lambda k: -k[1]):
            if how == BY_CALL:
                covered, unmatched = [o for o in EXTERN[kernel] if o in eager_times], []
            else:
                covered, unmatched, said = (provenance_cover(kernel, sources[kernel], eager_ops)
                                            if how == BY_PROVENANCE else ([], [], False))
                if not said:  # no provenance, or its nodes covered no op eager ran: the kernel's name
                    how = BY_NAME
                    covered, unmatched = name_cover(kernel, eager_ops)
                # a library op the compiled step still calls (the convolution whose output the kernel
                # reads, whose name the kernel carries) was not fused into it; other ops it also ran
                # (a training step's loss sum, the optimizer's) may have been fused here
                library = [op for op in covered if op in called and LIBRARY.search(op)]
                unmatched += [op.removeprefix("aten::") for op in library]
                covered = [op for op in covered if op not in library]
            if how == BY_CALL and len(covered) < 2:
                continue  # it replaced no more than one eager op: nothing was fused
            # an op the compiled step still calls as often (a compiled training step's optimizer, not
            # compiled: its add_, copy_, div) is not all the kernel's: what it still takes there is not
            spent = [max(0.0, eager_times[name] - (called.get(name, 0.0) if how != BY_CALL else 0.0))
                     for name in covered if name in eager_times]
            rows.append({
                "point": point.label(), "size": point.get("size"), "compiled_job": jobs[0] if jobs else None,
                "eager_job": eager_jobs[0] if eager_jobs else None, "kernel": kernel,
                "eager_ops": "; ".join(covered), "eager_us_per_step": sum(spent) if eager is not None else None,
                "compiled_us_per_step": compiled_us, "unmatched": " ".join(unmatched) or None, "matched_by": how,
            })
        _shared(rows[first:])
        first = len(rows)
    return rows


def _shared(rows: list[dict[str, Any]]) -> None:
    """`eager_ops_shared` of one grid point's rows: the ops of a row that another kernel of the point
    covers too (a forward and a backward kernel both named after `sum`), whose eager time per step
    (every call of the op) is in each such row: not the row's own."""
    ops = [[o for o in str(r["eager_ops"] or "").split("; ") if o] for r in rows]
    for i, r in enumerate(rows):
        others = {o for j, theirs in enumerate(ops) if j != i for o in theirs}
        r["eager_ops_shared"] = "; ".join(o for o in ops[i] if o in others) or None


def _joined(words: list[str]) -> list[str]:
    """The words as op names without an eager run to match: an empty word joins the next."""
    out, carry = [], ""
    for w in words:
        if not w:
            carry += "_"
            continue
        out.append(carry + w)
        carry = ""
    return out


def _eager_partners(points: list[GridPoint]) -> dict[int, GridPoint]:
    """id(compiled point) -> the usable eager point that differs from it only in `compile` (by the
    pairing columns that compare and history use)."""
    columns = pairing_columns([p for p in points if p.usable], ["compile"])
    eager = {repr(p.identity(columns)): p for p in points if p.usable and not flag(p.get("compile"))}
    return {id(p): eager[key] for p in points if flag(p.get("compile")) and (key := repr(p.identity(columns))) in eager}


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _kernel_times(jobs: list[str], ops: dict[str, list[dict[str, Any]]], kernels: list[dict[str, Any]],
                  gpu: bool) -> dict[str, float]:
    """Each generated kernel's time per step, the median over the jobs that ran it."""
    found: dict[str, list[float]] = {}
    if gpu:
        for k in kernels:
            value = stats.number(k.get("step_median_us"))
            if str(k.get("job")) in jobs and fused_words(str(k.get("name"))) is not None and value is not None:
                found.setdefault(str(k["name"]), []).append(value)
    else:
        for job in jobs:
            for op in ops.get(job, []):
                value = stats.number(op.get("self_host_us_step_median"))
                if fused_words(str(op.get("name"))) is not None and value is not None:
                    found.setdefault(str(op["name"]), []).append(value)
    return {name: _median(values) for name, values in found.items()}


def _op_times(jobs: list[str], ops: dict[str, list[dict[str, Any]]], gpu: bool,
              point: dict[str, Any]) -> dict[str, float]:
    """Each eager aten op's time per step (CPU: self host time; GPU: its kernels' device time),
    the median over the jobs."""
    steps = stats.number(point.get("steps")) or 1
    found: dict[str, list[float]] = {}
    for job in jobs:
        for op in ops.get(job, []):
            name = str(op.get("name"))
            value = (stats.number(op.get("self_device_us")) or 0) / steps if gpu else \
                stats.number(op.get("self_host_us_step_median"))
            if name.startswith("aten::") and value is not None:
                found.setdefault(name, []).append(value)
    return {name: _median(values) for name, values in found.items()}
