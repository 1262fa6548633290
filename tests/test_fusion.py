"""What torch.compile fused (analysis.fusion, fusion.csv): generated kernels mapped to the eager
aten ops their names say they cover, or that Inductor's provenance says they were made from
(experiments.provenance, provenance.json), on a recorded CUDA trace, a recorded Inductor debug
folder and a CPU sweep of the GeGLU MLP."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil

import pandas as pd
import pytest

from analysis.fusion import BY_PROVENANCE, cover, fused_words, fusion_rows, kernel_sources, name_cover, source_ops
from experiments import provenance
from experiments.config import CompilerConfig, JobConfig, RunConfig
from analysis.trace import analyse_trace
from tests.conftest import CUDA_TRACES, ROOT, run_cli
from profsweep.contract import GridPoint


@pytest.mark.parametrize("kernel, words", [
    ("graph_0_cpp_fused_gelu_mul_split_0", ["gelu", "mul", "split"]),
    ("cpp_fused__softmax_1", ["", "softmax"]),
    ("triton_poi_fused_add_cos_sin_0", ["add", "cos", "sin"]),
    ("triton_red_fused_native_layer_norm_12", ["native", "layer", "norm"]),
    ("aten::mm", None), ("Torch-Compiled Region: 0/0", None), ("void gemm_kernel<float>", None),
])
def test_the_op_words_of_a_generated_kernels_name(kernel, words):
    assert fused_words(kernel) == words


def test_words_are_matched_longest_first_against_the_ops_eager_ran():
    eager = ["aten::native_layer_norm", "aten::layer_norm", "aten::_softmax", "aten::mul", "aten::mm"]
    assert cover(["native", "layer", "norm", "view"], eager) == (["aten::native_layer_norm"], ["view"])
    assert cover(["", "softmax", "mul", "mul"], eager) == (["aten::_softmax", "aten::mul"], [])


def test_a_library_call_that_stands_for_a_matmul_and_its_add():
    """Compiled matmul_add calls aten::addmm where eager ran aten::mm then aten::add (profiled
    self host µs per step, medians over the repeats' values chosen here)."""
    def ops(mm: float | None, add: float | None, addmm: float | None) -> list[dict]:
        found = [("aten::mm", mm), ("aten::add", add), ("aten::addmm", addmm), ("aten::matmul", 1.0)]
        return [{"name": n, "self_host_us_step_median": v} for n, v in found if v is not None]

    common = {"status": "ok", "trace_error": None, "platform": "cpu", "size": 64, "workload": "matmul_add",
              "dtype": "bf16", "warmup": False, "train": False, "device": "cpu"}
    eager = GridPoint(common, compile=False, jobs="e1;e2")
    compiled = GridPoint(common, compile=True, jobs="c1;c2")
    table = {"e1": ops(80.0, 20.0, None), "e2": ops(90.0, 22.0, None), "c1": ops(None, None, 50.0),
             "c2": ops(None, None, 54.0)}
    [row] = fusion_rows([eager, compiled], table, [])
    assert (row["kernel"], row["eager_ops"], row["matched_by"]) == ("aten::addmm", "aten::mm; aten::add", "library call")
    assert row["eager_us_per_step"] == pytest.approx(85.0 + 21.0)  # the medians of mm and add, summed
    assert row["compiled_us_per_step"] == pytest.approx(52.0)
    # a compiled graph that calls the same library kernel eager did fused nothing
    table["e1"].append({"name": "aten::addmm", "self_host_us_step_median": 5.0})
    assert fusion_rows([eager, compiled], table, []) == []


# What Inductor (torch 2.13.0, CPU) wrote with provenance tracking on, compiling the GeGLU MLP at
# size 8 (dim 16, hidden 32) with the job's settings: its mapping and its generated code.
INDUCTOR_DEBUG = ROOT / "tests" / "fixtures" / "inductor_debug"


def test_the_provenance_inductor_recorded_for_the_geglu_mlp():
    """By hand from the mapping: cpp_fused_gelu_mul_0:3 computes 12 post-grad nodes (mul_6 ... mul),
    whose captured-graph nodes are `mul` (mul_6) and `gelu` (the rest); the three matmuls are
    library calls from linear, linear_1 and linear_2. The generated code records the kernel in
    the trace as graph_0_cpp_fused_gelu_mul_0."""
    found = provenance.read(INDUCTOR_DEBUG)
    assert found["graphs"] == 1
    by_name = {k["kernel"]: k for k in found["kernels"]}
    assert sorted(by_name) == ["cpp_fused_gelu_mul_0", "extern_kernels.mm"]
    fused = by_name["cpp_fused_gelu_mul_0"]
    assert fused["trace_name"] == "graph_0_cpp_fused_gelu_mul_0"
    assert fused["source_nodes"] == ["mul", "gelu"] and len(fused["post_grad_nodes"]) == 12
    assert by_name["extern_kernels.mm"]["source_nodes"] == ["linear", "linear_1", "linear_2"]
    assert by_name["extern_kernels.mm"]["trace_name"] == "extern_kernels.mm"  # not a kernel the trace names so


def test_a_job_writes_what_it_read_and_removes_inductors_folder(tmp_path):
    import torch._inductor.config as inductor_config

    tracing = provenance.start(JobConfig(compile=True))
    said = logging.getLogger(provenance.INDUCTOR_DEBUG_LOG)
    assert not said.filter(logging.LogRecord("x", logging.WARNING, "", 0, "%s debug trace: %s", ("g", tracing.folder), None))
    assert said.filter(logging.LogRecord("x", logging.WARNING, "", 0, "something else", (), None))
    assert inductor_config.trace.enabled and inductor_config.trace.provenance_tracking_level == 1
    assert inductor_config.trace.debug_dir == str(tracing.folder) and not inductor_config.trace.ir_pre_fusion
    shutil.copytree(INDUCTOR_DEBUG, tracing.folder, dirs_exist_ok=True)  # as a compile would have written it
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    out: dict = {}
    provenance.finish(tracing, job_dir, out)
    assert not tracing.folder.exists() and out["provenance_kernels"] == 2
    # off again, as before, for a next job in this process
    assert not inductor_config.trace.enabled and inductor_config.trace.provenance_tracking_level == 0
    assert inductor_config.trace.debug_dir is None and inductor_config.trace.ir_pre_fusion
    assert not logging.getLogger(provenance.INDUCTOR_DEBUG_LOG).filters  # its folder's line said again
    written = json.loads((job_dir / "provenance.json").read_text())
    assert written["kernels"] == provenance.read(INDUCTOR_DEBUG)["kernels"]
    assert kernel_sources(job_dir / "provenance.json") == {"extern_kernels.mm": ["linear", "linear_1", "linear_2"],
                                                           "graph_0_cpp_fused_gelu_mul_0": ["mul", "gelu"]}
    # nothing to trace: eager, told not to, another backend, a shared cache
    assert provenance.start(JobConfig(compile=False)) is None
    assert provenance.start(JobConfig(compile=True, compiler=CompilerConfig(provenance=False))) is None
    assert provenance.start(JobConfig(compile=True, compiler=CompilerConfig(backend="aot_eager"))) is None
    assert provenance.start(JobConfig(compile=True, run=RunConfig(compile_cache="shared"))) is None
    # the twin compiles with the job's cache key, untraced
    provenance.same_cache_key(JobConfig(compile=True))
    assert inductor_config.trace.provenance_tracking_level == 1 and not inductor_config.trace.enabled
    inductor_config.trace.provenance_tracking_level = 0


def test_a_graph_without_a_mapping_leaves_its_kernels_names_out(tmp_path):
    """A training step's backward graph is compiled without a mapping: a kernel name it shares with
    a mapped graph (as in the trace, graph_0_ for both) is left out, and the graph is named."""
    shutil.copytree(INDUCTOR_DEBUG, tmp_path, dirs_exist_ok=True)
    forward = tmp_path / "torchinductor" / "model__0_inference_0.0"
    backward = tmp_path / "torchinductor" / "model__0_backward_0.1"
    backward.mkdir()
    (backward / "output_code.py").write_text((forward / "output_code.py").read_text())
    found = provenance.read(tmp_path)
    assert found["unmapped"] == ["model__0_backward_0.1"]
    assert found["left_out"] == ["graph_0_cpp_fused_gelu_mul_0"] and found["graphs"] == 1
    assert [k["kernel"] for k in found["kernels"]] == ["extern_kernels.mm"]
    # a mapping that cannot be read counts as unmapped, and is named
    (forward / "inductor_provenance_tracking_node_mappings.json").write_text("{not json")
    found = provenance.read(tmp_path)
    assert found["graphs"] == 0 and found["kernels"] == [] and "model__0_inference_0.0" in found["unreadable"][0]


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"kernels": 7}', '{"kernels": [1, {"trace_name": 3}]}',
                                  '{"kernels": [{"trace_name": "k", "source_nodes": "gelu"}]}', "[" * 100_000])
def test_a_provenance_file_that_says_nothing_usable_gives_no_kernels(tmp_path, text):
    (tmp_path / "provenance.json").write_text(text)
    assert kernel_sources(tmp_path / "provenance.json") == {}
    assert kernel_sources(tmp_path / "absent.json") == {}
    os.mkfifo(tmp_path / "fifo.json")  # never opened: it would block
    assert kernel_sources(tmp_path / "fifo.json") == {}


def test_an_op_the_compiled_step_still_calls_was_not_fused():
    """A conv net on the CPU: Inductor leaves the convolution to the library (the compiled step
    still runs aten::convolution) and names the kernel that reads its output after it; that kernel
    covers the batch norm and the relu, not the convolution (a reviewer's case)."""
    common = {"status": "ok", "trace_error": None, "platform": "cpu", "size": 64, "workload": "make_convnet",
              "dtype": "fp32", "warmup": False, "train": False, "device": "cpu"}
    eager = GridPoint(common, compile=False, jobs="e1")
    compiled = GridPoint(common, compile=True, jobs="c1")
    kernel = "graph_0_cpp_fused__native_batch_norm_legit_no_training_convolution_relu_1"
    table = {"e1": [{"name": "aten::convolution", "self_host_us_step_median": 5.0},
                    {"name": "aten::mkldnn_convolution", "self_host_us_step_median": 520.0},
                    {"name": "aten::native_batch_norm", "self_host_us_step_median": 49.0},
                    {"name": "aten::relu", "self_host_us_step_median": 3.0}],
             "c1": [{"name": "aten::convolution", "self_host_us_step_median": 4.5},
                    {"name": "aten::mkldnn_convolution", "self_host_us_step_median": 337.0},
                    {"name": kernel, "self_host_us_step_median": 45.0}]}
    [row] = fusion_rows([eager, compiled], table, [])
    assert row["eager_ops"] == "aten::native_batch_norm; aten::relu"
    assert row["eager_us_per_step"] == pytest.approx(49.0 + 3.0)
    assert "convolution" in row["unmatched"].split()
    # an op that is no library call and that the compiled step also runs outside its graph (a
    # training step's loss sum) may still be what a kernel fused
    table["e1"].append({"name": "aten::sum", "self_host_us_step_median": 7.0})
    table["c1"] += [{"name": "aten::sum", "self_host_us_step_median": 2.0},
                    {"name": "graph_0_cpp_fused_sum_0", "self_host_us_step_median": 1.0}]
    rows = {r["kernel"]: r for r in fusion_rows([eager, compiled], table, [])}
    assert rows["graph_0_cpp_fused_sum_0"]["eager_ops"] == "aten::sum"
    assert rows[kernel]["eager_ops"] == "aten::native_batch_norm; aten::relu"


def test_a_kernel_inductor_says_it_made_from_gelu_and_mul():
    """Provenance overrides the name: a kernel whose name says only `mul` covers gelu too where
    Inductor says it was made from both; a node no eager op has stays unmatched, and a kernel
    without provenance is still matched by its name."""
    assert source_ops(["mul", "gelu", "linear_1", "getitem"], ["aten::gelu", "aten::mul", "aten::linear"]) == (
        ["aten::mul", "aten::gelu", "aten::linear"], ["getitem"])
    # without an eager run nothing is named an op: a name's words are not op names, and a node's
    # name may be a Python variable's (`h`)
    assert name_cover("graph_0_cpp_fused_add_native_layer_norm_view_1", None) == (
        [], ["add", "native", "layer", "norm", "view"])
    assert source_ops(["add_3", "add", "h", "getitem_1"], None) == ([], ["add", "h", "getitem"])
    # a Python call's node covers the op that does its work: F.softmax's aten::_softmax, `/`'s div
    assert source_ops(["softmax", "truediv"], ["aten::softmax", "aten::_softmax", "aten::div"]) == (
        ["aten::softmax", "aten::_softmax", "aten::div"], [])
    common = {"status": "ok", "trace_error": None, "platform": "cpu", "size": 64, "workload": "mlp",
              "dtype": "bf16", "warmup": False, "train": False, "device": "cpu"}
    eager = GridPoint(common, compile=False, jobs="e1")
    compiled = GridPoint(common, compile=True, jobs="c1;c2")
    table = {"e1": [{"name": "aten::gelu", "self_host_us_step_median": 30.0},
                    {"name": "aten::mul", "self_host_us_step_median": 10.0}],
             "c1": [{"name": "graph_0_cpp_fused_mul_0", "self_host_us_step_median": 12.0},
                    {"name": "graph_0_cpp_fused_add_1", "self_host_us_step_median": 1.0}],
             "c2": [{"name": "graph_0_cpp_fused_mul_0", "self_host_us_step_median": 14.0}]}
    sources = {"c1": {"graph_0_cpp_fused_mul_0": ["gelu", "mul", "view"]}}
    rows = {r["kernel"]: r for r in fusion_rows([eager, compiled], table, [], sources)}
    fused = rows["graph_0_cpp_fused_mul_0"]
    assert (fused["eager_ops"], fused["unmatched"], fused["matched_by"]) == ("aten::gelu; aten::mul", "view", BY_PROVENANCE)
    assert fused["eager_us_per_step"] == pytest.approx(40.0) and fused["compiled_us_per_step"] == pytest.approx(13.0)
    assert rows["graph_0_cpp_fused_add_1"]["matched_by"] == "kernel name"
    # without provenance the same kernel is matched by its name: only mul
    by_name = {r["kernel"]: r for r in fusion_rows([eager, compiled], table, [])}
    assert by_name["graph_0_cpp_fused_mul_0"]["eager_ops"] == "aten::mul"
    # nodes that cover no op eager ran leave the kernel to its name
    sources = {"c1": {"graph_0_cpp_fused_mul_0": ["getitem", "float"]}}
    row = {r["kernel"]: r for r in fusion_rows([eager, compiled], table, [], sources)}["graph_0_cpp_fused_mul_0"]
    assert (row["eager_ops"], row["matched_by"]) == ("aten::mul", "kernel name")
    # a node `softmax` covers the aten::_softmax eager ran; the name's ops join the nodes' where the
    # nodes miss them (a node named after a call no alias knows: `my_softmax`)
    table["e1"].append({"name": "aten::_softmax", "self_host_us_step_median": 50.0})
    table["c1"].append({"name": "graph_0_cpp_fused__softmax_mul_2", "self_host_us_step_median": 20.0})
    for nodes, unmatched in ((["softmax_1", "mul"], None), (["my_softmax", "mul_1"], "my_softmax")):
        sources = {"c1": {"graph_0_cpp_fused__softmax_mul_2": nodes}}
        row = {r["kernel"]: r for r in fusion_rows([eager, compiled], table, [], sources)}["graph_0_cpp_fused__softmax_mul_2"]
        assert (row["eager_ops"], row["unmatched"], row["matched_by"]) == ("aten::_softmax; aten::mul" if unmatched is None
                                                                           else "aten::mul; aten::_softmax",
                                                                           unmatched, BY_PROVENANCE)
        assert row["eager_us_per_step"] == pytest.approx(60.0)


@pytest.mark.skipif(not (CUDA_TRACES / "a100_triton_compiled.json.gz").is_file(), reason="fixtures not here")
def test_the_triton_kernel_of_a_recorded_cuda_trace():
    m = analyse_trace(CUDA_TRACES / "a100_triton_compiled.json.gz")
    kernels = [{"job": "j", **k} for k in m["kernels"]]
    point = GridPoint(status="ok", trace_error=None, compile=True, platform="cuda", jobs="j", size=8, workload="custom")
    [row] = fusion_rows([point], {"j": m["top_ops"]}, kernels)
    assert row["kernel"] == "triton_poi_fused_add_cos_sin_0"
    assert (row["eager_ops"], row["unmatched"]) == ("", "add cos sin")  # no eager point: no op named, its words kept
    assert row["compiled_us_per_step"] == pytest.approx(1.76)  # the kernel's one launch, by hand from the trace
    assert row["eager_us_per_step"] is None


@pytest.mark.slow
def test_the_geglu_mlp_compiled_on_the_cpu_fuses_gelu_and_mul(sweep_dir):
    done = run_cli("-m", "workload=mlp", "size=512", "compile=true,false", "run.ceilings=off",
                   f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stdout + done.stderr
    fusion = pd.read_csv(sweep_dir / "fusion.csv")
    fused = fusion[fusion["eager_ops"].fillna("").str.contains("aten::gelu")]
    assert len(fused) == 1, fusion
    row = fused.iloc[0]
    assert "aten::mul" in row["eager_ops"] and "cpp_fused" in row["kernel"] and "gelu" in row["kernel"]
    # matched by what Inductor recorded it made the kernel from, which the compiled job kept
    assert row["matched_by"] == BY_PROVENANCE, fusion
    sources = kernel_sources(sweep_dir / row["compiled_job"] / "provenance.json")
    assert {"gelu", "mul"} <= set(sources[row["kernel"]])
    assert row["eager_us_per_step"] > 0 and row["compiled_us_per_step"] > 0
    eager_ops = pd.read_csv(sweep_dir / "ops.csv")
    eager_ops = eager_ops[eager_ops["job"] == row["eager_job"]].set_index("name")
    # the eager side is the sum of the covered ops' own time per step, read back from ops.csv
    covered = row["eager_ops"].split("; ")
    assert row["eager_us_per_step"] == pytest.approx(eager_ops.loc[covered, "self_host_us_step_median"].sum())
    assert "compile fused" in done.stdout and "id='fusion'" in (sweep_dir / "report.html").read_text()
    # the times said are the ops' and the kernel's, not the step's (which compile may make slower)
    assert re.search(r"compile fused .*: those ops took [\d.]+ .?s a profiled step eager, the kernel [\d.]+ .?s "
                     "compiled", done.stdout), done.stdout


def test_an_eager_op_two_kernels_cover_is_said_shared_and_the_conclusion_prefers_one_of_its_own():
    """helper-33: a training step's aten::sum (every call, forward and backward) was given whole to
    `fused_sum_threshold_backward_1` and to `fused_sum_0`, and the conclusion read it as one kernel's."""
    from analysis.report.conclusions import _fused

    common = {"status": "ok", "trace_error": None, "platform": "cpu", "size": 64, "workload": "mlp",
              "dtype": "bf16", "warmup": False, "train": True, "device": "cpu"}
    eager = GridPoint(common, compile=False, jobs="e1")
    compiled = GridPoint(common, compile=True, jobs="c1")
    table = {"e1": [{"name": "aten::sum", "self_host_us_step_median": 42.0},
                    {"name": "aten::threshold_backward", "self_host_us_step_median": 100.0},
                    {"name": "aten::gelu", "self_host_us_step_median": 30.0},
                    {"name": "aten::mul", "self_host_us_step_median": 10.0}],
             "c1": [{"name": "graph_0_cpp_fused_sum_threshold_backward_1", "self_host_us_step_median": 13.5},
                    {"name": "graph_0_cpp_fused_sum_0", "self_host_us_step_median": 5.0},
                    {"name": "graph_0_cpp_fused_gelu_mul_2", "self_host_us_step_median": 8.0}]}
    rows = {r["kernel"]: r for r in fusion_rows([eager, compiled], table, [])}
    assert rows["graph_0_cpp_fused_sum_threshold_backward_1"]["eager_ops_shared"] == "aten::sum"
    assert rows["graph_0_cpp_fused_sum_0"]["eager_ops_shared"] == "aten::sum"
    assert rows["graph_0_cpp_fused_gelu_mul_2"]["eager_ops_shared"] is None
    [said] = _fused(list(rows.values()))
    assert "(graph_0_cpp_fused_gelu_mul_2)" in said.text and "those ops took 40 µs" in said.text, said.text
    del rows["graph_0_cpp_fused_gelu_mul_2"]  # only kernels whose ops are shared: the one it names says so
    [said] = _fused(list(rows.values()))
    assert "aten::sum also covered by another kernel: every call's time, not this kernel's alone" in said.text


def test_an_empty_cell_of_fusion_csv_is_an_empty_cell_on_the_page_not_nan():
    """A kernel whose name has no word an eager op lacks: its `unmatched` cell is empty in
    fusion.csv, which pandas reads as NaN; the page showed `nan` (helper-37)."""
    import io
    from types import SimpleNamespace

    from analysis.report.page import _fusion_section

    csv = ("point,kernel,eager_ops,eager_us_per_step,compiled_us_per_step,unmatched\n"
           "mlp 64,cpp_fused_gelu_mul_0,aten::gelu; aten::mul,12.5,3.5,\n"
           "mlp 64,cpp_fused_copy_1,,,1.0,copy\n")
    html = "\n".join(_fusion_section(SimpleNamespace(data={"fusion": pd.read_csv(io.StringIO(csv))})))
    assert "nan" not in html.lower() and "aten::gelu; aten::mul" in html and "no eager point" in html


def test_an_op_the_compiled_step_still_calls_counts_only_what_it_no_longer_takes():
    """A compiled training step's optimizer is not compiled: its aten::div still runs, 9.6 µs a
    step, and the kernel named after div was credited with all of eager's 20 µs of div (helper-37).
    Now the kernel's eager time is what those ops took eager less what they still take compiled."""
    common = {"status": "ok", "trace_error": None, "platform": "cpu", "size": 8, "workload": "make_cnn",
              "dtype": "fp16", "warmup": False, "train": True, "device": "cpu"}
    eager = GridPoint(common, compile=False, jobs="e1")
    compiled = GridPoint(common, compile=True, jobs="c1")
    ops = {"e1": [{"name": "aten::div", "self_host_us_step_median": 20.0},
                  {"name": "aten::relu", "self_host_us_step_median": 5.0}],
           "c1": [{"name": "aten::div", "self_host_us_step_median": 9.6},
                  {"name": "graph_0_cpp_fused_div_relu_0", "self_host_us_step_median": 2.0}]}
    rows = fusion_rows([eager, compiled], ops, [])
    [row] = [r for r in rows if r["kernel"] == "graph_0_cpp_fused_div_relu_0"]
    assert row["eager_ops"] == "aten::div; aten::relu"
    assert row["eager_us_per_step"] == pytest.approx(20.0 - 9.6 + 5.0)
