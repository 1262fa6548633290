"""What one profiled step does, apart from the loop that profiles it: an inference call, or a
training step in three phases.

    inference: fn(*args) under no_grad, an nn.Module in eval()
    training:  record_function("forward"):   out = fn(*args); loss = loss(out)
               record_function("backward"):  loss.backward()
               record_function("optimizer"): optimizer.step(); optimizer.zero_grad()

A training step needs parameters: an nn.Module's own, or, for a plain function (matmul_add),
its floating-point tensor arguments, which then require gradients and are what the optimizer
updates (documented in the README). Imported by the job only: it imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.profiler import record_function

from experiments.seam import Workload

PHASES = ("forward", "backward", "optimizer")
OPTIMIZERS = ("adamw", "sgd")
LEARNING_RATE = 1e-3  # the step's cost does not depend on it


class StepError(RuntimeError):
    """A workload that cannot be stepped as configured; the message is what the user reads."""


@dataclass
class Step:
    """The callable of one step, its eager twin (for counting FLOPs), and what it trains."""

    call: Callable[[], Any]
    eager: Callable[[], Any]
    parameters: list[torch.Tensor]
    optimizer: Any = None


def default_loss(output: Any) -> torch.Tensor:
    """The output's sum; a model output with a `.loss` (Hugging Face, labels given) uses it, and a
    tuple, list or mapping its first tensor."""
    if isinstance(output, torch.Tensor):
        return output.sum()
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.sum()
    raise StepError(f"train=true: no loss from an output of type {type(output).__name__}; "
                    "return Workload(fn, args, loss=...) from the factory")


def make_step(workload: Workload, *, train: bool, optimizer: str, name: str,
              compile_fn: Callable[[Any], Any] | None = None) -> Step:
    """The step of `workload`; `compile_fn` (torch.compile with the job's settings) is applied to
    the model or function, as users do, never to the optimizer."""
    fn, args = workload.fn, workload.args
    if isinstance(fn, nn.Module):
        fn.train(train)
    parameters = _parameters(fn, args) if train else []
    if train and not parameters:
        raise StepError(
            f"train=true needs parameters: {name} returned a {type(fn).__name__} with none and no "
            "floating-point tensor arguments; return an nn.Module with parameters"
        )
    model = compile_fn(fn) if compile_fn is not None else fn
    if not train:
        return Step(call=lambda: model(*args), eager=lambda: fn(*args), parameters=[])
    opt = _optimizer(optimizer, parameters)
    loss_of = workload.loss or default_loss
    return Step(call=_training(model, args, loss_of, opt), eager=_training(fn, args, loss_of, opt),
                parameters=parameters, optimizer=opt)


def _parameters(fn: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
    if isinstance(fn, nn.Module):
        return [p for p in fn.parameters() if p.requires_grad]
    params = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    for p in params:
        p.requires_grad_(True)
    return params


def _optimizer(name: str, parameters: list[torch.Tensor]) -> Any:
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=LEARNING_RATE)
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=LEARNING_RATE)
    raise StepError(f"optimizer={name!r} is not allowed: choose one of {', '.join(OPTIMIZERS)}")


def _training(model: Callable[..., Any], args: tuple[Any, ...], loss_of: Callable[[Any], Any],
              opt: Any) -> Callable[[], Any]:
    def step() -> Any:
        with record_function("forward"):
            loss = loss_of(model(*args))
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    return step


def optimizer_slots(name: str) -> int:
    """Tensors of optimizer state per parameter: AdamW keeps two moments, plain SGD none."""
    return 2 if name == "adamw" else 0
