"""What one profiled step does, apart from the loop that profiles it: an inference call, or a
training step in three phases.

    inference: fn(*args, **kwargs) under no_grad, its modules in eval()
    training:  record_function("forward"):   out = fn(*args, **kwargs); loss = loss(out)
               record_function("backward"):  loss.backward()
               record_function("optimizer"): optimizer.step(); optimizer.zero_grad()

A training step needs parameters: those of the modules the callable runs (`modules_of`: an
nn.Module itself, or the modules a lambda, a functools.partial or a bound method closes over,
the nn.Parameters such a function closes over outside any module, and modules given as
arguments), or, for a plain
function that holds none (matmul_add), its floating-point tensor inputs, which then require
gradients and are what the optimizer updates (documented in docs/own-model.md). Imported by the job
only: it imports torch.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn
from torch.profiler import record_function

from experiments.config import OPTIMIZERS
from experiments.counting import slotted
from experiments.records import Refusal
from experiments.seam import Workload

LEARNING_RATE = 1e-3  # the step's cost does not depend on it


class StepError(Refusal):
    """A workload that cannot be stepped as configured; the message is what the user reads (no
    other process can change it: a records.Refusal)."""


@dataclass
class Step:
    """The callable of one step, its eager twin (for counting FLOPs), and what it trains."""

    call: Callable[[], Any]
    eager: Callable[[], Any]
    parameters: list[torch.Tensor]
    optimizer: Any = None
    unreached: Callable[[], int] | None = None  # training: how many parameters the loss gives no gradient
    loss_given: bool = False  # the factory gave the loss (Workload.loss); else default_loss


def default_loss(output: Any) -> torch.Tensor:
    """The output's own loss when it has one: a scalar tensor, a `.loss` (Hugging Face models given
    `labels=`), a mapping's "loss", a tuple's or list's first tensor when it is a scalar; otherwise
    the sum of the output (of the first floating-point or complex tensor of a tuple, list, mapping
    or dataclass output: an integer one, `argmax`'s, carries no gradient). A complex tensor's loss
    sums its real and imaginary parts (backward needs a real one)."""
    if isinstance(output, torch.Tensor):
        return _as_loss(output)
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        return _as_loss(loss)
    if isinstance(output, Mapping):
        values: Iterable[Any] = output.values()
    elif is_dataclass(output) and not isinstance(output, type):
        values = (getattr(output, f.name, None) for f in fields(output))
    else:
        values = output if isinstance(output, (tuple, list)) else ()
    tensors = [value for value in values if isinstance(value, torch.Tensor)]
    for value in [t for t in tensors if t.is_floating_point() or t.is_complex()] or tensors:
        return _as_loss(value)
    if output is None or isinstance(output, (bool, int, float, complex, str, bytes)):
        raise StepError(f"train=true: the step returned {_kind(output)}, which carries no gradient: its forward "
                        "must return a tensor (or an output holding one) that the loss is made from, not a Python "
                        "number (.item() and float() leave autograd)")
    raise StepError(f"train=true: no loss from an output of type {type(output).__name__}; "
                    "return Workload(fn, args, loss=...) from the factory")


def _kind(value: Any) -> str:
    return "None" if value is None else f"a Python {type(value).__name__}"


def _as_loss(tensor: torch.Tensor) -> torch.Tensor:
    """A real scalar is a loss already; anything else is summed into one (a complex tensor's real
    and imaginary parts, as real numbers)."""
    if tensor.is_complex():
        return torch.view_as_real(tensor).sum()
    if not tensor.is_floating_point():  # argmax's indices, a mask: autograd's "does not require grad" said why
        raise StepError(f"train=true: the step's output is {str(tensor.dtype).removeprefix('torch.')} (indices, a "
                        "mask, a count), which carries no gradient: return the floating-point output it is made from "
                        "(the logits, not their argmax), or Workload(fn, args, loss=...) from the factory")
    return tensor if tensor.dim() == 0 else tensor.sum()


def _checked_loss(loss_of: Callable[[Any], Any]) -> Callable[[Any], torch.Tensor]:
    """A factory's own loss (Workload.loss), its result checked as default_loss's is: a tensor."""
    def loss(output: Any) -> torch.Tensor:
        value = loss_of(output)
        if not isinstance(value, torch.Tensor):
            raise StepError(f"train=true: Workload(loss=...) returned {_kind(value)}, which carries no gradient: "
                            "return a scalar tensor made from the output (e.g. out.sum(), not float(out.sum()))")
        return value

    return loss


def make_step(workload: Workload, *, train: bool, optimizer: str, name: str,
              compile_fn: Callable[[Any], Any] | None = None) -> Step:
    """The step of `workload`; `compile_fn` (torch.compile with the job's settings) is applied to
    the model or function, as users do, never to the optimizer."""
    fn, args, kwargs = workload.fn, workload.args, dict(workload.kwargs)
    modules = modules_of(fn, args, kwargs)
    for module in modules:
        module.train(train)
    parameters = _parameters(fn, modules, workload.inputs) if train else []
    if train and not parameters:
        frozen = len(unique(p for m in modules for p in m.parameters()))
        if frozen:
            raise StepError(
                f"train=true needs parameters to train: the {type(fn).__name__} that {name} returned has {frozen}, "
                "all with requires_grad=False (frozen); unfreeze those to train (p.requires_grad_(True)), "
                "or profile it with train=false")
        what = (f"an nn.Module ({type(fn).__name__}) with none (a module's inputs are not trained)"
                if isinstance(fn, nn.Module) else f"a {type(fn).__name__} with none and no floating-point tensor arguments")
        raise StepError(
            f"train=true needs parameters: {name} returned {what}; return an nn.Module with parameters, "
            "or a callable that calls one, or profile it with train=false"
        )
    try:
        model = compile_fn(fn) if compile_fn is not None else fn
    except Exception as exc:  # torch.compile refuses what it is given (a torch.jit.script module): every time
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StepError(f"torch.compile failed on the {type(fn).__name__} that {name} returned, before it ran: "
                        f"{said}") from exc
    if not train:
        return Step(call=lambda: model(*args, **kwargs), eager=lambda: fn(*args, **kwargs), parameters=[])
    opt = _optimizer(optimizer, parameters)
    loss_of = _checked_loss(workload.loss) if workload.loss is not None else default_loss
    return Step(call=_training(model, args, kwargs, loss_of, opt), eager=_training(fn, args, kwargs, loss_of, opt),
                parameters=parameters, optimizer=opt, loss_given=workload.loss is not None,
                unreached=lambda: _unreached(fn, args, kwargs, loss_of, parameters))


def _unreached(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               loss_of: Callable[[Any], Any], parameters: list[torch.Tensor]) -> int:
    """How many of the trained parameters get no gradient from the loss: one eager forward and
    backward as the step runs them (.backward(), so that reentrant checkpointing reaches what it
    wraps, as torch.autograd.grad does not), each .grad None before and after, as the step's
    zero_grad(set_to_none=True) leaves them."""
    wanted = [p for p in parameters if p.requires_grad]
    if not wanted:
        return 0
    for p in wanted:
        p.grad = None
    try:
        loss_of(fn(*args, **kwargs)).backward()
        return sum(1 for p in wanted if p.grad is None)
    finally:
        for p in wanted:
            p.grad = None


def _parameters(fn: Any, modules: list[nn.Module], inputs: tuple[Any, ...]) -> list[torch.Tensor]:
    """What a training step updates: its modules' parameters; for a function that runs no module,
    its floating-point tensor inputs."""
    if modules:
        params = unique(p for m in modules for p in m.parameters() if p.requires_grad)
        if params or isinstance(fn, nn.Module):
            return params
    params = unique(a for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point())
    for p in params:
        p.requires_grad_(True)
    return params


def unique(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor once (a module shared by two closures, labels given as the input ids)."""
    return list({id(t): t for t in tensors}.values())


# --- the modules a callable runs ----------------------------------------------------------------

REACH_DEPTH = 6  # how many closures, partials, methods and containers deep modules_of looks
REACH_WIDTH = 256  # how many items of one container it looks at
_LEAVES = (torch.Tensor, str, bytes, int, float, complex, bool, type(None), type, types.ModuleType)


def modules_of(fn: Any, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None) -> list[nn.Module]:
    """The nn.Modules that calling `fn(*args, **kwargs)` runs, by public introspection only: `fn`
    itself when it is a module; else, recursively (REACH_DEPTH levels, REACH_WIDTH items a
    container), the modules in a function's closure cells, default arguments and the globals its
    code names, a functools.partial's func, args and keywords, a bound method's `__self__` and
    function, and the attributes of any other object (`predictor.predict` of a plain class); then
    the modules among the call's arguments and keyword arguments (`run(model, x)`,
    `functional_call(model, params, (x,))`). Each module once, in the order found. Parameters found
    the same way outside any of those modules (a function closing over nn.Parameter weights) come
    last as one nn.ParameterList of them, the very tensors: the step trains them and counts their
    bytes, as a module's."""
    found: dict[int, nn.Module] = {}
    loose: dict[int, torch.Tensor] = {}
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if isinstance(obj, nn.Module):
            found.setdefault(id(obj), obj)
            return
        if isinstance(obj, nn.Parameter):
            loose.setdefault(id(obj), obj)
            return
        if depth >= REACH_DEPTH or isinstance(obj, _LEAVES) or id(obj) in seen:
            return
        seen.add(id(obj))
        for inner in _reachable(obj):
            visit(inner, depth + 1)

    for obj in (fn, *args, *(kwargs or {}).values()):
        visit(obj, 0)
    modules = list(found.values())
    owned = {id(t) for m in modules for t in m.parameters()}
    free = [t for i, t in loose.items() if i not in owned]
    if free:
        modules.append(nn.ParameterList(free))  # registers each Parameter itself, not a copy
    return modules


def _reachable(obj: Any) -> list[Any]:
    """What `obj` holds that a call of it may run (see modules_of)."""
    if isinstance(obj, functools.partial):
        return [obj.func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, (types.MethodType, types.BuiltinMethodType)):
        return [getattr(obj, "__self__", None), getattr(obj, "__func__", None)]
    if isinstance(obj, types.FunctionType):
        cells = []
        for cell in obj.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # a cell not yet filled
                continue
        code_globals = [obj.__globals__[n] for n in obj.__code__.co_names if n in obj.__globals__]
        return [*cells, *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values(), *code_globals,
                getattr(obj, "__wrapped__", None)]
    if isinstance(obj, Mapping):
        return list(obj.values())[:REACH_WIDTH]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)[:REACH_WIDTH]
    # any other object (one with __call__, or whose bound method is the step): what it holds
    held = [getattr(obj, f.name, None) for f in fields(obj)] if is_dataclass(obj) else []
    slots = slotted(obj)
    attributes = getattr(obj, "__dict__", {})
    return [*held, *slots[:REACH_WIDTH], *(list(attributes.values())[:REACH_WIDTH] if isinstance(attributes, Mapping)
                                             else [])]


def _optimizer(name: str, parameters: list[torch.Tensor]) -> Any:
    """The registered optimizer (config.OPTIMIZERS) over the step's parameters."""
    if name not in OPTIMIZERS:
        raise StepError(f"optimizer={name!r} is not allowed: choose one of {', '.join(OPTIMIZERS)}")
    return getattr(torch.optim, OPTIMIZERS[name].torch_class)(parameters, lr=LEARNING_RATE)


def _training(model: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
              loss_of: Callable[[Any], Any], opt: Any) -> Callable[[], Any]:
    def step() -> Any:
        with record_function("forward"):
            loss = loss_of(model(*args, **kwargs))
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    return step


def optimizer_slots(name: str) -> int:
    """Tensors of optimizer state per parameter (config.OPTIMIZERS): AdamW keeps two moments, plain
    SGD none."""
    return OPTIMIZERS[name].state_slots
