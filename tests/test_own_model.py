"""Real models without wrappers: keyword inputs (a Hugging Face-style forward), a callable that
closes over a module (a lambda, a functools.partial, a bound method), the dtype and device a job
actually ran, meta tensors refused.

The factories below are what a user writes; the slow tests sweep them through the CLI as
`workload._target_=tests.test_own_model:<factory>`. Nothing is downloaded: the Hugging Face
stand-in is a two-layer nn.Module whose forward takes input_ids=, attention_mask=, labels= and
returns an object with .loss and .logits, as transformers' models do.
"""

from __future__ import annotations

import io
import warnings

import functools
import json
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from experiments import placement, seam
from experiments.steps import REACH_DEPTH, StepError, default_loss, make_step, modules_of
from tests.conftest import job_dirs, read_metrics, run_cli

CPU = torch.device("cpu")
ADAMW_SLOTS = 2  # AdamW keeps two moments per parameter
LOSS_BYTES = 4  # a training step's result: the fp32 scalar loss


# --- what a user writes ----------------------------------------------------------------------------


@dataclass
class CausalLMOutput:
    """What transformers' causal LMs return: `.loss` (when given labels) and `.logits`."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class TinyLM(nn.Module):
    """A stand-in for a Hugging Face causal LM: keyword inputs, an output object with .loss."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids=None, attention_mask=None, labels=None) -> CausalLMOutput:
        if input_ids.dtype != torch.long:  # an embedding needs integer ids: they must never be cast
            raise TypeError(f"input_ids are {input_ids.dtype}")
        h = self.embed(input_ids) * attention_mask.unsqueeze(-1).to(self.head.weight.dtype)
        logits = self.head(h)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return CausalLMOutput(loss=loss, logits=logits)


def make_masked_encoder(*, size: int, dtype: torch.dtype, device: torch.device, dim: int = 16) -> seam.Workload:
    """nn.TransformerEncoder for inference as it is usually called, with a padding mask: torch's
    fast path then runs on nested tensors, whose sizes torch's FLOP counter cannot read."""
    layer = nn.TransformerEncoderLayer(dim, 2, 2 * dim, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2).to(device=device, dtype=dtype).eval()
    mask = torch.zeros(2, size, dtype=torch.bool, device=device)
    mask[:, size // 2:] = True
    return seam.Workload(encoder, (torch.randn(2, size, dim, device=device, dtype=dtype),),
                         kwargs={"src_key_padding_mask": mask})


def make_lazy(*, size: int, dtype: torch.dtype, device: torch.device, kind: str = "generator") -> seam.Workload:
    """A step whose work never runs: it returns a generator (or a map, or a coroutine)."""
    x = torch.randn(size, size, device=device, dtype=dtype)

    def generator(x):
        yield x @ x

    async def coroutine(x):
        return x @ x

    def saved(x):  # done work that happens to be an iterator: a file object, reversed() of results
        buffer = io.BytesIO()
        torch.save(x @ x, buffer)
        return buffer

    return seam.Workload({"generator": generator, "map": lambda x: map(torch.relu, x), "coroutine": coroutine,
                          "saved": saved, "reversed": lambda x: reversed([x @ x, x + x])}[kind], (x,))


def make_wrong(*, size: int, dtype: torch.dtype, device: torch.device, kind: str = "typo") -> seam.Workload:
    """A step whose code is wrong in every process (a TypeError), one whose data may be (a
    ValueError of its own), and a module torch.compile refuses (torch.jit.script)."""
    x = torch.randn(size, size, device=device, dtype=dtype)
    if kind == "scripted":
        return seam.Workload(torch.jit.script(nn.Linear(size, size).to(device=device, dtype=dtype)), (x,))

    def typo(x):
        return torch.mm(x)

    def unlucky(x):
        raise ValueError("the data was unlucky this time")

    return seam.Workload({"typo": typo, "unlucky": unlucky}[kind], (x,))


class Graph:
    """An input object of the user's own (torch_geometric's Data is one): tensors as attributes."""

    def __init__(self, x: torch.Tensor, bias: torch.Tensor, unused: torch.Tensor) -> None:
        self.x, self.bias, self.unused = x, bias, unused


class SlottedGraph:
    __slots__ = ("x", "bias", "unused")

    def __init__(self, x: torch.Tensor, bias: torch.Tensor, unused: torch.Tensor) -> None:
        self.x, self.bias, self.unused = x, bias, unused


def make_graph(*, size: int, dtype: torch.dtype, device: torch.device, hidden: int = 16,
               slots: bool = False, kind: str = "object") -> seam.Workload:
    """A step given one Graph: it reads x and bias, never `unused` (a dataset the object holds);
    or (`kind`) the same as a dict batch, or x and bias as two arguments, x a slice of 4096 rows."""
    lin = nn.Linear(hidden, hidden).to(device=device, dtype=dtype)
    made = dict(device=device, dtype=dtype)
    if kind == "slice":
        data = torch.randn(4096, hidden, **made)
        return seam.Workload(lambda x, bias: lin(x) + bias, (data[:size], torch.randn(hidden, **made)))
    graph = (SlottedGraph if slots else Graph)(torch.randn(size, hidden, **made), torch.randn(hidden, **made),
                                               torch.randn(4096, hidden, **made))
    if kind == "dict":
        return seam.Workload(lambda g: lin(g["x"]) + g["bias"], (vars(graph),))
    return seam.Workload(lambda g: lin(g.x) + g.bias, (graph,))


def make_lm(*, size: int, dtype: torch.dtype, device: torch.device, vocab: int = 64, hidden: int = 32,
            batch: int = 2) -> seam.Workload:
    """A causal LM with keyword inputs, as a Hugging Face model is called."""
    model = TinyLM(vocab, hidden).to(device=device, dtype=dtype)
    # size + 3 distinct ids (or every one, for a short batch), some looked up twice
    ids = torch.arange(batch * size, device=device).remainder(size + 3).reshape(batch, size)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    return seam.Workload(model, kwargs=inputs)


def block(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))


def make_wrapped(*, size: int, dtype: torch.dtype, device: torch.device, hidden: int = 32):
    """The obvious lambda around a model: no nn.Module is returned."""
    model = block(hidden).to(device=device, dtype=dtype)
    return (lambda x: model(x)), (torch.randn(size, hidden, device=device, dtype=dtype),)


def make_lazy_linear(*, size: int, dtype: torch.dtype, device: torch.device, hidden: int = 32):
    """Lazy modules: their weights are made by the first call (48 inputs -> hidden -> 8)."""
    model = nn.Sequential(nn.LazyLinear(hidden), nn.ReLU(), nn.LazyLinear(8)).to(device=device, dtype=dtype)
    return model, (torch.randn(size, 48, device=device, dtype=dtype),)


def make_float64(*, size: int, dtype: torch.dtype, device: torch.device):
    """A factory that ignores `dtype`."""
    x = torch.randn(size, size, device=device, dtype=torch.float64)
    return torch.mm, (x, x)


def make_meta(*, size: int, dtype: torch.dtype, device: torch.device):
    """A model made on device 'meta' (shapes only, no data) and never materialised."""
    model = nn.Linear(size, size, device="meta", dtype=dtype)
    return model, (torch.randn(size, size, device=device, dtype=dtype),)


def param_bytes(module: nn.Module) -> int:
    """The hand count: every parameter's elements times its element size."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


# --- finding the modules a callable runs -----------------------------------------------------------


class Runner:
    """A callable object holding a model."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


GLOBAL_MODEL = nn.Linear(3, 3)


def uses_a_global(x: torch.Tensor) -> torch.Tensor:
    return GLOBAL_MODEL(x)


def test_modules_are_found_in_closures_partials_bound_methods_and_callable_objects():
    m, other = nn.Linear(4, 4), nn.Linear(4, 2)
    assert modules_of(m) == [m]
    assert modules_of(lambda x: m(x)) == [m]
    assert modules_of(lambda x, model=m: model(x)) == [m]  # a default argument
    # a bare Parameter is no module: it comes as one nn.ParameterList holding it (trained, counted)
    loose = modules_of(functools.partial(F.linear, weight=m.weight))
    assert [type(x).__name__ for x in loose] == ["ParameterList"] and list(loose[0].parameters())[0] is m.weight
    assert modules_of(functools.partial(F.linear, weight=m.weight.detach())) == []  # a plain tensor: none
    assert modules_of(functools.partial(lambda a, b, x: b(a(x)), m, other)) == [m, other]
    assert modules_of(m.forward) == [m]  # a bound method's __self__
    assert modules_of(Runner(m)) == [m]
    assert modules_of(uses_a_global) == [GLOBAL_MODEL]
    assert modules_of(lambda x: [m, m, m][0](x)) == [m]  # each module once
    assert modules_of(torch.mm) == [] and modules_of(lambda x: x * 2) == []


def test_the_search_is_bounded():
    m = nn.Linear(2, 2)
    nested = m
    for _ in range(REACH_DEPTH - 1):
        nested = functools.partial(lambda f, x: f(x), nested)
    assert modules_of(nested) == [m]  # REACH_DEPTH levels deep: found
    assert modules_of(functools.partial(lambda f, x: f(x), [[[[[[[m]]]]]]])) == []  # deeper: not looked at
    loop: list = []
    loop.append(loop)  # a container holding itself ends the search, it does not recurse forever
    assert modules_of(functools.partial(lambda x: x, loop)) == []


def test_a_lambda_around_a_module_trains_its_parameters_and_infers_in_eval():
    model = block(8)
    x = torch.randn(3, 8)
    inference = make_step(seam.Workload(lambda x: model(x), (x,)), train=False, optimizer="adamw", name="lam")
    assert not model.training and inference.parameters == []
    step = make_step(seam.Workload(lambda x: model(x), (x,)), train=True, optimizer="sgd", name="lam")
    assert model.training and x.requires_grad is False  # the model's parameters train, not the input
    assert [id(p) for p in step.parameters] == [id(p) for p in model.parameters()]
    before = [p.detach().clone() for p in model.parameters()]
    step.call()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_keyword_inputs_reach_the_model_and_its_own_loss_trains_it():
    made = make_lm(size=5, dtype=torch.float32, device=CPU)
    step = make_step(made, train=True, optimizer="adamw", name="lm")
    labels = made.kwargs["labels"]
    with torch.no_grad():
        expected = made.fn(**made.kwargs).loss  # the model's own cross-entropy, before the update
    loss = step.call()
    assert loss.item() == pytest.approx(expected.item())
    assert made.kwargs["input_ids"].dtype == torch.long and made.kwargs["labels"] is labels
    assert len(step.optimizer.state) == len(list(made.fn.parameters()))


def test_default_loss_takes_a_models_own_loss_in_every_usual_shape():
    loss, logits = torch.tensor(2.5), torch.ones(2, 3)
    assert default_loss(CausalLMOutput(loss=loss, logits=logits)) is loss
    assert default_loss({"logits": logits, "loss": loss}) is loss  # a mapping's "loss", wherever it is
    assert default_loss((loss, logits)) is loss  # a tuple whose first is the loss
    assert default_loss(CausalLMOutput(loss=None, logits=logits)).item() == 6  # no labels: the logits' sum
    with pytest.raises(StepError, match="no loss from an output of type set"):
        default_loss({"text"})
    # a Python number carries no gradient: no loss function could make one from it (helper-40)
    for number, kind in ((1.5, "a Python float"), (None, "None"), ("text", "a Python str")):
        with pytest.raises(StepError, match=f"the step returned {kind}, which carries no gradient: its forward must "
                                            "return a tensor"):
            default_loss(number)


def test_a_closure_over_a_parameterless_module_and_no_floats_is_refused():
    counts = seam.Workload(lambda n: nn.Identity()(n) * 2, (torch.arange(4),))
    with pytest.raises(StepError, match="train=true needs parameters"):
        make_step(counts, train=True, optimizer="sgd", name="counter")


def test_build_keeps_keyword_inputs_and_refuses_a_bad_mapping(monkeypatch):
    import tests.test_own_model as here

    made = seam.build("tests.test_own_model:make_lm", {}, size=4, dtype=torch.float32, device=CPU)
    assert made.args == () and sorted(made.kwargs) == ["attention_mask", "input_ids", "labels"]
    assert len(made.inputs) == 3
    monkeypatch.setattr(here, "make_lm", lambda **kw: seam.Workload(torch.mm, kwargs=[1, 2]))
    with pytest.raises(seam.WorkloadError, match="returned kwargs=\\[1, 2\\]: Workload\\(kwargs=...\\) is a mapping"):
        seam.build("tests.test_own_model:make_lm", {}, size=4, dtype=torch.float32, device=CPU)


# --- what ran, against what was asked --------------------------------------------------------------


def test_placement_names_both_sides_and_integer_inputs_have_no_say():
    made = make_lm(size=4, dtype=torch.bfloat16, device=CPU)
    held = placement.of([made.fn], made.inputs, dtype=torch.bfloat16, device="cpu", requested_device="cpu")
    assert (held.dtype, held.device, held.warnings, held.refusal) == ("bf16", "cpu", [], None)

    x = torch.randn(4, 4, dtype=torch.float64)
    held = placement.of([], [x, x], dtype=torch.bfloat16, device="cpu")
    assert held.dtype == "float64" and held.warnings == ["inputs are float64, the grid asked for bf16"]

    model = nn.Linear(4, 4)  # fp32 parameters, bf16 inputs, all on the CPU where CUDA was chosen
    held = placement.of([model], [x.bfloat16()], dtype=torch.bfloat16, device="cuda", requested_device="auto")
    assert held.dtype == "fp32+bf16" and held.device == "cpu"
    assert held.warnings == ["parameters are fp32, the grid asked for bf16",
                             "parameters are on cpu, the grid's device=auto chose cuda",
                             "inputs are on cpu, the grid's device=auto chose cuda"]


def test_meta_tensors_are_refused_naming_where_they_are():
    held = placement.of([nn.Linear(4, 4, device="meta")], [torch.ones(2, 4)], dtype=torch.float32, device="cpu",
                        target="mine:make")
    assert held.device == "meta+cpu"  # 80 bytes of parameters on meta, 32 of inputs on the CPU
    assert held.refusal.startswith("meta tensors are refused: mine:make returned 2 of 2 parameters on device 'meta'")


# --- through the CLI, as a person runs it ----------------------------------------------------------


def _sweep(tmp_path, factory: str, *overrides: str) -> list[dict]:
    sweep = tmp_path / factory
    done = run_cli("-m", "workload=custom", f"workload._target_=tests.test_own_model:{factory}", "device=cpu",
                   *overrides, f"hydra.sweep.dir={sweep}")
    records = [read_metrics(d) for d in job_dirs(sweep)] if sweep.exists() else []
    assert records, done.stdout + done.stderr
    return records


def _trained_phases(job_dir, record: dict) -> list[str]:
    trace = json.loads((job_dir / record["trace_file"]).read_text())
    return sorted(e["name"] for e in trace["traceEvents"]
                  if e.get("cat") == "user_annotation" and e.get("name") in ("forward", "backward", "optimizer"))


@pytest.mark.slow
def test_a_keyword_input_model_runs_inference_and_training_with_its_bytes_counted(tmp_path):
    size, vocab, hidden, batch = 8, 64, 32, 2
    records = _sweep(tmp_path, "make_lm", "size=8", "dtype=fp32", "train=false,true")
    assert len(records) == 2
    weights = param_bytes(TinyLM(vocab, hidden))  # fp32, as the grid asks
    inputs = 3 * batch * size * 8  # input_ids, attention_mask, labels: int64, never cast to fp32
    logits = batch * size * vocab * 4
    for m in records:
        assert m["status"] == "ok", m["error"]
        assert (m["ran_dtype"], m["ran_device"], m["warnings"]) == ("fp32", "cpu", [])
        if m["train"]:
            assert _trained_phases(tmp_path / "make_lm" / m["job"], m) == ["backward"] * 3 + ["forward"] * 3 + ["optimizer"] * 3
            # resident inputs and weights, plus a gradient and two AdamW moments per weight
            assert m["memory_estimate_bytes"] == inputs + weights * (2 + ADAMW_SLOTS)
            # inputs read, the forward's output written (logits and the loss); weights read (the optimizer
            # reads the whole embedding), gradients written and read, moments read and written
            assert m["bytes_per_call"] == inputs + logits + LOSS_BYTES + weights * (3 + 2 * ADAMW_SLOTS)
        else:
            assert m["memory_estimate_bytes"] == inputs + weights
            # the embedding's rows looked up, each once; the head's weights whole; labels given: a loss too
            rows = min(batch * size, size + 3) * hidden * 4
            head = param_bytes(TinyLM(vocab, hidden).head)
            assert m["bytes_per_call"] == inputs + rows + head + logits + LOSS_BYTES


@pytest.mark.slow
def test_a_lambda_around_a_module_runs_inference_and_training_with_the_modules_bytes(tmp_path):
    size, hidden = 16, 32
    records = _sweep(tmp_path, "make_wrapped", f"size={size}", "dtype=fp32", "train=false,true")
    assert len(records) == 2
    weights = param_bytes(block(hidden))
    rows = size * hidden * 4  # the input, and the output of the same shape
    for m in records:
        assert m["status"] == "ok", m["error"]
        assert (m["ran_dtype"], m["ran_device"], m["warnings"]) == ("fp32", "cpu", [])
        if m["train"]:
            assert _trained_phases(tmp_path / "make_wrapped" / m["job"], m) == ["backward"] * 3 + ["forward"] * 3 + ["optimizer"] * 3
            assert m["memory_estimate_bytes"] == rows + weights * (2 + ADAMW_SLOTS)
            # the input read, the forward's output and the loss written, as inference writes its output
            assert m["bytes_per_call"] == 2 * rows + LOSS_BYTES + weights * (3 + 2 * ADAMW_SLOTS)
        else:
            assert m["memory_estimate_bytes"] == rows + weights
            assert m["bytes_per_call"] == 2 * rows + weights


@pytest.mark.slow
def test_lazy_modules_weights_are_in_the_memory_estimate(tmp_path):
    """helper-53: nn.LazyLinear's weights, made by the first call, were left out of the estimate
    made before it (the input alone, inference and training)."""
    size, hidden = 16, 32
    weights = (48 * hidden + hidden + hidden * 8 + 8) * 4
    inputs = size * 48 * 4
    records = _sweep(tmp_path, "make_lazy_linear", f"size={size}", "dtype=fp32", "train=false,true")
    assert len(records) == 2
    for m in records:
        assert m["status"] == "ok", m["error"]
        assert m["memory_estimate_bytes"] == inputs + weights * ((2 + ADAMW_SLOTS) if m["train"] else 1)
        assert "timed_error" not in m and m["timed_us_per_step"] > 0  # its twin built alike


@pytest.mark.slow
def test_a_factory_that_ignores_dtype_is_warned_and_meta_tensors_fail(tmp_path):
    [m] = _sweep(tmp_path, "make_float64", "size=8", "dtype=bf16")
    assert m["status"] == "ok", m["error"]
    assert (m["dtype"], m["ran_dtype"]) == ("bf16", "float64")
    assert m["warnings"] == ["inputs are float64, the grid asked for bf16"]

    [m] = _sweep(tmp_path, "make_meta", "size=8")
    assert m["status"] == "failed"
    assert m["error"].startswith("JobError: meta tensors are refused: tests.test_own_model:make_meta returned "
                                 "2 of 2 parameters on device 'meta'")
    assert m["ran_device"] == "meta+cpu"  # bf16: 144 bytes of parameters on meta, 128 of input on the CPU


@pytest.mark.parametrize("kind", ["saved", "reversed"])
def test_a_step_whose_result_is_an_iterator_of_done_work_runs(tmp_path, kind):
    """helper-46: a BytesIO the step saved into, reversed() of its results, are iterators whose work
    is done: measured, not refused."""
    from experiments.config import JobConfig, RunConfig, WorkloadConfig
    from experiments.job import run_job

    config = JobConfig(workload=WorkloadConfig(target="tests.test_own_model:make_lazy", name="lazy",
                                               settings={"kind": kind}),
                       size=8, dtype="fp32", device="cpu", run=RunConfig(isolation="none", compile_cache="shared"))
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]


@pytest.mark.parametrize("kind, said", [("generator", "a lazy generator"), ("map", "a lazy map"),
                                         ("coroutine", "a coroutine")])
def test_a_step_that_returns_lazy_work_is_refused_not_timed(tmp_path, kind, said):
    """A generator's body runs only when consumed: the step would time nothing (0.8 µs)."""
    from experiments.config import JobConfig, RunConfig, WorkloadConfig
    from experiments.job import run_job

    config = JobConfig(workload=WorkloadConfig(target="tests.test_own_model:make_lazy", name="lazy",
                                               settings={"kind": kind}),
                       size=8, dtype="fp32", device="cpu", run=RunConfig(isolation="none", compile_cache="shared"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine is closed, never "never awaited"
        record = run_job(config, tmp_path)
    assert record["status"] == "failed"
    assert record["error"] == (f"JobError: tests.test_own_model:make_lazy's step returned {said}: its work runs only "
                               "when something consumes it, so the step timed nothing; return the results themselves "
                               "(a tensor, or list(...) of them)")
    assert record["failure_is_final"] is True  # the next repeat would return the same


@pytest.mark.parametrize("kind, compiled, final, said", [
    ("typo", False, True, "TypeError: mm() received an invalid combination of arguments"),
    ("unlucky", False, False, "ValueError: the data was unlucky this time"),
    ("scripted", True, True, "StepError: torch.compile failed on the RecursiveScriptModule that wrong returned, before "
                             "it ran: torch.compile does not support compiling torch.jit.script"),
])
def test_a_failure_in_the_code_is_final_one_of_the_data_is_not(tmp_path, kind, compiled, final, said):
    """`failure_is_final` stops the later repeats of a grid point: for an error no other process can
    change (the code's TypeError, a module torch.compile refuses), not for the workload's own."""
    from experiments.config import JobConfig, RunConfig, WorkloadConfig
    from experiments.job import run_job

    config = JobConfig(workload=WorkloadConfig(target="tests.test_own_model:make_wrong", name="wrong",
                                               settings={"kind": kind}),
                       size=8, dtype="fp32", device="cpu", compile=compiled,
                       run=RunConfig(isolation="none", compile_cache="shared"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script's own
        record = run_job(config, tmp_path)
    assert record["status"] == "failed" and record["error"].startswith(said), record["error"]
    assert record["failure_is_final"] is final


@pytest.mark.parametrize("slots, kind", [(False, "object"), (True, "object"), (False, "dict"), (False, "slice")])
def test_tensors_inside_an_input_object_count_as_bytes_where_the_step_reads_them(tmp_path, slots, kind):
    """A Graph(x, bias, unused) argument: x and bias are read once (they were left out: inputs are
    not walked into objects), `unused` (64 KiB, a dataset the object holds) is not counted; nor in
    a dict batch (helper-58: counted whole, 99% of the bytes); an x that is 8 rows of 4096 counts
    as those 8 (helper-58: its whole storage, 1000x)."""
    from experiments.config import JobConfig, RunConfig, WorkloadConfig
    from experiments.job import run_job

    config = JobConfig(workload=WorkloadConfig(target="tests.test_own_model:make_graph", name="graph",
                                               settings={"slots": slots, "kind": kind}),
                       size=8, dtype="fp32", device="cpu", run=RunConfig(isolation="none", compile_cache="shared"))
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    x, bias, weights, output = 8 * 16 * 4, 16 * 4, (16 * 16 + 16) * 4, 8 * 16 * 4
    assert record["bytes_per_call"] == x + bias + weights + output


def test_a_step_torch_cannot_count_is_measured_and_says_so(tmp_path):
    """An encoder on nested tensors: the FLOP counter (an extra call after every measurement)
    fails on it; the job stays ok with its times, and its record says what was not counted."""
    from experiments.config import JobConfig, RunConfig, WorkloadConfig
    from experiments.job import run_job

    config = JobConfig(workload=WorkloadConfig(target="tests.test_own_model:make_masked_encoder", name="encoder"),
                       size=8, dtype="fp32", device="cpu", run=RunConfig(isolation="none", compile_cache="shared"))
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["timed_us_per_step"] > 0 and record["self_cpu_total_us"] > 0
    assert record["flops_per_call"] is None and record["flops_source"] == "not counted"
    assert any(w.startswith("FLOPs not counted: one eager call under torch.utils.flop_counter raised") for w in record["warnings"])


def test_a_model_of_lazy_modules_is_placed_by_what_it_has_made():
    """nn.LazyLinear's parameters have no shape until the first call: the placement check (before
    it) failed the job with "Attempted to use an uninitialized parameter" (a reviewer's model)."""
    import torch
    from torch import nn

    from experiments import counting, placement

    model = nn.Sequential(nn.LazyLinear(8), nn.GELU(), nn.Linear(8, 4))
    found = placement.of([model], [torch.randn(2, 3)], dtype=torch.float32, device="cpu")
    assert found.dtype == "fp32" and found.device == "cpu" and not found.warnings
    assert counting.storage_bytes(model.parameters()) == (8 * 4 + 4) * 4  # the made Linear's only
