"""What a built workload holds, against what the grid asked for: the dtype and device of its
parameters and inputs, a warning for each difference, and a refusal of meta tensors.

A factory is free to ignore `dtype` or `device` (float64 inputs for dtype=bf16, a model left on
the CPU for device=cuda); the job then runs what it was given, and its record says so: the
`ran_dtype` and `ran_device` it actually ran and a `warnings` line naming both sides. Integer and
boolean tensors (token ids, masks, labels) have no say in the dtype. Tensors on device 'meta'
hold no data, so nothing could be measured: the job is refused. Imported by the job only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch.nn.parameter import is_lazy
from torch import nn

from experiments.counting import tensors

GRID_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@dataclass(frozen=True)
class Placement:
    """The dtype and device a workload ran, as recorded in metrics.json."""

    dtype: str | None  # ran_dtype: floating-point dtypes of parameters and inputs, most bytes first ("bf16", "fp32+bf16")
    device: str | None  # ran_device: device types of parameters, buffers and inputs, most bytes first ("cpu", "cuda+cpu")
    warnings: list[str] = field(default_factory=list)  # each difference from the request, naming both
    refusal: str | None = None  # why the job cannot run (meta tensors), or None


def dtype_name(dtype: torch.dtype) -> str:
    """The grid's spelling where it has one (bf16, fp16, fp32), else torch's (float64)."""
    return GRID_DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def of(modules: Iterable[nn.Module], inputs: Iterable[Any], *, dtype: torch.dtype, device: str,
       requested_device: str | None = None, target: str = "the factory") -> Placement:
    """The placement of `modules` (their parameters and buffers) and of the tensors in `inputs`
    (nested in lists, tuples and mappings too), against the grid's `dtype` and `device` (the
    resolved device; `requested_device` is what the grid said, `auto` included)."""
    modules = list(modules)
    groups = {  # a lazy module's parameters and buffers have no shape yet: its first call makes them
        "parameters": _unique(p for m in modules for p in m.parameters() if not is_lazy(p)),
        "buffers": _unique(b for m in modules for b in m.buffers() if not is_lazy(b)),
        "inputs": _unique(tensors(inputs)),
    }
    everything = [t for held in groups.values() for t in held]
    floating = [t for name in ("parameters", "inputs") for t in groups[name] if _floating(t)]
    placement = Placement(
        dtype=_by_bytes(floating, lambda t: dtype_name(t.dtype)),
        device=_by_bytes(everything, lambda t: t.device.type),
    )
    meta = {name: [t for t in held if t.is_meta] for name, held in groups.items()}
    meta = {name: held for name, held in meta.items() if held}
    if meta:
        which = ", ".join(f"{len(held)} of {len(groups[name])} {name}" for name, held in meta.items())
        refusal = (f"meta tensors are refused: {target} returned {which} on device 'meta'; meta tensors "
                   f"hold no data, so nothing would run on {device}. Build them on the device the factory "
                   "is given (a model made on 'meta' needs model.to_empty(device=device), then its weights "
                   "initialised)")
        return Placement(placement.dtype, placement.device, refusal=refusal)
    asked_dtype = dtype_name(dtype)
    asked_device = (f"the grid asked for {device}" if requested_device in (None, device)
                    else f"the grid's device={requested_device} chose {device}")
    warnings = []
    for name in ("parameters", "inputs"):
        names = _by_bytes([t for t in groups[name] if _floating(t)], lambda t: dtype_name(t.dtype), " and ")
        if names is not None and names != asked_dtype:
            warnings.append(f"{name} are {names}, the grid asked for {asked_dtype}")
    for name, held in groups.items():
        places = _by_bytes(held, lambda t: t.device.type, " and ")
        if places is not None and places != torch.device(device).type:
            warnings.append(f"{name} are on {places}, {asked_device}")
    return Placement(placement.dtype, placement.device, warnings)


def _floating(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _unique(items: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    return list({id(t): t for t in items}.values())


def _by_bytes(items: list[torch.Tensor], key: Any, sep: str = "+") -> str | None:
    """The distinct `key`s of `items`, the one with the most bytes first; None without items."""
    if not items:
        return None
    size: dict[str, int] = {}
    for t in items:
        k = key(t)
        size[k] = size.get(k, 0) + t.numel() * t.element_size()
    return sep.join(sorted(size, key=lambda k: -size[k]))
