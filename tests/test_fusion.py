"""What torch.compile fused (analysis.fusion, fusion.csv): generated kernels mapped to the eager
aten ops their names say they cover, on a recorded CUDA trace and on a CPU sweep of the GeGLU MLP."""

from __future__ import annotations


import pandas as pd
import pytest

from analysis.fusion import cover, fused_words, fusion_rows
from analysis.trace import analyse_trace
from tests.conftest import CUDA_TRACES, run_cli
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


@pytest.mark.skipif(not (CUDA_TRACES / "a100_triton_compiled.json.gz").is_file(), reason="fixtures not here")
def test_the_triton_kernel_of_a_recorded_cuda_trace():
    m = analyse_trace(CUDA_TRACES / "a100_triton_compiled.json.gz")
    kernels = [{"job": "j", **k} for k in m["kernels"]]
    point = GridPoint(status="ok", trace_error=None, compile=True, platform="cuda", jobs="j", size=8, workload="custom")
    [row] = fusion_rows([point], {"j": m["top_ops"]}, kernels)
    assert row["kernel"] == "triton_poi_fused_add_cos_sin_0"
    assert row["eager_ops"] == "aten::add; aten::cos; aten::sin"  # no eager point: the ops its name spells
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
    assert row["eager_us_per_step"] > 0 and row["compiled_us_per_step"] > 0
    eager_ops = pd.read_csv(sweep_dir / "ops.csv")
    eager_ops = eager_ops[eager_ops["job"] == row["eager_job"]].set_index("name")
    # the eager side is the sum of the covered ops' own time per step, read back from ops.csv
    covered = row["eager_ops"].split("; ")
    assert row["eager_us_per_step"] == pytest.approx(eager_ops.loc[covered, "self_host_us_step_median"].sum())
    assert "compile fused" in done.stdout and "id='fusion'" in (sweep_dir / "report.html").read_text()
