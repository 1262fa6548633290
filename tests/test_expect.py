"""Expectations ("guess first, then look"): parsed, refused when they cannot be checked, and
checked against hand-made job rows; a CPU sweep with one true and one false expectation."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.report.expect import ExpectationError, check, is_known, known_metrics, parse
from tests.conftest import run_cli
from profsweep.contract import GridPoint


def test_the_forms_of_the_issue_parse():
    e = parse("regime == compute-bound where size >= 1024 and workload.backend == math")
    assert (e.kind, e.subject, e.cmp, e.value) == ("metric", "regime", "==", "compute-bound")
    assert [(c.key, c.cmp, c.value) for c in e.where] == [("size", ">=", 1024), ("workload_backend", "==", "math")]
    assert parse("op aten::copy_ absent").kind == "op" and parse("kernel *gemm* present").subject == "*gemm*"
    assert parse("compile == true where train == false").value is True


@pytest.mark.parametrize("text,needle", [
    ("step_kernel_median == 5", "unknown metric 'step_kernel_median'"),
    ("host_us_per_step < 2 where sise == 1", "unknown key 'sise'"),
    ("op copy_ absent", "'copy_' is not an operator name"),
    ("size = 3", "is not an expectation"),
    ("", "is not an expectation"),
    # once read as words or infinities, then judged false, true or never (a reviewer's list)
    ("host_us_per_step === 5", "'= 5' is not one value"),
    ("host_us_per_step == 5 5", "'5 5' is not one value"),
    ("op aten::mm present where size == 16 and", "'16 and' is not one value"),
    ("op aten::mm present where size == 16 where size == 32", "is not one value"),
    ("op aten::mm present where size in ,,,", "names no value"),
    ("host_us_per_step != 'abc", "never closed"),
    ("host_us_per_step < 1e999", "'1e999' is not a finite number"),
    ("host_us_per_step < nan", "'nan' is not a finite number"),
    ("op aten::mm calls == abc", "calls is a number"),
    ("op aten::mm > many", "calls per step is a number"),
    ("regime < 5", "regime is text"),
    ("dtype > 3 where size == 64", "dtype is text"),
    ("host_us_per_step < fast", "< needs a number"),
    ("regime == banana", "'banana' is not a regime: use one of overhead-bound, compute-bound, memory-bound"),
    ("size == smallest", "only a condition can use"),
    ("host_us_per_step < none", "< needs a number"),
    ("step_kernels_median == 5 where regime in compute-bound,fast", "'fast' is not a regime"),
    ("kernel *gemm* == true", "calls per step is a number"),
])
def test_bad_expectations_name_what_is_wrong(text, needle):
    with pytest.raises(ExpectationError, match=needle):
        parse(text)


def _rows():
    jobs = [
        {"job": "a", "status": "ok", "trace_error": None, "size": 64, "regime": "overhead-bound",
         "step_kernels_median": 5, "device_us_per_step": None},
        {"job": "b", "status": "ok", "trace_error": None, "size": 4096, "regime": "compute-bound",
         "step_kernels_median": 4, "device_us_per_step": 12.0, "top_kernel_spread": 1.4731687143887233},
        {"job": "c", "status": "failed", "trace_error": None, "size": 4096},
    ]
    ops = {"a": {"aten::mm": 3, "aten::add": 3}, "b": {"aten::addmm": 3}}
    kernels = {"a": {"ampere_sgemm_32x32": 3}, "b": {"triton_poi_fused_add": 3}}
    return [GridPoint(j) for j in jobs], ops, kernels


def test_checks_are_per_job_true_false_or_without_a_value():
    jobs, ops, kernels = _rows()
    rows = check([parse("step_kernels_median == 5"), parse("regime == compute-bound where size >= 1024"),
                  parse("op aten::add absent"), parse("kernel *gemm* present"), parse("device_us_per_step < 20"),
                  parse("top_kernel_spread > 1.1 where size >= 1024")],
                 jobs, ops, kernels)
    got = {(r["expectation"], r["job"]): (r["measured"], r["holds"]) for r in rows}
    assert got == {
        ("step_kernels_median == 5", "a"): ("5", "true"),
        ("step_kernels_median == 5", "b"): ("4", "false"),
        ("regime == compute-bound where size >= 1024", "b"): ("compute-bound", "true"),  # a, c: not theirs
        ("op aten::add absent", "a"): ("3 calls", "false"),
        ("op aten::add absent", "b"): ("absent", "true"),
        ("kernel *gemm* present", "a"): ("3 calls", "true"),
        ("kernel *gemm* present", "b"): ("absent", "false"),
        ("device_us_per_step < 20", "a"): ("no value", "n/a"),  # a CPU job has no device time
        ("device_us_per_step < 20", "b"): ("12.0", "true"),
        ("top_kernel_spread > 1.1 where size >= 1024", "b"): ("1.473", "true"),  # as its interval would be
    }


@pytest.mark.parametrize("expect,needle", [
    ('expect=["step_kernel_median == 5"]', "unknown metric 'step_kernel_median'"),
    ('expect=["op aten::no_such_op absent"]', "torch has no operator 'aten::no_such_op'"),
    # helper-34: a number column against a word, which can never match, was accepted silently
    ('expect=["op aten::mm present where size == abc"]', "size is a number, which 'abc' never equals"),
    ('expect=["host_us_per_step != fast"]', "host_us_per_step is a number, which 'fast' never equals"),
])
def test_a_bad_expectation_is_refused_before_any_job(tmp_path, expect, needle):
    sweep = tmp_path / "sweep"
    done = run_cli("-m", "size=8", expect, f"hydra.sweep.dir={sweep}")
    assert done.returncode == 2 and needle in done.stderr, done.stdout + done.stderr
    assert not sweep.exists()


@pytest.mark.slow
def test_a_sweep_checks_its_expectations_and_its_report_opens_with_the_mismatch(tmp_path):
    sweep = tmp_path / "sweep"
    done = run_cli("-m", "size=16", "compile=false",
                   'expect=["op aten::mm present", "op aten::addmm present where compile == false"]',
                   f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "expectations: 1 of 2 checks hold, 1 do not" in done.stdout
    rows = pd.read_csv(sweep / "expectations.csv", dtype=str, keep_default_na=False)
    assert dict(zip(rows["expectation"], rows["holds"])) == {
        "op aten::mm present": "true", "op aten::addmm present where compile == false": "false"}
    html = (sweep / "report.html").read_text()
    first = html.index("Expectations: 1 mismatch")  # the command line above it names them too
    mismatch, held = (html.index(f"<td class=\"l\">{s}</td>", first)
                      for s in ("op aten::addmm present where compile == false", "op aten::mm present"))
    assert first < mismatch < held < html.index("Environment")
    columns = pd.read_csv(sweep / "summary.csv").columns
    known = known_metrics()
    assert [c for c in columns if not is_known(c, known)] == []  # every column can be expected


def test_counts_per_step_columns_of_ops_and_kernels_sums_and_series_extremes():
    jobs = [
        {"job": "a", "status": "ok", "steps": 3, "size": 64, "workload": "attention", "workload_backend": "flash",
         "step_kernels_median": 1, "step_memcpys_median": 1},
        {"job": "b", "status": "ok", "steps": 3, "size": 512, "workload": "attention", "workload_backend": "cudnn",
         "step_kernels_median": 1, "step_memcpys_median": 0},
        {"job": "c", "status": "ok", "steps": 3, "size": 4096, "workload": "attention", "workload_backend": "math",
         "step_kernels_median": 20, "step_memcpys_median": 0},
    ]
    ops = {"a": {"aten::transpose": {"calls": 12, "self_device_us": 0.0}}, "b": {"cuLaunchKernelEx": 3}}
    kernels = {"a": {"flash_fwd_kernel": {"calls": 3, "occupancy_pct": 13.0, "after_occupancy_query": 3}},
               "c": {"ampere_sgemm_128x64": {"calls": 30, "tensor_cores": False, "after_occupancy_query": 30},
                     "triu_tril_kernel": {"calls": 30, "tensor_cores": None, "after_occupancy_query": 0}}}
    texts = ["op aten::transpose == 4 where workload.backend in flash,efficient",
             "op cuLaunchKernelEx >= 1 where workload.backend == cudnn",
             "kernel * == 20 where size == largest",
             "kernel *gemm* tensor_cores == false",
             "kernel *flash* occupancy_pct < 25",
             "kernel * after_occupancy_query == calls",
             "op aten::transpose self_device_us == 0",
             "step_kernels_median + step_memcpys_median == 2 where size == smallest"]
    got = {(r["expectation"], r["job"]): (r["measured"], r["holds"]) for r in check([parse(t) for t in texts], [GridPoint(j) for j in jobs], ops, kernels)}
    assert got == {
        (texts[0], "a"): ("4 per step", "true"),
        (texts[1], "b"): ("1 per step", "true"),
        (texts[2], "c"): ("20 per step", "true"),  # the largest size of the one series
        (texts[3], "a"): ("none", "false"), (texts[3], "b"): ("none", "false"),
        (texts[3], "c"): ("false in 1 kernel", "true"),
        (texts[4], "a"): ("13.0 in 1 kernel", "true"), (texts[4], "b"): ("none", "false"),
        (texts[4], "c"): ("none", "false"),
        (texts[5], "a"): ("3/3 in 1 kernel", "true"), (texts[5], "b"): ("none", "false"),
        (texts[5], "c"): ("30/30, 0/30 in 2 kernels", "false"),
        (texts[6], "a"): ("0.0 in 1 op", "true"), (texts[6], "b"): ("none", "false"), (texts[6], "c"): ("none", "false"),
        (texts[7], "a"): ("2.0", "true"),
    }


def test_claims_parse_from_one_string_and_bad_ones_are_refused():
    from analysis.report.expect import is_claim, parse_all, parse_claim

    text = ("claim part3: cuDNN launches with cuLaunchKernelEx | article: not cudaLaunchKernel "
            "| where: workload.backend == cudnn | check: op cuLaunchKernelEx >= 1 | check if run: op aten::mm absent "
            "| cuda only | needs: the cudnn job")
    c = parse_claim(text)
    assert (c.part, c.claim, c.article, c.cuda_only, c.needs, c.required) == (
        "part3", "cuDNN launches with cuLaunchKernelEx", "not cudaLaunchKernel", True, "the cudnn job", (True, False))
    assert [e.text for e in c.checks] == ["op cuLaunchKernelEx >= 1 where workload.backend == cudnn",
                                          "op aten::mm absent where workload.backend == cudnn"]
    assert is_claim(text) and not is_claim("op aten::mm present")
    assert [e.text for e in parse_all([text, "op aten::mm present"])] == ["op aten::mm present"]
    for bad, needle in ((text.replace("| cuda only", "| cuda"), "'cuda' is not a field of a claim"),
                        ("claim part3: no checks | article: x", "has no 'check: EXPECTATION'"),
                        (text.replace("op cuLaunchKernelEx", "op LaunchKernelEx"), "'LaunchKernelEx' is not an operator name"),
                        (text.replace(">= 1 |", "regs == 1 |"), "'regs' is not a column of ops.csv")):
        with pytest.raises(ExpectationError, match=needle):
            parse_all([bad])


def test_a_regime_at_the_roofline_ridge_decides_work_against_overhead_but_not_which_ceiling():
    # work 50x the overhead, decided; intensity 128 FLOP/byte at a ridge of 130 [117, 145]
    point = GridPoint({"job": "a", "status": "ok", "size": 512, "regime": "memory-bound", "regime_uncertain": False,
                       "regime_at_ridge": True, "flops_per_call": 128e6, "bytes_per_call": 1e6,
                       "ridge_flops_per_byte": 130.0, "ridge_flops_per_byte_low": 117.0,
                       "ridge_flops_per_byte_high": 145.0})
    rows = check([parse("regime == compute-bound"), parse("regime == memory-bound"), parse("regime != overhead-bound")],
                 [point], {}, {})
    got = {r["expectation"]: (r["measured"], r["holds"]) for r in rows}
    said = ("memory-bound (uncertain: arithmetic intensity 128 FLOP/byte is at the roofline's ridge, 130 [117, 145]: "
            "compute- and memory-bound alike; a size further from it decides)")
    assert got == {"regime == compute-bound": (said, "inconclusive"), "regime == memory-bound": (said, "inconclusive"),
                   "regime != overhead-bound": ("memory-bound", "true")}
    # work / host undecided: every regime check is, and the doubt named is that one
    doubt = GridPoint({**point, "regime_uncertain": True})
    rows = check([parse("regime != overhead-bound")], [doubt], {}, {})
    assert rows[0]["holds"] == "inconclusive" and "the interval of work / host holds 1" in rows[0]["measured"]


def test_a_quoted_number_and_a_settings_word_are_no_number_compared_with_a_word():
    """helper-35: `size == '64'` (a quoted number, matched as a number) and a workload setting whose
    name ends in `_s` were refused by the rule against a number column compared with a word."""
    from profsweep.expectations import ExpectationError, parse_all

    parse_all(["regime == overhead-bound where size == '64'", "op aten::mm present where size in '64','1024'",
               "op aten::mm present where workload.impl_s == fast"])
    with pytest.raises(ExpectationError, match="size is a number, which 'abc' never equals"):
        parse_all(["op aten::mm present where size == abc"])


def test_fail_on_mismatch_exits_1_naming_each_expectation_that_does_not_hold(tmp_path, capsys):
    """The analysis as a gate: an expectation that does not hold fails `--fail-on-mismatch` (exit
    1, named with what was measured); without the flag, or with every one holding, exit 0."""
    import json

    from analysis.__main__ import main
    from profsweep.expectations import EXPECT_FILE
    from tests.conftest import hand_made_job, jitter

    folder = tmp_path / "sweep"
    hand_made_job(folder, 0, jitter(100, 6), size=8)
    hand_made_job(folder, 1, jitter(100, 6), size=16)
    (folder / EXPECT_FILE).write_text(json.dumps({"expect": ["op aten::mm present", "op aten::addmm present"]}))
    assert main([str(folder)]) == 0
    assert main(["analyse", str(folder)]) == 0  # the profsweep command's spelling, taken here too
    capsys.readouterr()
    assert main([str(folder), "--fail-on-mismatch"]) == 1
    said = capsys.readouterr().out
    assert "mismatch: op aten::addmm present at 0_matmul_add_8_bf16_cold_eager" in said
    assert "mismatch: op aten::addmm present at 1_matmul_add_16_bf16_cold_eager" in said
    assert "mismatch: op aten::mm present" not in said
    (folder / EXPECT_FILE).write_text(json.dumps({"expect": ["op aten::mm present"]}))
    assert main([str(folder), "--fail-on-mismatch"]) == 0
    (folder / EXPECT_FILE).unlink()
    assert main([str(folder), "--fail-on-mismatch"]) == 0
    assert "expectations: none in this sweep" in capsys.readouterr().out
