"""What each kernel Inductor generated was made from: its kernel-to-node provenance, read into the
job's provenance.json.

Inductor's provenance tracking (torch.compiler_inductor_provenance: `TORCH_TRACE=... INDUCTOR_PROVENANCE=1`
for tlparse) maps every kernel of a compiled graph to the post-grad graph nodes it computes, and
those to the nodes of the graph Dynamo captured (the user's calls: `gelu`, `mul`, `linear_1`).
With its debug trace on, Inductor writes that mapping beside the graph's generated code, one
folder per compiled graph. The job turns those settings on before it compiles (the job's
process only: its twin, forked before, never traces) in a temporary folder, and once its
measurements are done reads each graph's mapping and its generated code into provenance.json:

    {"torch": "2.13.0", "graphs": 1, "kernels": [{"kernel": "cpp_fused_gelu_mul_0",
      "trace_name": "graph_0_cpp_fused_gelu_mul_0", "graph": "model__0_inference_0.0",
      "source_nodes": ["gelu", "mul"], "post_grad_nodes": ["mul_6", ...]}, ...]}

`trace_name` is the kernel's name in the profiler's trace: on the CPU the job has Inductor name
its C++ kernels `graph_<id>_<kernel>` there, read from the generated code; a Triton kernel keeps
its name. Library calls (`extern_kernels.mm`) are kept with the rest. No kernels come from a
torch whose Inductor has no `trace.provenance_tracking_level`, a backend other than Inductor, a
shared Inductor cache (`run.compile_cache=shared`: not traced), a graph the process had compiled
before (a later job under `run.isolation=none`), or a training step's backward graph (compiled
later, outside what Inductor tracks; its kernels' names that a forward graph's share are left
out): the analysis then matches those kernels by their names.

What the trace adds to the compile, which a cold job's first call times: the node metadata kept
through tracing, and the writing of each graph's generated code and mapping (with a copy into
the job's own cache), a few files per graph. Measured: benchmarks/provenance_cost.py.
"""

from __future__ import annotations

import logging
import re
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profsweep.contract import PROVENANCE_FILE, read_json, write_json

if TYPE_CHECKING:
    from experiments.config import JobConfig

MAPPING_FILE = "inductor_provenance_tracking_node_mappings.json"
CODE_FILE = "output_code.py"
# The debug files the mapping does not need are not written (the FX graphs and Inductor's IR).
UNUSED_TRACE_FILES = ("fx_graph", "fx_graph_transformed", "ir_pre_fusion", "ir_post_fusion", "graph_diagram",
                      "draw_orig_fx_graph")
INDUCTOR_DEBUG_LOG = "torch._inductor.debug"  # the logger that names the trace's folder once per graph
_HANDLE = re.compile(r"^(?P<name>.+):\d+$")  # kernel_name:debug_handle (torch 2.9 on)


@dataclass
class Tracing:
    """Inductor's debug trace, on in this process into `folder`; `saved`: the settings it replaced."""

    folder: Path
    saved: dict[str, Any]
    quiet: logging.Filter


class _Unsaid(logging.Filter):
    """Drops Inductor's line naming its debug trace's folder ("... debug trace: /tmp/..."): the
    folder is a temporary one, gone once read, and the job's log should not send anyone there."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = str(folder)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return self.folder not in record.getMessage()
        except Exception:  # a record that cannot be formatted is not ours to drop
            return True


def wanted(config: JobConfig) -> bool:
    """Whether the job traces: compiled with Inductor, compiler.provenance on, and its own fresh
    Inductor cache (a shared cache would keep Inductor's copies of the trace, and its graphs,
    compiled before, would miss: provenance tracking is part of the cache key)."""
    return bool(config.compile and config.compiler.provenance and config.compiler.backend == "inductor"
                and config.run.compile_cache == "fresh")


def start(config: JobConfig) -> Tracing | None:
    """Turn Inductor's provenance tracking and debug trace on in this process, into a new temporary
    folder; None where the job does not trace (`wanted`) or the installed torch has no provenance
    tracking. `discard` (or `finish`) turns it off again."""
    trace = _trace_settings(config)
    if trace is None or not hasattr(trace, "debug_dir"):
        return None
    # in the job's private cache folder where it has one (the sweep removes it, even when it stops
    # the job by SIGKILL), else named by this process's pid (the next sweep removes it if it stays)
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    within = Path(cache).parent if cache and Path(cache).parent.name.startswith("profsweep-cache-") else None
    if within is not None:
        within.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"profsweep-provenance-{os.getpid()}-", dir=within))
    settings = {"enabled": True, "debug_dir": str(folder), "provenance_tracking_level": 1,
                **{name: False for name in UNUSED_TRACE_FILES if hasattr(trace, name)}}
    saved = {name: getattr(trace, name) for name in settings}
    for name, value in settings.items():
        setattr(trace, name, value)
    quiet = _Unsaid(folder)
    logging.getLogger(INDUCTOR_DEBUG_LOG).addFilter(quiet)
    return Tracing(folder, saved, quiet)


def same_cache_key(config: JobConfig) -> None:
    """In the twin, which compiles untraced: provenance tracking on as in the job, without the debug
    trace, so that its compile finds the job's graph in the job's cache (the tracking level is part
    of Inductor's cache key; the rest of the trace's settings are not)."""
    trace = _trace_settings(config)
    if trace is not None:
        trace.provenance_tracking_level = 1


def _trace_settings(config: JobConfig) -> Any:
    """Inductor's trace settings where the job traces (`wanted`) and this torch has provenance
    tracking; else None. A private module, as for the kernel names in the trace (job._compiler):
    torch.compile's `options=` may not be given with `mode=`, and compiler.mode is a grid key."""
    if not wanted(config):
        return None
    import torch._inductor.config as inductor_config

    trace = getattr(inductor_config, "trace", None)
    return trace if hasattr(trace, "provenance_tracking_level") else None


def finish(tracing: Tracing | None, job_dir: Path, out: dict[str, Any]) -> None:
    """Read what Inductor wrote into job_dir/provenance.json (its kernel count in
    `out["provenance_kernels"]`), then turn the trace off and remove its folder."""
    if tracing is None:
        return
    try:
        found = read(tracing.folder)
        write_json(job_dir / PROVENANCE_FILE, {"torch": _torch_version(), **found})
        out["provenance_kernels"] = len(found["kernels"])
    except Exception as exc:  # what compile fused is an extra: it never fails a job that measured
        out["warnings"] = [*(out.get("warnings") or []), f"Inductor's provenance not read: {type(exc).__name__}: {exc}"]
    finally:
        discard(tracing)


def discard(tracing: Tracing | None) -> None:
    """Turn the trace off (the settings it replaced, for a next job in this process) and remove its folder."""
    if tracing is None:
        return
    import torch._inductor.config as inductor_config

    for name, value in tracing.saved.items():
        setattr(inductor_config.trace, name, value)
    logging.getLogger(INDUCTOR_DEBUG_LOG).removeFilter(tracing.quiet)
    shutil.rmtree(tracing.folder, ignore_errors=True)


def read(folder: Path) -> dict[str, Any]:
    """{"graphs": how many compiled graphs left a mapping, "kernels": [...]} from Inductor's debug
    folders under `folder` (see the module's text). A graph compiled without a mapping (a training
    step's backward graph, compiled later, outside what Inductor tracks) is named in "unmapped";
    a kernel of a mapped graph whose name in the trace such a graph also defines is left out, in
    "left_out": the trace cannot tell the two apart. A mapping that cannot be read is named in
    "unreadable" and its graph counts as unmapped."""
    kernels: list[dict[str, Any]] = []
    unreadable: list[str] = []
    unmapped: list[str] = []
    elsewhere: set[str] = set()  # trace names the unmapped graphs define
    mapped = 0
    for graph in sorted(p for p in Path(folder).glob("torchinductor/*") if p.is_dir()):
        code = _text(graph / CODE_FILE)
        try:
            data = read_json(graph / MAPPING_FILE)
        except (OSError, ValueError) as exc:
            if isinstance(exc, FileNotFoundError):
                unmapped.append(graph.name)
            else:
                unreadable.append(f"{graph.name}: {exc}")
            elsewhere |= {trace_name(k, code) for k in defined_kernels(code)}
            continue
        kernels += graph_kernels(data, code, graph.name)
        mapped += 1
    kept = [k for k in kernels if k["trace_name"] not in elsewhere]
    left_out = sorted({k["trace_name"] for k in kernels if k["trace_name"] in elsewhere})
    return {"graphs": mapped, "kernels": kept,
            **({"unmapped": unmapped} if unmapped else {}), **({"left_out": left_out} if left_out else {}),
            **({"unreadable": unreadable} if unreadable else {})}


def defined_kernels(code: str) -> list[str]:
    """The kernels a graph's generated code defines (`name = async_compile.cpp_pybinding(...)`,
    `.triton(...)`)."""
    return re.findall(r"^(\w+) = async_compile\.\w+\(", code, flags=re.MULTILINE)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, ValueError):
        return ""


def graph_kernels(mapping: Any, code: str, graph: str) -> list[dict[str, Any]]:
    """One compiled graph's kernels from its provenance mapping (kernel -> post-grad nodes, post-grad
    node -> the captured graph's nodes) and its generated code (the kernel's name in the trace)."""
    if not isinstance(mapping, dict):
        return []
    to_post = mapping.get("cppCodeToPost")
    post_to_pre = mapping.get("postToPre") if isinstance(mapping.get("postToPre"), dict) else {}
    if not isinstance(to_post, dict):
        return []
    merged: dict[str, dict[str, Any]] = {}  # a kernel called twice has two debug handles
    for key, posts in to_post.items():
        handle = _HANDLE.match(str(key))
        name = handle.group("name") if handle else str(key)
        posts = [str(p) for p in posts] if isinstance(posts, list) else []
        entry = merged.setdefault(name, {"kernel": name, "trace_name": trace_name(name, code), "graph": graph,
                                         "source_nodes": [], "post_grad_nodes": []})
        for post in posts:
            _add(entry["post_grad_nodes"], post)
            pre = post_to_pre.get(post)
            for node in pre if isinstance(pre, list) else []:
                _add(entry["source_nodes"], str(node))
    return list(merged.values())


def trace_name(kernel: str, code: str) -> str:
    """The kernel's name in the profiler's trace: `graph_<id>_<kernel>` where the generated code
    records it so (the C++ kernels' RECORD_FUNCTION, job._compiler), else the kernel's own."""
    found = re.search(r'"(graph_\d+_' + re.escape(kernel) + r')"', code)
    return found.group(1) if found else kernel


def _add(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)


def _torch_version() -> str:
    import torch  # imported already: the job compiled with it

    return str(torch.__version__)
