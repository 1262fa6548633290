"""The inference and training steps the job profiles."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from experiments.config import OPTIMIZERS, ConfigError, JobConfig, WorkloadConfig
from experiments.seam import Workload
from experiments.steps import StepError, default_loss, make_step, optimizer_slots


def test_inference_runs_the_model_in_eval_without_touching_its_weights():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    model.train()
    before = [p.clone() for p in model.parameters()]
    step = make_step(Workload(model, (torch.ones(2, 4),)), train=False, optimizer="sgd", name="m")
    first, second = step.call(), step.call()
    assert not model.training and torch.equal(first, second)  # eval: dropout is off
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert step.parameters == []


def test_a_training_step_runs_forward_backward_and_the_optimizer():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    before = [p.clone() for p in model.parameters()]
    step = make_step(Workload(model, (torch.randn(8, 4),)), train=True, optimizer="sgd", name="m")
    step.call()
    assert model.training and len(step.parameters) == 2
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # one SGD step moved them


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_each_optimizer_trains_and_keeps_the_state_its_cost_counts(name):
    """The state slots a training step's cost counts (config.OPTIMIZERS) against torch's own: the
    tensors of a parameter's size each optimizer keeps after one step (its step counter aside)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    before = [p.clone() for p in model.parameters()]
    step = make_step(Workload(model, (torch.randn(8, 4),)), train=True, optimizer=name, name="m")
    step.call()
    assert type(step.optimizer).__name__ == OPTIMIZERS[name].torch_class
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # one step moved them
    for p in model.parameters():
        kept = [v for v in step.optimizer.state[p].values() if isinstance(v, torch.Tensor) and v.shape == p.shape]
        assert len(kept) == optimizer_slots(name), (name, list(step.optimizer.state[p]))


def test_an_unknown_optimizer_is_refused_with_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"optimizer='lion' is not allowed: choose one of adamw, adam, .*sgd"):
        JobConfig(workload=WorkloadConfig.builtin("mlp"), size=8, train=True, optimizer="lion")


def test_training_without_parameters_is_refused_with_what_to_do():
    with pytest.raises(StepError, match="train=true needs parameters"):
        make_step(Workload(lambda x: x * 2, (torch.ones(2, dtype=torch.int64),)), train=True, optimizer="sgd",
                  name="double")
    frozen = nn.Linear(4, 1).requires_grad_(False)  # a model whose every parameter is frozen
    with pytest.raises(StepError, match=r"the Linear that frozen returned has 2, all with requires_grad=False"):
        make_step(Workload(frozen, (torch.randn(8, 4),)), train=True, optimizer="sgd", name="frozen")


@pytest.mark.parametrize("output, expected", [
    (torch.tensor(3.0), 3.0),                             # a scalar: the loss itself
    ({"loss": torch.tensor(2.0), "logits": None}, 2.0),  # a mapping's loss
    ((torch.tensor(5.0), torch.ones(3)), 5.0),            # a tuple's first, when a scalar
    (torch.ones(2, 3), 6.0),                              # anything else: summed
])
def test_the_default_loss_of_each_output_shape(output, expected):
    assert float(default_loss(output)) == expected


def test_the_default_loss_skips_integer_tensors_and_makes_a_complex_output_real():
    """helper-44: `(logits.argmax(-1), logits)` took the integer argmax as the loss (then blamed
    no_grad), and a complex output failed backward ('only for real scalar outputs')."""
    logits = torch.ones(2, 3, requires_grad=True)
    assert default_loss((logits.argmax(-1), logits)).requires_grad
    z = torch.complex(torch.ones(2, requires_grad=True), torch.full((2,), 2.0))
    loss = default_loss(z)
    assert not loss.is_complex() and float(loss) == 6.0
    loss.backward()  # a real scalar: backward runs
    model = nn.Linear(4, 4).to(torch.complex64)
    make_step(Workload(model, (torch.randn(2, 4, dtype=torch.complex64),)), train=True, optimizer="sgd",
              name="m").call()
    # an integer output alone: said as what it is (autograd's "does not require grad" was read as a
    # model under no_grad or frozen: helper-56's argmax head)
    head = nn.Linear(4, 3)
    step = make_step(Workload(lambda x: head(x).argmax(-1), (torch.randn(2, 4),)), train=True, optimizer="sgd",
                     name="argmax")
    with pytest.raises(StepError, match=r"the step's output is int64 \(indices, a mask, a count\), which carries no "
                                        "gradient: return the floating-point output"):
        step.call()


@pytest.mark.parametrize("returned, said", [(lambda out: float(out.sum()), "a Python float"),
                                            (lambda out: None, "None")])
def test_a_factorys_loss_that_returns_no_tensor_is_refused_in_words(returned, said):
    step = make_step(Workload(nn.Linear(4, 1), (torch.randn(8, 4),), loss=returned), train=True, optimizer="sgd",
                     name="m")
    with pytest.raises(StepError, match=f"Workload\\(loss=...\\) returned {said}, which carries no gradient"):
        step.call()


def test_a_loss_that_reaches_only_part_of_the_model_is_counted():
    """An output mapping without a "loss": the default loss sums its first tensor, so the head that
    makes the second gets no gradient (a reviewer's model); the count leaves every .grad alone."""
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            hidden = self.body(x)
            return {"hidden": hidden, "logits": self.head(hidden)}

    model = TwoHeads()
    step = make_step(Workload(model, (torch.randn(8, 4),)), train=True, optimizer="sgd", name="two_heads")
    assert step.unreached() == 2  # the head's weight and bias
    assert all(p.grad is None for p in model.parameters())
    whole = make_step(Workload(model, (torch.randn(8, 4),), loss=lambda out: out["logits"].sum()), train=True,
                      optimizer="sgd", name="two_heads")
    assert whole.unreached() == 0
    assert not step.loss_given and whole.loss_given


def test_parameters_behind_reentrant_checkpointing_are_reached():
    """torch.autograd.grad does not go through a reentrant checkpoint; the step's .backward() does,
    and so does the count (a reviewer's case: 'unreached 2' for a model that trains them all)."""
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.b(checkpoint(self.a, x, use_reentrant=True))

    model = Checkpointed()
    step = make_step(Workload(model, (torch.randn(4, 8, requires_grad=True),)), train=True, optimizer="sgd",
                     name="checkpointed")
    assert step.unreached() == 0 and all(p.grad is None for p in model.parameters())


def test_a_function_closing_over_parameters_trains_them_not_its_input():
    """helper-33: `lambda x: relu(x @ w1) @ w2` over two nn.Parameters trained the input x (as for
    a function without parameters), left w1 and w2 alone with their .grad growing every step, and
    counted bytes without the weights."""
    from experiments.steps import modules_of

    torch.manual_seed(0)
    w1, w2 = nn.Parameter(torch.randn(8, 32) * 0.1), nn.Parameter(torch.randn(32, 8) * 0.1)
    leaf = nn.Parameter(torch.randn(8))
    frozen = torch.randn(8)  # a plain tensor: held, not trained

    def fn(x):
        return torch.relu(x @ w1) @ w2 + leaf + frozen

    x = torch.randn(4, 8)
    held = modules_of(fn)
    assert len(held) == 1 and sorted(id(p) for p in held[0].parameters()) == sorted(map(id, (w1, w2, leaf)))
    step = make_step(Workload(fn, (x,)), train=True, optimizer="sgd", name="fn")
    assert sorted(id(p) for p in step.parameters) == sorted(map(id, (w1, w2, leaf)))
    before, x_before = [p.detach().clone() for p in (w1, w2, leaf)], x.clone()
    for _ in range(2):
        step.call()
        assert all(p.grad is None for p in (w1, w2, leaf))  # zeroed every step, not accumulated
    assert all(not torch.equal(b, p.detach()) for b, p in zip(before, (w1, w2, leaf)))
    assert torch.equal(x, x_before) and not x.requires_grad
    linear = nn.Linear(8, 8)  # a module's own parameters are the module's, not loose ones
    assert modules_of(lambda x: linear(x) @ linear.weight) == [linear]


class _Predictor:
    """A plain wrapper class, no __call__: its bound method is the step."""

    def __init__(self, model):
        self.model = model

    def predict(self, x):
        return self.model(x)


class _Slotted:
    __slots__ = ("model",)

    def __init__(self, model):
        self.model = model

    def __call__(self, x):
        return self.model(x)


def _run(model, x):
    return model(x)


@pytest.mark.parametrize("wrap", ["method of a plain object", "callable with __slots__", "model as an argument",
                                  "model as a keyword argument", "functional_call"])
def test_a_model_reached_through_arguments_or_plain_objects_is_the_one_evaluated_and_trained(wrap):
    """helper-44: a model given as an argument (`run(model, x)`), in a keyword argument, or held by
    a plain object whose method is the step was not found: inference ran it in train mode (dropout
    on, batch norm's running statistics updated) and train=true trained the input instead."""
    torch.manual_seed(0)

    def build():
        model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
        x = torch.randn(16, 8)
        return model, {
            "method of a plain object": lambda: Workload(_Predictor(model).predict, (x,)),
            "callable with __slots__": lambda: Workload(_Slotted(model), (x,)),
            "model as an argument": lambda: Workload(_run, (model, x)),
            "model as a keyword argument": lambda: Workload(_run, kwargs={"model": model, "x": x}),
            "functional_call": lambda: Workload(torch.func.functional_call,
                                                (model, dict(model.named_parameters()), (x,))),
        }[wrap](), x

    model, workload, x = build()
    model.train()
    running = model[1].running_mean.clone()
    step = make_step(workload, train=False, optimizer="sgd", name="m")
    assert not model.training and torch.equal(step.call(), step.call())  # eval: dropout off
    assert torch.equal(model[1].running_mean, running)  # eval: batch norm's statistics untouched
    model, workload, x = build()
    before, x_before = [p.detach().clone() for p in model.parameters()], x.clone()
    step = make_step(workload, train=True, optimizer="sgd", name="m")
    assert sorted(map(id, step.parameters)) == sorted(map(id, model.parameters()))
    step.call()
    # the last layer moved (a summed output gives the layers before batch norm no gradient)
    assert not torch.equal(before[-2], model[3].weight.detach())
    assert torch.equal(x, x_before) and not x.requires_grad  # the input is not what is trained


def test_autograds_words_for_the_workloads_own_mistakes_get_what_to_change():
    """A forward under no_grad, a loss that is not a scalar, an in-place op on an input that
    trains: autograd's words came raw (helper-37); the record adds what to change, from autograd's
    own messages as this torch words them."""
    from experiments.job import autograd_hint

    def raised(call) -> str:
        with pytest.raises(RuntimeError) as caught:
            call()
        return str(caught.value)

    w = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        detached = (w * 2).sum()
    cases = {
        "the loss does not depend on anything that trains": raised(lambda: detached.backward()),
        "the loss is not a scalar": raised(lambda: (w * 2).backward()),
        "an in-place op on one fails": raised(lambda: w.add_(1)),
    }
    sparse = torch.nn.Embedding(4, 2, sparse=True)
    sparse(torch.tensor([1])).sum().backward()
    cases["optimizer=sgd and optimizer=adagrad update them"] = raised(
        lambda: torch.optim.Adam(sparse.parameters()).step())
    with torch.inference_mode():  # helper-53: a factory that builds under inference_mode, then trains
        made, inputs = torch.nn.Linear(3, 3), torch.ones(2, 3)
    cases["or were made under torch.inference_mode()"] = raised(lambda: made(inputs).sum().backward())
    cases["were made under torch.inference_mode(), whose tensors never train"] = raised(
        lambda: torch.nn.functional.linear(torch.ones(2, 3, requires_grad=True), made.weight).sum().backward())
    training, inference = JobConfig(train=True), JobConfig()
    for hint, said in cases.items():
        assert hint in autograd_hint(said, training), said
        # inference: only a forward that takes gradients itself is told of no_grad (helper-44: an ML
        # potential's forces, torch.autograd.grad in its forward, failed with autograd's words alone)
        assert ("wraps that in torch.enable_grad()" in autograd_hint(said, inference)) == ("does not require grad" in said)
    x = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        energy = (x * x).sum()
    forces = raised(lambda: torch.autograd.grad(energy, x))
    assert "under torch.no_grad()" in autograd_hint(forces, inference)
    assert autograd_hint("RuntimeError: boom", training) == ""
