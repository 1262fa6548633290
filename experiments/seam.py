"""The workload seam: every workload, built-in or a user's, is a factory named by import path.

    # mybench/blocks.py
    def make_block(*, size, dtype, device, hidden: int = 512):
        block = Block(hidden).to(device=device, dtype=dtype)
        return block, (torch.randn(size, hidden, device=device, dtype=dtype),)

    python experiments/run.py -m workload=custom workload._target_=mybench.blocks:make_block \
        workload.hidden=512,1024 size=128,512

A factory is called with the keyword arguments `size` (int), `dtype` (a torch.dtype), `device`
(a torch.device) and the workload's own settings (every other key of `workload.`), and returns
what one step calls: `(fn, args)`, a callable (a function or an nn.Module) and the tuple of its
arguments, or a `Workload`, which may add keyword arguments (`kwargs`, for models such as Hugging
Face's that take `input_ids=`, `attention_mask=`, `labels=`), a `loss` (for train=true) and a
`cost`. The step calls `fn(*args, **kwargs)`.

A factory may also carry a cost model as an attribute, `factory.cost(**the same keywords) ->
Cost`, computed before anything is allocated (the job refuses a grid point that cannot fit);
`@costed(model)` attaches it. The settings' annotations are checked before any job starts:
`int`, `float`, `bool`, `str`, `Literal[...]` choices, and `Annotated[int, AtLeast(1)]`.

Light on purpose: no torch at import, so the sweep process can check targets cheaply.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import numbers
import os
import re
import sys
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from profsweep.contract import first_line, without_address

GRID_ARGUMENTS = ("size", "dtype", "device")  # what every factory is given besides its settings
RESERVED = ("_target_", "name")  # workload. keys that are profsweep's own, never passed to the factory


class WorkloadError(ValueError):
    """A workload target or setting that cannot be used; the message names key, value and why."""


@dataclass(frozen=True)
class Cost:
    """What one call of a workload costs, counted from its shapes."""

    flops: int  # multiply-adds count 2; each elementwise output element counts 1
    bytes: int  # compulsory traffic: inputs and weights read once, the output written once
    memory_bytes: int  # estimated peak footprint of inference: inputs, weights, live intermediates
    param_bytes: int = 0  # what a training step updates (gradients and optimizer state scale with it)


@dataclass(frozen=True)
class Workload:
    """What one step calls, `fn(*args, **kwargs)`, and optionally how to train it and what it costs.

    fn: a function, an nn.Module, or any callable; one that closes over modules (a lambda around
        a model, a functools.partial, a module's bound method) is accounted and trained with
        their parameters.
    kwargs: keyword inputs (`input_ids=`, `attention_mask=`, `labels=`), counted like `args`.
    loss: for train=true, `loss(output) -> scalar tensor`; default: the output's own loss (a
        scalar tensor, `.loss` or `["loss"]`, a tuple's first scalar), else the output's sum.
    cost: a hand count of one call; without it the job counts FLOPs with FlopCounterMode.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    loss: Callable[[Any], Any] | None = None
    cost: Cost | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> tuple[Any, ...]:
        """Every input of the step, positional then keyword: what the job counts and checks."""
        return (*self.args, *self.kwargs.values())


@dataclass(frozen=True)
class AtLeast:
    """An `Annotated` bound on a numeric setting: `Annotated[int, AtLeast(1)]`."""

    minimum: float


@dataclass(frozen=True)
class CudaOnly:
    """What `factory.needs_cuda(**settings)` returns for settings that run only on CUDA (None
    otherwise): the sweep refuses such a grid point on the CPU before any job starts."""

    setting: str  # e.g. "workload.backend='efficient'"
    why: str  # e.g. "it is a CUDA kernel"
    instead: str  # e.g. "choose auto, math or flash"

    def refusal(self, where: str, detail: str = "") -> str:
        return f"{self.setting} is not allowed {where}: {self.why}{detail}; {self.instead}"

    def left_out(self, detail: str) -> str:
        """Why a sweep with run.unavailable=skip leaves such a grid point out."""
        return f"{self.setting} needs CUDA ({self.why}) and {detail}"


def needs_cuda(target: str, settings: Mapping[str, Any]) -> CudaOnly | None:
    """The factory's answer to whether these settings need a CUDA device (None: they do not)."""
    hook = getattr(locate(target), "needs_cuda", None)
    return hook(**settings) if callable(hook) else None


def costed(model: Callable[..., Cost]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach a cost model to a factory: `model(**the factory's keywords) -> Cost`."""

    def attach(factory: Callable[..., Any]) -> Callable[..., Any]:
        factory.cost = model  # type: ignore[attr-defined]
        return factory

    return attach


# --- finding a target -------------------------------------------------------------------------


def locate(target: str) -> Any:
    """The object named `package.module:attribute` or `package.module.attribute`.

    The working directory is searched too (as `python -m` does), after everything on sys.path,
    so a user's module next to where they run the sweep is found without installing it.
    """
    if not isinstance(target, str) or not target.strip() or target.strip() in ("???", "None"):
        raise WorkloadError(f"workload._target_={target!r} is not allowed: name a factory as "
                            "package.module:function (e.g. mybench.blocks:make_block)")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    if ":" in target:
        module_name, _, attribute = target.partition(":")
        module = _import(target, module_name)
        return _attribute(target, module, attribute)
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
        module_name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                raise _import_failure(target, exc) from exc  # the module exists; its import failed
            continue
        except (Exception, SystemExit) as exc:
            raise _import_failure(target, exc) from exc
        return _attribute(target, module, ".".join(parts[cut:]))
    raise WorkloadError(f"workload._target_={target!r} does not import: no module named "
                        f"{parts[0]!r} (looked on PYTHONPATH and in {cwd})")


def _import(target: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # sys.exit() at import ended the sweep without a word
        raise _import_failure(target, exc) from exc


def _import_failure(target: str, exc: BaseException) -> WorkloadError:
    where = f" (looked on PYTHONPATH and in {os.getcwd()})" if isinstance(exc, ModuleNotFoundError) else ""
    if isinstance(exc, SystemExit):
        return WorkloadError(f"workload._target_={target!r} does not import: the module called sys.exit({exc.code!r}) "
                             "as it was imported (code under `if __name__ == \"__main__\":` does not run on import)")
    return WorkloadError(f"workload._target_={target!r} does not import: {type(exc).__name__}: {exc}{where}")


def _attribute(target: str, module: Any, path: str) -> Any:
    obj = module
    for name in path.split("."):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise WorkloadError(f"workload._target_={target!r} does not import: module "
                                f"{module.__name__!r} has no attribute {path!r}") from None
    return obj


def defaults(target: str) -> dict[str, Any]:
    """The factory's own settings and their default values ({} when it cannot be inspected)."""
    try:
        parameters = inspect.signature(locate(target)).parameters
    except (WorkloadError, TypeError, ValueError):
        return {}
    simple = (bool, int, float, str, type(None))
    return {name: p.default if isinstance(p.default, simple) else without_address(repr(p.default))
            for name, p in parameters.items()
            if name not in GRID_ARGUMENTS and p.default is not inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def short_name(target: str) -> str:
    """The factory's own name, which names the workload unless workload.name says otherwise."""
    return str(target).replace(":", ".").rsplit(".", 1)[-1]


# Set by a sweep whose factories share a name (a:make, b:make): {target: the name it is shown by}
SHOWN_ENV = "PROFSWEEP_SHOWN_NAMES"


def shown_name(target: str, name: str) -> str:
    """The workload's name in job folders and progress lines: in a sweep of factories that share
    their name, a factory named by default is shown as `distinct_names` tells it apart
    (`blocks.make`); its series keep the name (`make`, told apart by `target`), so that they pair
    with a sweep of one of them alone."""
    shown = os.environ.get(SHOWN_ENV)
    if shown and name == short_name(target):
        try:
            return str(json.loads(shown)[str(target)])
        except (ValueError, KeyError, TypeError):
            pass
    return name


def distinct_names(targets: Iterable[str]) -> dict[str, str]:
    """For factories whose own names are the same (`a:make`, `b:make`), names that tell them apart:
    the fewest module parts before each that do (`a.make`, `b.make`; `x.m:make`, `y.m:make` ->
    `x.m.make`, `y.m.make`). Factories with a name of their own, one factory written two ways
    (`a:make`, `a.make`), and ones no module part tells apart, are left out."""
    by_name: dict[str, dict[str, list[str]]] = {}
    for target in targets:
        parts = [p for p in re.split(r"[.:]", str(target)) if p]
        by_name.setdefault(parts[-1] if parts else str(target), {})[str(target)] = parts
    names: dict[str, str] = {}
    for group in by_name.values():
        if len({tuple(p) for p in group.values()}) < 2:  # one factory, however it is written
            continue
        for keep in range(2, max(len(p) for p in group.values()) + 1):
            tried = {t: ".".join(p[-keep:]) for t, p in group.items()}
            if len(set(tried.values())) == len({tuple(p) for p in group.values()}):
                names.update(tried)
                break
    return names


# --- checking a target and its settings before any job runs -----------------------------------


def check(target: str, settings: Mapping[str, Any]) -> Callable[..., Any]:
    """The factory, once it is shown to accept the grid arguments and `settings`; else a
    WorkloadError naming the key, the value and Python's own words."""
    factory = locate(target)
    if not callable(factory):
        raise WorkloadError(f"workload._target_={target!r} is not callable: it is a {type(factory).__name__}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin (torch:relu): nothing says it builds a workload
        raise WorkloadError(f"workload._target_={target!r} is a {type(factory).__name__} whose arguments cannot be "
                            f"read: a workload factory is a Python function (or class) that takes the keyword "
                            f"arguments {', '.join(GRID_ARGUMENTS)} and returns (fn, args) or "
                            "experiments.seam.Workload(fn, args); to profile an operator, return it from one "
                            "(docs/own-model.md)") from None
    for key, parameter in _reserved(signature.parameters):
        if parameter.default is inspect.Parameter.empty:
            raise WorkloadError(f"{target} needs a setting {key!r} that no override can give it: workload.{key} is "
                                f"profsweep's own ({_RESERVED_MEANING[key]}), never passed to the factory; give that "
                                "argument another name (e.g. model_name)")
    for key in GRID_ARGUMENTS:
        if key in settings:
            raise WorkloadError(f"workload.{key}={settings[key]!r} is not allowed: {key} is a grid key, which every "
                                f"factory is given; set it as {key}=... (without workload.)")
    try:
        signature.bind(**{name: None for name in GRID_ARGUMENTS}, **settings)
    except TypeError as exc:
        raise WorkloadError(_binding_message(target, signature, settings, exc)) from None
    hints = _hints(factory)
    for key, value in settings.items():
        parameter = signature.parameters.get(key)
        if parameter is not None and key in hints:
            problem = _mismatch(value, hints[key])
            if problem:
                raise WorkloadError(f"workload.{key}={value!r} is not allowed: {problem} "
                                    f"({target} declares {key}: {_hint_name(hints[key])})")
    return factory


_RESERVED_MEANING = {"_target_": "the factory itself", "name": "the workload's name in its job folders and series"}


def shadowed(target: str) -> list[str]:
    """Warnings for the factory's settings that profsweep's own keys hide (RESERVED): a default
    the factory always runs with, whatever workload.KEY says ([] when none, or no signature)."""
    try:
        parameters = inspect.signature(locate(target)).parameters
    except (WorkloadError, TypeError, ValueError):
        return []
    return [f"{target}'s setting {key}={p.default!r} always keeps its default: workload.{key} is "
            f"profsweep's own ({_RESERVED_MEANING[key]}), never passed to the factory; give that argument another "
            "name to set it" for key, p in _reserved(parameters) if p.default is not inspect.Parameter.empty]


def _reserved(parameters: Mapping[str, inspect.Parameter]) -> list[tuple[str, inspect.Parameter]]:
    """The factory's keyword parameters named as profsweep's own keys (RESERVED)."""
    return [(key, parameters[key]) for key in RESERVED if key in parameters
            and parameters[key].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def _binding_message(target: str, signature: inspect.Signature, settings: Mapping[str, Any],
                     exc: TypeError) -> str:
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing_grid = [n for n in GRID_ARGUMENTS if n not in params and not takes_any]
    if missing_grid:
        return (f"workload._target_={target!r} rejects its arguments ({exc}): a workload factory "
                f"takes the keyword arguments {', '.join(GRID_ARGUMENTS)} and its settings")
    own = [n for n, p in params.items() if n not in GRID_ARGUMENTS
           and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in settings if k not in params] if not takes_any else []
    missing = [n for n in own if params[n].default is inspect.Parameter.empty and n not in settings]
    allowed = f"its settings are {', '.join(own)}" if own else "it takes no settings"
    if unknown:
        key = unknown[0]
        return f"workload.{key}={settings[key]!r} is not allowed: {target} rejects it ({exc}); {allowed}"
    if missing:
        return f"workload.{missing[0]} is missing: {target} needs it ({exc}); set workload.{missing[0]}=..."
    return f"workload._target_={target!r} rejects its arguments ({exc})"


def _hints(factory: Callable[..., Any]) -> dict[str, Any]:
    """The factory's annotations, evaluated where possible (string annotations of a module with
    `from __future__ import annotations` too); names that cannot be evaluated stay strings."""
    fn = factory.__init__ if inspect.isclass(factory) else factory
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}) or {})


def _hint_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint if isinstance(hint, str) else getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


_SIMPLE = {"int": int, "float": float, "bool": bool, "str": str}


def _mismatch(value: Any, hint: Any) -> str | None:
    """Why `value` does not fit the annotation `hint`, or None (also for annotations we do not read)."""
    bounds: list[AtLeast] = []
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extras = typing.get_args(hint)
        bounds = [e for e in extras if isinstance(e, AtLeast)]
    hint = _SIMPLE.get(hint, hint) if isinstance(hint, str) else hint
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            return f"choose one of {', '.join(str(c) for c in choices)}"
        return None
    if hint is bool and not isinstance(value, bool):
        return "it must be true or false"
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        return "it must be an integer"
    if hint is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return "it must be a number"
    if hint is str and not isinstance(value, str):
        return "it must be a string"
    for bound in bounds:
        if isinstance(value, (int, float)) and value < bound.minimum:
            return f"it must be >= {bound.minimum:g}" if bound.minimum != 1 else "it must be an integer > 0"
    return None


# --- building -----------------------------------------------------------------------------------


def estimate(target: str, settings: Mapping[str, Any], **grid: Any) -> Cost | None:
    """The factory's cost model for this grid point, when it has one (nothing is allocated)."""
    model = getattr(locate(target), "cost", None)
    if isinstance(model, Cost):  # one count for every grid point: said, not ignored
        raise WorkloadError(f"{target}.cost is a Cost, not a function: a cost model takes the grid point "
                            f"(size, dtype, device and the settings) and returns its Cost: "
                            f"{short_name(target)}.cost = lambda **point: Cost(...)")
    if not callable(model):
        return None
    try:
        found = model(**grid, **settings)
    except Exception as exc:  # the user's cost model: named, not taken for the job's own failure
        raise WorkloadError(f"{target}'s cost model ({target}.cost) raised {type(exc).__name__}: "
                            f"{first_line(exc)}") from exc
    return checked_cost(f"{target}.cost", found)


def checked_cost(source: str, cost: Any) -> Cost:
    """A cost model's value, refused unless it is a Cost of finite counts of 0 or more (a negative
    or NaN count would be written into metrics.json and every figure made from it)."""
    if not isinstance(cost, Cost):
        raise WorkloadError(f"{source} returned {_shown(cost)}: a cost model returns experiments.seam.Cost(flops=..., "
                            "bytes=..., memory_bytes=..., param_bytes=...)")
    counts = {}
    for name in ("flops", "bytes", "memory_bytes", "param_bytes"):
        value = getattr(cost, name)
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            value = int(value)  # numpy's and torch's integers too: metrics.json holds plain ones
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise WorkloadError(f"{source} returned Cost({name}={value!r}): each count is a finite number of 0 or "
                                "more")
        counts[name] = value
    return Cost(**counts)


def build(target: str, settings: Mapping[str, Any], **grid: Any) -> Workload:
    """Call the factory for one grid point and return its Workload."""
    made = locate(target)(**grid, **settings)
    if isinstance(made, Workload):
        workload = made
    elif isinstance(made, (tuple, list)) and len(made) == 2:
        workload = Workload(made[0], made[1])
    else:
        what = (f"a {type(made).__name__} of {len(made)} items" if isinstance(made, (tuple, list))
                else f"a value of type {type(made).__name__}")
        raise WorkloadError(f"{target} returned {what}: a workload factory returns "
                            "(fn, args) or experiments.seam.Workload(fn, args, kwargs=..., loss=..., cost=...)")
    args = _arguments(target, workload.args)
    if not callable(workload.fn):
        raise WorkloadError(f"{target} returned {type(workload.fn).__name__} as the step's callable")
    kwargs = workload.kwargs if workload.kwargs is not None else {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise WorkloadError(f"{target} returned kwargs={_shown(kwargs)}: Workload(kwargs=...) is a mapping "
                            "of argument names to values, e.g. {'input_ids': ids, 'attention_mask': mask}")
    if workload.loss is not None and not callable(workload.loss):
        raise WorkloadError(f"{target} returned loss={_shown(workload.loss)}: Workload(loss=...) is a function of the "
                            "step's output that returns a scalar tensor, loss(output)")
    cost = checked_cost(f"{target}'s Workload(cost=...)", workload.cost) if workload.cost is not None else None
    return Workload(workload.fn, tuple(args), workload.loss, cost, dict(kwargs))


def _arguments(target: str, args: Any) -> tuple[Any, ...]:
    """The step's positional arguments: a tuple, or one argument given bare (a tensor, an object).
    A list, a mapping, None or an iterator is refused: each reads as something else (one list
    argument or several, keyword inputs, no arguments, arguments used up by the first step)."""
    if isinstance(args, tuple):
        return args
    said = f"{target} returned args={_shown(args)}"
    if isinstance(args, list):
        raise WorkloadError(f"{said}, a list: give the step's arguments as a tuple, (fn, (a, b)), or one list "
                            "argument as (fn, ([a, b],))")
    if isinstance(args, Mapping):
        raise WorkloadError(f"{said}, a mapping: give keyword inputs as experiments.seam.Workload(fn, kwargs={{...}}), "
                            "or one mapping argument as (fn, (mapping,))")
    if args is None:
        raise WorkloadError(f"{said}: give () for a step without arguments, or (None,) for one None argument")
    if isinstance(args, Iterator):
        raise WorkloadError(f"{said}, an iterator: the first step would use it up; give the arguments as a tuple")
    return (args,)  # one argument, given bare


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
