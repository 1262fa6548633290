"""The workload seam: factories found by import path, checked before any job, built for one grid
point; FLOPs counted by torch's FlopCounterMode against the hand cost models; training steps."""

from __future__ import annotations

import textwrap

import pytest
import torch

from experiments import seam
from experiments.counting import count_flops, transient_peak_bytes
from experiments.steps import StepError, default_loss, make_step

CPU = torch.device("cpu")

USER_MODULE = '''
import torch
from torch import nn

def make_block(*, size, dtype, device, hidden: int = 32, scale: float = 1.0):
    block = nn.Linear(hidden, hidden).to(device=device, dtype=dtype)
    return block, (torch.randn(size, hidden, device=device, dtype=dtype),)

def positional(size, dtype, device):
    return (lambda x: x), (torch.ones(1),)

def needs_width(*, size, dtype, device, width):
    return (lambda x: x), (torch.ones(width),)

_UNSET = object()

def with_objects(*, size, dtype, device, act=torch.relu, marker=_UNSET):
    return (lambda x: x), (torch.ones(1),)

def needs_name(*, size, dtype, device, name: str):
    return (lambda x: x), (torch.ones(1),)

def named(*, size, dtype, device, name: str = "enc", hidden: int = 4):
    return (lambda x: x), (torch.ones(1),)

NOT_A_FUNCTION = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    package = tmp_path / "mybench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "blocks.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "mybench.blocks"


def test_targets_are_found_by_colon_or_dotted_path(user_module):
    assert seam.locate("mybench.blocks:make_block") is seam.locate("mybench.blocks.make_block")
    assert seam.locate("experiments.workloads.matmul_add").__name__ == "matmul_add"
    assert seam.short_name("mybench.blocks:make_block") == "make_block"
    assert seam.defaults("mybench.blocks:make_block") == {"hidden": 32, "scale": 1.0}
    # an object's default is its text without the memory address, the same in every process
    assert seam.defaults("mybench.blocks:with_objects") == {"act": "<built-in method relu of type object>",
                                                            "marker": "<object object>"}


def test_factories_with_one_name_are_named_apart_by_the_fewest_module_parts():
    assert seam.distinct_names(["a:make", "b:make", "c:other"]) == {"a:make": "a.make", "b:make": "b.make"}
    assert seam.distinct_names(["x.m:make", "y.m:make", "x.m:make"]) == {"x.m:make": "x.m.make", "y.m:make": "y.m.make"}
    # as many parts for each as the two that need the most
    assert seam.distinct_names(["p.a:make", "p.b:make", "q.a:make"]) == {
        "p.a:make": "p.a.make", "p.b:make": "p.b.make", "q.a:make": "q.a.make"}
    assert seam.distinct_names(["a:make", "b:other"]) == {}
    # one factory written two ways is one factory; with another beside it, both ways show alike
    assert seam.distinct_names(["a:make", "a.make"]) == {}
    assert seam.distinct_names(["a:make", "a.make", "b:make"]) == {"a:make": "a.make", "a.make": "a.make",
                                                                   "b:make": "b.make"}


@pytest.mark.parametrize(
    "target,settings,needles",
    [
        ("mybench.nope:f", {}, ["workload._target_='mybench.nope:f' does not import", "No module named 'mybench.nope'"]),
        ("nowhere.at.all", {}, ["does not import", "no module named 'nowhere'"]),
        ("mybench.blocks:missing", {}, ["has no attribute 'missing'"]),
        ("mybench.blocks:NOT_A_FUNCTION", {}, ["is not callable: it is a int"]),
        ("mybench.blocks:make_block", {"hiden": 3}, ["workload.hiden=3 is not allowed",
                                                      "unexpected keyword argument 'hiden'",
                                                      "its settings are hidden, scale"]),
        ("mybench.blocks:make_block", {"hidden": "abc"}, ["workload.hidden='abc' is not allowed",
                                                          "must be an integer", "hidden: int"]),
        ("mybench.blocks:make_block", {"scale": True}, ["workload.scale=True", "must be a number"]),
        ("mybench.blocks:needs_width", {}, ["workload.width is missing", "workload.width=..."]),
        # workload.name names the workload: a factory that needs its own `name` can never get it
        ("mybench.blocks:needs_name", {}, ["mybench.blocks:needs_name needs a setting 'name' that no override can give "
                                           "it: workload.name is profsweep's own", "another name (e.g. model_name)"]),
        ("os:getcwd", {}, ["rejects its arguments", "keyword arguments size, dtype, device"]),
        # a builtin: its arguments cannot be read, and it builds no workload
        ("torch:relu", {}, ["workload._target_='torch:relu' is a builtin_function_or_method whose arguments cannot "
                            "be read", "to profile an operator, return it from one"]),
        ("experiments.workloads.bmm", {"batch": 0}, ["workload.batch=0 is not allowed", "> 0"]),
        # a grid key given as a setting: said as that, not as the factory rejecting its arguments (helper-44)
        ("mybench.blocks:make_block", {"size": 4}, ["workload.size=4 is not allowed: size is a grid key",
                                                    "set it as size=... (without workload.)"]),
        ("experiments.workloads.attention", {"backend": "fast"}, ["workload.backend='fast'",
                                                                  "auto, math, flash, efficient, cudnn"]),
    ],
)
def test_bad_targets_and_settings_are_refused_with_key_value_and_python_error(user_module, target, settings, needles):
    with pytest.raises(seam.WorkloadError) as info:
        seam.check(target, settings)
    for needle in needles:
        assert needle in str(info.value)


def test_a_factory_setting_that_workload_name_hides_is_said_to_keep_its_default(user_module):
    assert seam.shadowed("mybench.blocks:named") == [
        "mybench.blocks:named's setting name='enc' always keeps its default: workload.name is profsweep's own "
        "(the workload's name in its job folders and series), never passed to the factory; give that argument "
        "another name to set it"]
    assert seam.shadowed("mybench.blocks:make_block") == [] and seam.shadowed("mybench.nope:f") == []


def test_good_settings_pass_and_positional_factories_too(user_module):
    import mybench.blocks

    # the factory itself comes back, checked: an int is a number; keyword arguments bind to
    # positional parameters
    assert seam.check("mybench.blocks:make_block", {"hidden": 8, "scale": 2}) is mybench.blocks.make_block
    assert seam.check("mybench.blocks:positional", {}) is mybench.blocks.positional


def test_build_accepts_a_pair_or_a_workload_and_refuses_anything_else(user_module, monkeypatch):
    made = seam.build("mybench.blocks:make_block", {"hidden": 4}, size=3, dtype=torch.float32, device=CPU)
    assert isinstance(made.fn, torch.nn.Linear) and made.args[0].shape == (3, 4)
    import mybench.blocks

    monkeypatch.setattr(mybench.blocks, "make_block", lambda **kw: torch.ones(1), raising=True)
    with pytest.raises(seam.WorkloadError, match="returned a value of type Tensor: a workload factory returns"):
        seam.build("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU)
    monkeypatch.setattr(mybench.blocks, "make_block", lambda **kw: (len, (), {}), raising=True)
    with pytest.raises(seam.WorkloadError, match="returned a tuple of 3 items: a workload factory returns"):
        seam.build("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU)


@pytest.mark.parametrize("args, needle", [
    ([torch.ones(1), torch.ones(1)], r"a list: give the step's arguments as a tuple, \(fn, \(a, b\)\), or one list"),
    ({"input": torch.ones(1)}, r"a mapping: give keyword inputs as experiments.seam.Workload\(fn, kwargs="),
    (None, r"args=None: give \(\) for a step without arguments"),
    (iter([torch.ones(1)]), r"an iterator: the first step would use it up"),
])
def test_args_that_read_as_something_else_are_refused_with_what_to_write(user_module, monkeypatch, args, needle):
    """helper-44: a list was spread into arguments (a detection model's list of images), a dict
    given as one positional argument, None called fn(None), a generator used up by the first step."""
    import mybench.blocks

    monkeypatch.setattr(mybench.blocks, "make_block", lambda **kw: (len, args), raising=True)
    with pytest.raises(seam.WorkloadError, match=needle):
        seam.build("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU)
    bare = torch.ones(2)  # one argument given bare still works
    monkeypatch.setattr(mybench.blocks, "make_block", lambda **kw: (len, bare), raising=True)
    assert seam.build("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU).args == (bare,)



@pytest.mark.parametrize("cost,needle", [
    (lambda **kw: 1 / 0, r"cost model \(mybench.blocks:make_block.cost\) raised ZeroDivisionError: division by zero"),
    (lambda **kw: {"flops": 1}, r"make_block.cost returned \{'flops': 1\}: a cost model returns experiments.seam.Cost"),
    (lambda **kw: seam.Cost(-5, -1, -1), r"returned Cost\(flops=-5\): each count is a finite number of 0 or more"),
    (lambda **kw: seam.Cost(float("nan"), float("inf"), 1), r"returned Cost\(flops=nan\)"),
    # a Cost itself, not a function of the grid point: it was ignored, the FLOPs counted instead (helper-44)
    (seam.Cost(123, 4, 5), r"make_block.cost is a Cost, not a function: a cost model takes the grid point"),
])
def test_a_cost_model_that_fails_or_says_nonsense_is_named(user_module, monkeypatch, cost, needle):
    """A cost model's exception was the job's ("ZeroDivisionError: division by zero", no word of the
    cost model); Cost(-5, ...) gave an ok job with negative FLOPs, Cost(nan, ...) a metrics.json
    that is not JSON (a reviewer's cost models)."""
    import mybench.blocks

    monkeypatch.setattr(mybench.blocks.make_block, "cost", cost, raising=False)
    with pytest.raises(seam.WorkloadError, match=needle):
        seam.estimate("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU)


def test_a_cost_model_s_numpy_counts_are_plain_numbers(user_module, monkeypatch):
    import numpy as np

    import mybench.blocks

    monkeypatch.setattr(mybench.blocks.make_block, "cost", lambda **kw: seam.Cost(np.int64(5), np.float64(2.5), 7),
                        raising=False)
    found = seam.estimate("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU)
    assert (found.flops, found.bytes, found.memory_bytes) == (5, 2.5, 7) and type(found.flops) is int


def test_a_workload_s_own_cost_and_loss_are_checked(user_module, monkeypatch):
    import mybench.blocks

    x = torch.ones(2, 2)
    monkeypatch.setattr(mybench.blocks, "make_block", lambda **kw: seam.Workload(torch.mm, (x, x), cost=seam.Cost(-1, 0, 0)))
    with pytest.raises(seam.WorkloadError, match=r"Workload\(cost=...\) returned Cost\(flops=-1\)"):
        seam.build("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU)
    monkeypatch.setattr(mybench.blocks, "make_block", lambda **kw: seam.Workload(torch.mm, (x, x), loss="mse"))
    with pytest.raises(seam.WorkloadError, match=r"returned loss='mse': Workload\(loss=\.\.\.\) is a function"):
        seam.build("mybench.blocks:make_block", {}, size=3, dtype=torch.float32, device=CPU)


# --- counted FLOPs agree with the hand models --------------------------------------------------


@pytest.mark.parametrize(
    "name,settings,size",
    [("matmul_add", {}, 16), ("bmm", {"batch": 3}, 8), ("mlp", {"dim": 8, "hidden": 24}, 5),
     ("linear", {}, 16)],
)
def test_flop_counter_agrees_with_the_hand_cost_model(name, settings, size):
    target = f"experiments.workloads.{name}"
    grid = {"size": size, "dtype": torch.float32, "device": CPU}
    made = seam.build(target, settings, **grid)
    with torch.no_grad():
        counted, uncounted = count_flops(lambda: made.fn(*made.args))
    assert uncounted == [] and counted == seam.estimate(target, settings, **grid).flops


def test_flop_counter_on_a_hand_count():
    x, w = torch.randn(4, 6), torch.randn(6, 5)
    # 4x6 @ 6x5: 120 multiply-adds = 240 FLOPs; relu and the add of 2: 20 output elements each.
    assert count_flops(lambda: torch.relu(x @ w) + 2) == (240 + 20 + 20, [])


def test_transient_peak_is_what_one_call_allocates_above_the_live_tensors():
    x = torch.randn(256, 256)
    peak = transient_peak_bytes(lambda: torch.add(torch.mul(x, x), x))  # two (256, 256) results alive
    assert peak == 2 * 256 * 256 * 4


# --- training steps ------------------------------------------------------------------------------


def test_a_training_step_runs_three_phases_and_updates_the_parameters():
    made = seam.build("experiments.workloads.mlp", {"dim": 8, "hidden": 16}, size=4, dtype=torch.float32, device=CPU)
    step = make_step(made, train=True, optimizer="sgd", name="mlp")
    before = [p.detach().clone() for p in step.parameters]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step.call()
    names = [e.name for e in prof.events()]
    assert all(names.count(phase) == 1 for phase in ("forward", "backward", "optimizer"))
    assert len(step.parameters) == 3 and made.fn.training
    assert all(not torch.equal(a, b) for a, b in zip(before, step.parameters))
    assert all(p.grad is None for p in step.parameters)  # zero_grad(set_to_none=True)


def test_a_function_trains_its_floating_point_arguments_and_a_parameterless_one_is_refused():
    made = seam.build("experiments.workloads.matmul_add", {}, size=4, dtype=torch.float32, device=CPU)
    step = make_step(made, train=True, optimizer="adamw", name="matmul_add")
    assert len(step.parameters) == 3 and all(p.requires_grad for p in step.parameters)
    step.call()
    assert len(step.optimizer.state) == 3  # AdamW's moments, one entry per parameter
    counts = seam.Workload(lambda n: n * 2, (torch.arange(4),))
    with pytest.raises(StepError, match="train=true needs parameters: counter returned a function"):
        make_step(counts, train=True, optimizer="sgd", name="counter")
    # a module without parameters: its float inputs are not trained, and the words say so
    gelu = seam.Workload(torch.nn.GELU(), (torch.randn(4, 4),))
    with pytest.raises(StepError, match=r"gelu returned an nn.Module \(GELU\) with none \(a module's inputs are not "
                                        r"trained\); .* or profile it with train=false"):
        make_step(gelu, train=True, optimizer="sgd", name="gelu")


def test_inference_puts_modules_in_eval():
    made = seam.build("experiments.workloads.linear", {}, size=4, dtype=torch.float32, device=CPU)
    make_step(made, train=False, optimizer="adamw", name="linear")
    assert not made.fn.training


def test_default_loss_is_the_sum_or_a_models_own_loss():
    out = torch.ones(2, 3)
    assert default_loss(out).item() == 6
    assert default_loss((out, "extra")).item() == 6

    class Output(dict):
        loss = torch.tensor(1.5)

    assert default_loss(Output()).item() == 1.5
    with pytest.raises(StepError, match="Workload\\(fn, args, loss=...\\)"):
        default_loss(object())
