"""Trace -> metrics, checked against independent sources: a hand count of the recorded CUDA
traces' events, and torch's own table footer for CPU traces of workloads the project never
defines."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from analysis.trace import TraceError, analyse_trace, flat
from tests.conftest import CUDA_TRACES as CUDA_FOLDER, FIXTURES, ROOT, table_footer

CUDA_TRACES = sorted(CUDA_FOLDER.glob("*.json.gz"))
BIG = FIXTURES / "big" / "a100_training_35MB.json.gz"
LAUNCH_NAMES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaGraphLaunch"}

needs_fixtures = pytest.mark.skipif(not CUDA_TRACES, reason="../shared/fixtures not present")


def hand_count(path: Path) -> dict:
    """Counted straight off the events, sharing no code with the analysis."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = [e for e in events if e.get("ph") == "X" and e.get("name") in LAUNCH_NAMES]
    return {
        "steps": len(steps),
        "device_us": sum(e["dur"] for e in device),
        "kernels": sum(1 for e in device if e["cat"] == "kernel"),
        "memcpys": sum(1 for e in device if e["cat"] == "gpu_memcpy"),
        "memsets": sum(1 for e in device if e["cat"] == "gpu_memset"),
        "launches": len(launches),
    }


@needs_fixtures
@pytest.mark.parametrize("path", CUDA_TRACES + [BIG], ids=lambda p: p.name)
def test_cuda_fixture_counts_equal_a_hand_count(path):
    m = analyse_trace(path)
    expected = hand_count(path)
    assert m["platform"] == "cuda"
    assert m["steps"] == expected["steps"]
    assert m["window"] == ("steps" if expected["steps"] else "whole trace")
    assert m["self_device_total_us"] == pytest.approx(expected["device_us"])
    assert m["kernels_total"] == expected["kernels"]
    assert m["memcpys_total"] == expected["memcpys"]
    assert m["memsets_total"] == expected["memsets"]
    assert m["launches_total"] == expected["launches"]


@needs_fixtures
def test_triton_kernel_launched_through_the_driver_api():
    m = analyse_trace(CUDA_FOLDER / "a100_triton_compiled.json.gz")
    assert (m["kernels_total"], m["launches_total"], m["steps"]) == (1, 1, 1)
    assert m["kernels"][0]["name"].startswith("triton_")
    assert m["per_step"]["launch_lag_us"]["median"] > 0


@needs_fixtures
def test_big_trace_per_step_statistics_are_consistent():
    m = analyse_trace(BIG)
    per_step = m["per_step_values"]
    assert sum(per_step["kernels"]) == m["kernels_total"] and len(per_step["kernels"]) == 6
    assert sum(per_step["device_us"]) == pytest.approx(m["self_device_total_us"])
    assert all(0 < busy <= 1 for busy in per_step["gpu_busy"])
    assert m["occupancy_queries_total"] > 0
    top = m["kernels"][0]
    assert top["min_us"] <= top["median_us"] <= top["max_us"]
    assert sum(k["total_us"] for k in m["kernels"]) + 0 <= m["self_device_total_us"]


# --- CPU traces of workloads this project never defines, against torch's footer --------------


def _cnn(x):
    w = torch.randn(8, 3, 3, 3)
    y = torch.nn.functional.conv2d(x, w, padding=1).relu()
    return torch.softmax(torch.nn.functional.max_pool2d(y, 2).flatten(1), dim=-1)


def _profile_to_files(folder: Path, fn, *, steps: bool, **kwargs) -> tuple[Path, str]:
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=2) if steps else None, **kwargs) as prof:
        for _ in range(4 if steps else 1):
            with record_function("outer"):
                with record_function("inner"):
                    fn()
            if steps:
                prof.step()
    trace = folder / "trace.json"
    prof.export_chrome_trace(str(trace))
    return trace, prof.key_averages().table(sort_by="cpu_time_total", row_limit=5)


@pytest.mark.parametrize(
    "name,fn,steps,kwargs",
    [
        ("cnn with steps", lambda: _cnn(torch.randn(2, 3, 16, 16)), True, {}),
        ("transformer layer, no steps",
         lambda: torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()(torch.randn(2, 5, 32)),
         False, {}),
        ("with stacks and shapes", lambda: torch.linalg.svd(torch.randn(12, 12)), True,
         {"with_stack": True, "record_shapes": True}),
    ],
)
def test_cpu_self_total_equals_torch_footer(tmp_path, name, fn, steps, kwargs):
    trace, table = _profile_to_files(tmp_path, fn, steps=steps, **kwargs)
    m = analyse_trace(trace)
    assert m["platform"] == "cpu" and m["self_device_total_us"] is None
    assert m["self_cpu_total_us"] == pytest.approx(table_footer(table)["CPU"], rel=0.01)
    assert m["window"] == ("steps" if steps else "whole trace")
    if steps:
        assert m["steps"] == 2 and m["dead_window_us"] is not None and m["dead_window_us"] >= 0


def test_a_steps_body_and_the_profilers_own_part_equal_a_hand_count(tmp_path):
    """body_us: the annotation directly inside each ProfilerStep#N; outside_us: the rest of the
    step. Counted off the raw events (integer µs with 3 decimals) by hand."""
    trace, _ = _profile_to_files(tmp_path, lambda: torch.randn(32, 32) @ torch.randn(32, 32), steps=True)
    events = json.loads(trace.read_text())["traceEvents"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    outer = sorted((e for e in events if e.get("name") == "outer"), key=lambda e: e["ts"])
    assert len(steps) == len(outer) == 2
    m = analyse_trace(trace)["per_step_values"]
    assert m["body_us"] == pytest.approx([o["dur"] for o in outer], abs=1e-3)
    assert m["outside_us"] == pytest.approx([s["dur"] - o["dur"] for s, o in zip(steps, outer)], abs=1e-3)
    assert m["host_us"] == pytest.approx([s["dur"] for s in steps], abs=1e-3)


def test_a_trace_without_steps_has_no_body(tmp_path):
    trace, _ = _profile_to_files(tmp_path, lambda: torch.randn(8, 8) @ torch.randn(8, 8), steps=False)
    m = analyse_trace(trace)
    assert m["per_step_values"]["body_us"] == [None] and m["per_step"]["body_us"]["median"] is None


def test_gzip_and_plain_give_the_same_metrics(tmp_path):
    trace, _ = _profile_to_files(tmp_path, lambda: torch.randn(8, 8) @ torch.randn(8, 8), steps=True)
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(trace.read_bytes()))
    plain, packed = analyse_trace(trace), analyse_trace(gz)
    plain.pop("files"), packed.pop("files")
    assert plain == packed


def test_truncated_trace_names_the_file(tmp_path):
    trace, _ = _profile_to_files(tmp_path, lambda: torch.randn(8, 8) @ torch.randn(8, 8), steps=True)
    cut = tmp_path / "cut.json"
    cut.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    with pytest.raises(TraceError, match=r"cut\.json: not a complete JSON trace"):
        analyse_trace(cut)
    done = subprocess.run([sys.executable, "-m", "analysis", "trace", str(cut)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "cut.json" in done.stderr and "Traceback" not in done.stderr


def test_rocm_trace_counts_hip_launches(tmp_path):
    """A minimal hand-made ROCm trace: hip runtime calls and their kernels."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 30},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipExtModuleLaunchKernel", "pid": 1, "tid": 1, "ts": 50,
         "dur": 5, "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "Cijk_gemm", "pid": 0, "tid": 0, "ts": 30, "dur": 40,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "elementwise", "pid": 0, "tid": 0, "ts": 70, "dur": 10,
         "args": {"correlation": 8}},
    ]
    path = tmp_path / "rocm.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = analyse_trace(path)
    assert m["platform"] == "rocm"
    assert (m["launches_total"], m["kernels_total"], m["self_device_total_us"]) == (2, 2, 50)
    assert m["self_cpu_total_us"] == 100  # the step's own 100 µs span, split among its children
    assert m["per_step"]["gpu_busy"]["median"] == pytest.approx(0.5)
    assert m["per_step"]["launch_lag_us"]["median"] == pytest.approx(15)  # lags 10 and 20
    ops = {o["name"]: o for o in m["top_ops"]}
    assert ops["aten::mm"]["self_device_us"] == 40  # the GEMM launched inside aten::mm


def test_cli_json_prints_one_object(tmp_path):
    trace, table = _profile_to_files(tmp_path, lambda: _cnn(torch.randn(1, 3, 8, 8)), steps=True)
    done = subprocess.run([sys.executable, "-m", "analysis", "trace", str(trace), "--json"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    m = json.loads(done.stdout)
    assert m["self_cpu_total_us"] == pytest.approx(table_footer(table)["CPU"], rel=0.01)
    readable = subprocess.run([sys.executable, "-m", "analysis", "trace", str(trace)],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "Self CPU total" in readable and "per step" in readable


def test_a_jobs_folder_gives_the_traces_its_record_names(tmp_path):
    """`analysis trace JOB_FOLDER` reads what the folder's metrics.json names; a folder that is no
    job's, or whose record names no trace that is there, is refused by name, exit 1."""
    trace, table = _profile_to_files(tmp_path, lambda: _cnn(torch.randn(1, 3, 8, 8)), steps=True)
    job = tmp_path / "0_job"
    job.mkdir()
    trace.rename(job / "t.json")
    (job / "metrics.json").write_text(json.dumps({"status": "ok", "trace_file": "t.json"}))

    def trace_of(folder: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "analysis", "trace", str(folder), "--json"],
                              cwd=ROOT, capture_output=True, text=True)

    m = json.loads(trace_of(job).stdout)
    assert m["self_cpu_total_us"] == pytest.approx(table_footer(table)["CPU"], rel=0.01)
    assert m["files"] == [str(job / "t.json")]
    (job / "metrics.json").write_text(json.dumps({"status": "failed", "trace_file": "../elsewhere.json"}))
    refused = trace_of(job)
    assert refused.returncode == 1 and "names no trace that is there" in refused.stderr and "'failed'" in refused.stderr
    refused = trace_of(tmp_path)
    assert refused.returncode == 1 and "is not a job's folder" in refused.stderr and "Traceback" not in refused.stderr


def test_single_trace_path_stays_light(tmp_path):
    trace, _ = _profile_to_files(tmp_path, lambda: torch.randn(4, 4) + 1, steps=True)
    code = (
        "import sys; from analysis.__main__ import main; main(['trace', sys.argv[1], '--json']);"
        "heavy = [m for m in ('pandas', 'seaborn', 'matplotlib', 'torch') if m in sys.modules];"
        "print('HEAVY', heavy, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(trace)], cwd=ROOT, capture_output=True, text=True)
    assert "HEAVY []" in done.stderr, done.stderr


def test_nesting_survives_large_timestamps(tmp_path):
    """µs timestamps ~5e12 with 3 decimals: converted naively to ns in floating point, this
    child ends 1 ns after its parent and would not nest (the self total would double)."""
    events = [
        {"ph": "X", "cat": "python_function", "name": "outer", "pid": 1, "tid": 1,
         "ts": 5352503227889.772, "dur": 700.5},
        {"ph": "X", "cat": "python_function", "name": "inner", "pid": 1, "tid": 1,
         "ts": 5352503227890.974, "dur": 699.298},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = analyse_trace(path)
    assert m["self_cpu_total_us"] == pytest.approx(700.5)
    ops = {o["name"]: o["self_host_us"] for o in m["top_ops"]}
    assert ops["outer"] == pytest.approx(700.5 - 699.298) and ops["inner"] == pytest.approx(699.298)


# --- what counts as compute on the CPU, on a model the project never names ---------------------


class _Tagger(torch.nn.Module):
    """Embedding, convolution, layer norm and a linear head: none of them is a project workload."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.conv = torch.nn.Conv1d(16, 16, 3, padding=1)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, ids):
        x = self.conv(self.embed(ids).transpose(1, 2)).transpose(1, 2)
        return self.head(self.norm(x).relu())


def test_compute_is_the_leaf_operators_on_any_model_training_included(tmp_path):
    from analysis.trace import EPILOGUE_SHARE, INITIALISERS, is_epilogue, may_compute

    torch.manual_seed(0)
    model = _Tagger()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    ids = torch.randint(0, 50, (4, 12))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("forward"):
            loss = model(ids).square().mean()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    m = analyse_trace(trace)

    # The rule applied independently, on torch's own tree of events (cpu_children).
    def has_candidate_below(e) -> bool:  # e is a wrapper
        marks, epilogue = False, 0.0
        for c in e.cpu_children:
            inner = has_candidate_below(c)
            if not (may_compute(c.name) or inner):
                continue
            if is_epilogue(c.name, e.name):
                epilogue += c.cpu_time_total
            elif c.name not in INITIALISERS or inner:
                marks = True
        return marks or epilogue > EPILOGUE_SHARE * e.cpu_time_total

    events = prof.events()
    expected = sum(e.self_cpu_time_total for e in events if may_compute(e.name) and not has_candidate_below(e))
    assert m["compute_us"] == pytest.approx(expected, rel=0.01)
    assert m["self_cpu_total_us"] == pytest.approx(sum(e.self_cpu_time_total for e in events), rel=0.01)

    calls = {op["name"]: op["compute_calls"] for op in m["top_ops"]}
    for wrapper in ("aten::embedding", "aten::conv1d", "aten::convolution", "aten::layer_norm",
                    "aten::linear", "aten::mean", "aten::transpose", "aten::t", "aten::relu",
                    "aten::_convolution", "aten::clone"):
        assert calls.get(wrapper, 0) == 0, wrapper
    for work in ("aten::index_select", "aten::native_layer_norm", "aten::addmm", "aten::clamp_min",
                 "aten::mkldnn_convolution", "aten::sum", "aten::copy_", "aten::mm",
                 "aten::native_layer_norm_backward", "aten::convolution_backward",
                 "aten::embedding_dense_backward", "aten::threshold_backward", "aten::add_"):
        assert calls.get(work, 0) > 0, work
    assert 0 < m["compute_us"] < m["self_cpu_total_us"]


def test_training_phases_follow_autograds_thread(tmp_path):
    """A hand-made CUDA training step: the backward work runs on autograd's own thread (tid 2),
    inside the main thread's `backward` annotation; each kernel belongs to the phase whose
    launch it came from. Times in µs."""
    def host(name, ts, dur, cat="cpu_op", tid=1, corr=None):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                **({"args": {"correlation": corr}} if corr is not None else {})}

    def kernel(ts, dur, corr):
        return {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"correlation": corr}}

    events = [
        host("ProfilerStep#1", 1000, 1000, "user_annotation"),
        host("block", 1010, 980, "user_annotation"),
        host("forward", 1020, 280, "user_annotation"),
        host("aten::mm", 1040, 160), host("cudaLaunchKernel", 1050, 5, "cuda_runtime", corr=1),
        host("backward", 1300, 500, "user_annotation"),
        host("aten::mm", 1350, 150, tid=2), host("cudaLaunchKernel", 1360, 5, "cuda_runtime", tid=2, corr=2),
        host("optimizer", 1800, 180, "user_annotation"),
        host("aten::_foreach_add_", 1820, 60), host("cudaLaunchKernel", 1850, 5, "cuda_runtime", corr=3),
        kernel(1060, 100, 1), kernel(1370, 200, 2), kernel(1860, 30, 3),
    ]
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"traceEvents": events}))
    per_step = analyse_trace(path)["per_step"]
    assert [per_step[f"{p}_host_us"]["median"] for p in ("forward", "backward", "optimizer")] == [280, 500, 180]
    assert [per_step[f"{p}_device_us"]["median"] for p in ("forward", "backward", "optimizer")] == [100, 200, 30]
    # The operators' self time (their launch call is not theirs): compute, on whichever thread.
    assert [per_step[f"{p}_compute_us"]["median"] for p in ("forward", "backward", "optimizer")] == [155, 145, 55]


# --- any accelerator, malformed events, kernel fingerprints ----------------------------------------


def _mtia_trace(path: Path) -> None:
    """The shape of a real MTIA trace: host calls in `mtia_runtime`, device work in
    `mtia_ccp_events` on a process labelled as the device. Times in µs."""
    def x(name, cat, pid, tid, ts, dur, corr=None):
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if corr is not None:
            event["args"] = {"correlation": corr}
        return event

    events = [
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "MTIA 0"}},
        {"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "CPU"}},
        x("ProfilerStep#1", "user_annotation", 100, 1, 1000, 400),
        x("aten::mm", "cpu_op", 100, 1, 1010, 100), x("mtiaLaunchKernel", "mtia_runtime", 100, 1, 1020, 30, corr=1),
        x("aten::add", "cpu_op", 100, 1, 1200, 50), x("mtiaLaunchKernel", "mtia_runtime", 100, 1, 1210, 20, corr=2),
        x("mm_kernel", "mtia_ccp_events", 0, 3, 1060, 250, corr=1),
        x("add_kernel", "mtia_ccp_events", 0, 3, 1320, 40, corr=2),
        x("dma_memcpy", "mtia_ccp_events", 0, 3, 1370, 10),
        x("broken", "cpu_op", 100, 1, 1300, -5),  # malformed: a negative duration
        {"ph": "X", "cat": "cpu_op", "name": "broken", "pid": 100, "tid": 1, "ts": 1310},  # and a missing one
    ]
    path.write_text(json.dumps({"traceEvents": events}))


def test_another_accelerators_device_events_are_device_time(tmp_path):
    path = tmp_path / "mtia.json"
    _mtia_trace(path)
    m = analyse_trace(path)
    assert m["platform"] == "mtia"
    # Host self times sum to the one root's span (400 µs); the 300 µs of device events are not in it.
    assert m["self_cpu_total_us"] == pytest.approx(400)
    assert m["self_device_total_us"] == pytest.approx(250 + 40 + 10)
    assert (m["kernels_total"], m["memcpys_total"]) == (2, 1)
    assert m["per_step"]["device_us"]["median"] == pytest.approx(300)
    assert m["malformed_events"] == 2 and m["malformed"] == {"broken": 2}
    assert flat(m)["malformed_names"] == "broken (2)"


@pytest.mark.parametrize("odd", [
    {"dur": 1e308}, {"dur": "1e400"}, {"dur": "nan"},  # no clock gives these (1e308: an OverflowError before)
    {"dur": 1e9},  # 1000 s, starting inside a 0.4 ms step: ends 2.5 million steps' time after the last
    {"dur": 1e9, "ts": 999},  # the same starting 1 µs before the first step (helper-35)
])
def test_an_event_no_recording_can_hold_is_malformed_and_never_summed(tmp_path, odd):
    """A reviewer set one aten::mm's duration to 1e9 µs inside a sweep's trace: the job was ok with
    1000 s of overhead and 'ops 61% of the step'. Such an event is malformed, as a negative one is."""
    path = tmp_path / "mtia.json"
    _mtia_trace(path)
    data = json.loads(path.read_text())
    data["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::huge", "pid": 100, "tid": 1,
                                **{"ts": 1250, **odd}})
    path.write_text(json.dumps(data))
    m = analyse_trace(path)
    assert m["malformed_events"] == 3 and m["malformed"] == {"broken": 2, "aten::huge": 1}
    assert m["self_cpu_total_us"] == pytest.approx(400)  # as without it
    done = subprocess.run([sys.executable, "-m", "analysis", "trace", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "aten::huge (1)" in done.stdout and "Traceback" not in done.stderr


def test_device_work_queued_by_short_host_steps_is_kept_however_long_it_runs(tmp_path):
    """helper-35: on a GPU the host only queues the steps' kernels; 3 host steps of 30 µs queue
    three 1 ms GEMMs that run back to back long after them. None of it is malformed."""
    events = [{"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
    for i in range(3):
        start = 1000 + 40 * i
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                    "ts": start, "dur": 30},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                    "ts": start + 5, "dur": 10, "args": {"correlation": i}},
                   {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7,
                    "ts": 1010 + 1000 * i, "dur": 1000, "args": {"correlation": i}}]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = analyse_trace(path)
    assert m["malformed_events"] == 0 and m["self_device_total_us"] == pytest.approx(3000)
    assert m["kernels_total"] == 3


def test_an_event_running_on_past_its_step_within_the_recording_is_kept(tmp_path):
    """A user's annotation opened in one step and closed in a later one (prof.step() between) is
    no impossible event: it stays."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
               "ts": 1000 + 100 * i, "dur": 100} for i in range(4)]
    events += [{"ph": "X", "cat": "user_annotation", "name": "epoch", "pid": 1, "tid": 1, "ts": 1150, "dur": 300},
               {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1160, "dur": 10}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert analyse_trace(path)["malformed_events"] == 0


def test_events_on_a_stream_labelled_as_a_device_are_device_events(tmp_path):
    events = [
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 2, "args": {"name": "stream 2 "}},
        {"ph": "X", "cat": "someaccel_op", "name": "k", "pid": 7, "tid": 2, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 1, "ts": 8, "dur": 3},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = analyse_trace(path)
    assert m["self_cpu_total_us"] == pytest.approx(3) and m["self_device_total_us"] == pytest.approx(5)


@pytest.mark.parametrize(
    "name,expected",
    [
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", True),
        ("cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4", True),
        ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16", True),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", True),
        ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>", True),
        ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", True),
        ("sm90_gemm_bf16_wgmma_tma", True),
        ("volta_h884gemm_64x64_ldg8_nn", True),
        ("ampere_sgemm_32x32_sliced1x4_tn", False),
        ("void gemv2T_kernel_val<int, int, double, double, double, 128, 16, 4, 4, false> dgemm_", False),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", None),
        ("triton_poi_fused_add_cos_sin_0", None),
        ("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>", None),
    ],
)
def test_tensor_core_rule_reads_the_kernel_name(name, expected):
    from analysis.trace import tensor_cores

    assert tensor_cores(name) is expected


@needs_fixtures
def test_kernel_fingerprints_on_the_recorded_traces():
    m = analyse_trace(CUDA_FOLDER / "a100_alexnet.json.gz")
    rows = {k["name"]: k for k in m["kernels"]}
    xmma = next(k for n, k in rows.items() if n.startswith("sm80_xmma_fprop_implicit_gemm"))
    sgemm = rows["ampere_sgemm_32x32_sliced1x4_tn"]
    assert xmma["tensor_cores"] is True and sgemm["tensor_cores"] is False
    elementwise = next(k for n, k in rows.items() if "vectorized_elementwise_kernel" in n)
    assert elementwise["tensor_cores"] is None
    # Hand-read from the trace: the args of the events named ampere_sgemm_32x32_sliced1x4_tn.
    raw = [e for e in json.loads(gzip.open(CUDA_FOLDER / "a100_alexnet.json.gz").read())["traceEvents"]
           if e.get("name") == "ampere_sgemm_32x32_sliced1x4_tn"]
    occupancy = sorted(e["args"]["est. achieved occupancy %"] for e in raw)
    assert sgemm["occupancy_pct"] == pytest.approx((occupancy[2] + occupancy[3]) / 2)
    assert sgemm["registers_per_thread"] == raw[0]["args"]["registers per thread"]
    assert sgemm["shared_memory_bytes"] == raw[0]["args"]["shared memory"]
    assert sgemm["block"] == "x".join(str(v) for v in raw[0]["args"]["block"])
    triton = analyse_trace(CUDA_FOLDER / "a100_triton_compiled.json.gz")["kernels"][0]
    assert (triton["occupancy_pct"], triton["registers_per_thread"], triton["block"]) == (0, 16, "128x1x1")


def test_a_huge_file_that_is_no_trace_is_refused_from_its_first_bytes(tmp_path):
    """A 2 GB sparse file (zeros): refused at once, without reading it whole."""
    import resource

    sparse = tmp_path / "big.json"
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TraceError, match="not a Chrome trace \\(it does not start as a JSON object or list; "
                                         "2,147,483,648 bytes\\)"):
        analyse_trace(sparse)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: far below 2 GB


@pytest.mark.parametrize("gzipped", [False, True])
def test_the_trace_is_streamed_in_pieces_that_split_anywhere(tmp_path, monkeypatch, gzipped):
    """With tiny pieces, every way a piece can end (inside a string holding '},{', inside a
    nested value, at the array's end) still gives exactly what json.loads of the whole gives."""
    import analysis.trace as trace_module

    def load_trace(path):  # the events as the analysis reads them, in its batches, and the rest of the document
        batches = trace_module._EventBatches(path)
        events = [e for batch in batches for e in batch]
        return {**batches.meta, "traceEvents": events}

    events = [{"ph": "X", "cat": "cpu_op", "name": f'aten::op{i} }},{{ " [x]', "pid": 1, "tid": 1, "ts": i,
               "dur": 1, "args": {"nested": [{"a": i}, {"b": "},{"}]}} for i in range(300)]
    doc = {"schemaVersion": 1, "deviceProperties": [{"name": "x"}], "traceEvents": events, "traceName": "t]"}
    text = json.dumps(doc).encode()
    path = tmp_path / ("t.json.gz" if gzipped else "t.json")
    path.write_bytes(gzip.compress(text) if gzipped else text)
    for chunk in (7, 64, 1000, 1 << 20):
        monkeypatch.setattr(trace_module, "CHUNK_BYTES", chunk)
        assert load_trace(path) == doc, chunk


# --- the parsed events and each analyzer, on a trace small enough to count by hand ----------------


def _hand_counted_trace(path: Path) -> Path:
    """Two steps on one thread, times in µs. Nesting (torch's rule: a child ends within its
    parent), with each event's self time = dur - its direct children's:

        ProfilerStep#1 [0, 100)                     self 100 - 90 = 10
          body (annotation) [5, 95)                 self 90 - 50 = 40
            aten::linear [20, 70)                   self 50 - 4 - 30 = 16  (wraps addmm: overhead)
              aten::t [22, 26)                      self 4                 (a view: overhead)
              aten::addmm [30, 60)                  self 30 - 6 - 1 - 5 = 18  (compute)
                aten::copy_ [32, 38)                self 6                 (an initialiser: compute)
                cudaOccupancy... [38, 39)           self 1
                cudaLaunchKernel [40, 45) corr 1    self 5   -> k1 [50, 80) on the GPU
        ProfilerStep#2 [100, 200)                   self 100 - 20 - 20 - 8 = 52
          aten::relu [110, 130)                     self 20 - 15 = 5       (wraps clamp_min)
            aten::clamp_min [112, 127)              self 15 - 4 = 11       (compute)
              cudaLaunchKernel [115, 119) corr 2    self 4   -> k2 [205, 215): after its step ends
          aten::add [125, 145)                      self 20  (ends after relu: relu's sibling)
          cudaDeviceSynchronize [180, 188)          self 8
        aten::mul [250, 260)                        self 10  (in no step; compute)

    and a memcpy [150, 160) with no launch (in step 2 by its start)."""
    def host(name, ts, dur, cat="cpu_op", corr=None):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                **({"args": {"correlation": corr}} if corr is not None else {})}

    events = [
        host("ProfilerStep#1", 0, 100, "user_annotation"), host("body", 5, 90, "user_annotation"),
        host("aten::linear", 20, 50), host("aten::t", 22, 4), host("aten::addmm", 30, 30),
        host("aten::copy_", 32, 6), host("cudaOccupancyMaxActiveBlocksPerMultiprocessor", 38, 1, "cuda_runtime"),
        host("cudaLaunchKernel", 40, 5, "cuda_runtime", corr=1),
        host("ProfilerStep#2", 100, 100, "user_annotation"), host("aten::relu", 110, 20),
        host("aten::clamp_min", 112, 15), host("cudaLaunchKernel", 115, 4, "cuda_runtime", corr=2),
        host("aten::add", 125, 20), host("cudaDeviceSynchronize", 180, 8, "cuda_runtime"),
        host("aten::mul", 250, 10),
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 50, "dur": 30,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 205, "dur": 10,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 8, "ts": 150, "dur": 10},
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_parse_nests_the_events_and_places_them_in_steps(tmp_path):
    from analysis.trace import parse_trace

    trace = parse_trace(_hand_counted_trace(tmp_path / "t.json"))
    host = {h.name: h for h in trace.host if h.name != "cudaLaunchKernel"}
    parent = {name: h.parent.name if h.parent else None for name, h in host.items()}
    assert parent["aten::copy_"] == "aten::addmm" and parent["aten::addmm"] == "aten::linear"
    assert parent["aten::add"] == "ProfilerStep#2"  # it ends after aten::relu does
    assert parent["aten::mul"] is None and host["aten::copy_"].depth == 4
    self_us = {name: h.self_ns / 1000 for name, h in host.items()}
    assert self_us == {"ProfilerStep#1": 10, "body": 40, "aten::linear": 16, "aten::t": 4, "aten::addmm": 18,
                       "aten::copy_": 6, "cudaOccupancyMaxActiveBlocksPerMultiprocessor": 1, "ProfilerStep#2": 52,
                       "aten::relu": 5, "aten::clamp_min": 11, "aten::add": 20, "cudaDeviceSynchronize": 8,
                       "aten::mul": 10}
    assert {name for name, h in host.items() if h.compute} == {"aten::addmm", "aten::copy_", "aten::clamp_min",
                                                               "aten::add", "aten::mul"}
    assert [s.name for s in trace.steps] == ["ProfilerStep#1", "ProfilerStep#2"] and trace.windowed
    assert (host["aten::t"].step, host["aten::add"].step, host["aten::mul"].step) == (0, 1, None)
    device = {d.name: d for d in trace.device}
    launch = device["k2"].launch  # times are ns from the trace's base; the step starts at 0 µs
    assert device["k2"].step == 1 and launch.ts - trace.steps[0].start == 115_000  # its launch's step
    assert device["Memcpy HtoD"].step == 1 and device["Memcpy HtoD"].launch is None
    assert [d.kind for d in trace.device] == ["kernel", "memcpy", "kernel"]  # in time order


def test_each_analyzer_on_the_hand_counted_trace(tmp_path):
    from analysis.trace import (analyse_dead_window, analyse_device, analyse_kernels, analyse_launches,
                                analyse_ops, analyse_timing, parse_trace)

    trace = parse_trace(_hand_counted_trace(tmp_path / "t.json"))
    timing = analyse_timing(trace)
    assert timing.totals == pytest.approx({"self_cpu_total_us": 210, "compute_us": 24 + 31 + 10,
                                           "overhead_us": 210 - 65})  # the roots' spans: 100 + 100 + 10
    assert timing.per_step["self_cpu_us"] == pytest.approx([100, 100])
    assert timing.per_step["compute_us"] == pytest.approx([18 + 6, 11 + 20])
    # From the annotation inside the first step (5) to its first aten:: op (20).
    assert analyse_dead_window(trace).totals["dead_window_us"] == pytest.approx(15)

    device = analyse_device(trace)
    assert device.totals == pytest.approx({"self_device_total_us": 50, "kernels_total": 2, "memcpys_total": 1,
                                           "memsets_total": 0})
    assert device.per_step["device_us"] == pytest.approx([30, 20])
    assert device.per_step["gpu_busy"] == pytest.approx([30 / 100, 10 / 100])  # k2 runs after step 2

    launches = analyse_launches(trace)
    assert launches.totals == {"launches_total": 2, "occupancy_queries_total": 1}
    assert (launches.per_step["launches"], launches.per_step["occupancy_queries"]) == ([1, 1], [1, 0])
    assert launches.per_step["sync_us"] == pytest.approx([0, 8])
    assert launches.per_step["launch_lag_us"] == pytest.approx([50 - 40, 205 - 115])

    ops = {row["name"]: row for row in analyse_ops(trace).totals["top_ops"]}
    assert (ops["aten::addmm"]["self_device_us"], ops["aten::clamp_min"]["self_device_us"]) == pytest.approx((30, 10))
    assert analyse_ops(trace).per_step["aten_ops"] == [4, 3]

    kernels = analyse_kernels(trace, "cuda")
    assert [(k["name"], k["calls"], k["after_occupancy_query"]) for k in kernels.totals["kernels"]] == [
        ("k1", 1, 1), ("k2", 1, 0)]
    assert kernels.per_step["top_kernel_us"] == pytest.approx([30, 0])


def test_per_step_keys_keep_their_order(tmp_path):
    """summary.csv's columns follow PER_STEP_KEYS; a training step's phases come before the top
    kernel's time."""
    from analysis.trace import PER_STEP_KEYS

    m = analyse_trace(_hand_counted_trace(tmp_path / "t.json"))
    assert list(m["per_step"]) == list(PER_STEP_KEYS)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    events.append({"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 10, "dur": 80})
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    phases = [f"{p}_{kind}_us" for p in ("forward", "backward", "optimizer") for kind in ("host", "compute", "device")]
    assert list(analyse_trace(tmp_path / "t.json")["per_step"]) == list(PER_STEP_KEYS[:-1]) + phases + ["top_kernel_us"]


def test_an_op_is_told_from_an_annotation_by_category_or_else_by_name():
    from analysis.trace import is_op

    assert is_op({"name": "aten::mm", "category": "cpu_op"})
    assert not is_op({"name": "matmul_add", "category": "user_annotation"})
    assert not is_op({"name": "ProfilerStep#3", "category": "user_annotation"})
    # an ops.csv from before it kept the category (or a CSV's empty cell)
    assert is_op({"name": "aten::mm"}) and is_op({"name": "cudaLaunchKernel", "category": float("nan")})
    assert not is_op({"name": "matmul_add"}) and not is_op({"name": "forward", "category": None})


def test_a_file_that_is_no_trace_is_named_by_what_it_is_not_never_by_its_bytes(tmp_path):
    secret = tmp_path / "t.json"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(TraceError) as caught:
        analyse_trace(secret)
    assert "root" not in str(caught.value).replace(str(tmp_path), "") and "32 bytes" in str(caught.value)


@pytest.mark.parametrize("events", [
    [1, "x", None, [], {"ph": "X"}],  # events that are not objects
    [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1.0, "dur": 2.0, "args": "a string"}],
])
def test_events_that_are_not_trace_events_are_a_trace_error_naming_the_file(tmp_path, events):
    """`python -m analysis trace` on such a file said AttributeError with a traceback (a reviewer's
    finding); inside a sweep the job's trace_error says it."""
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(TraceError, match=r"odd\.json: malformed events"):
        analyse_trace(path)


@pytest.mark.parametrize("events", [[], [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]])
def test_a_trace_that_recorded_nothing_is_a_trace_error_not_a_step_of_zero(tmp_path, events):
    """A trace without a complete event read as an ok job with 0 µs steps, and its
    `analysis trace` as 'host duration 0.000 us' (a reviewer's finding)."""
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(TraceError, match=r"empty\.json: no complete events"):
        analyse_trace(path)
    done = subprocess.run([sys.executable, "-m", "analysis", "trace", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "no complete events" in done.stderr and "Traceback" not in done.stderr


def test_a_library_kernels_epilogue_does_not_make_it_a_wrapper(tmp_path):
    """An LSTM's aten::mkldnn_rnn_layer (5 ms of its own) adds a bias inside: it was taken for a
    dispatch wrapper and its 5 ms called overhead (helper-37); so was aten::_addmm_activation
    with its relu_. A pointwise op's own inner op (relu -> clamp_min), a foreach loop's per-tensor
    ops, and a pointwise composite's inner op that takes most of its time (clip -> clamp, selu ->
    elu, relu6 -> hardtanh: helper-39) still make them wrappers. Times in µs, by hand."""
    def op(name, ts, dur):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10_000},
        op("aten::mkldnn_rnn_layer", 10, 5000), op("aten::empty", 20, 1), op("aten::add", 4900, 50),
        op("aten::_addmm_activation", 5100, 400), op("aten::copy_", 5110, 20),
        op("aten::relu_", 5400, 30), op("aten::clamp_min_", 5405, 20),
        op("aten::relu", 5600, 100), op("aten::clamp_min", 5610, 80),
        op("aten::_foreach_mul_", 5800, 300), op("aten::mul_", 5810, 40), op("aten::mul_", 5900, 40),
        op("aten::clip", 6200, 100), op("aten::clamp", 6210, 50),
        op("aten::selu", 6400, 100), op("aten::elu", 6410, 50),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = analyse_trace(path)
    calls = {o["name"]: o["compute_calls"] for o in m["top_ops"]}
    for work in ("aten::mkldnn_rnn_layer", "aten::add", "aten::_addmm_activation", "aten::copy_",
                 "aten::clamp_min_", "aten::clamp_min", "aten::mul_"):
        assert calls.get(work, 0) > 0, work
    for wrapper in ("aten::relu_", "aten::relu", "aten::_foreach_mul_", "aten::empty", "aten::clip", "aten::selu"):
        assert calls.get(wrapper, 0) == 0, wrapper
    # self times: rnn 5000 - 1 - 50, add 50, addmm_activation 400 - 20 - 30, copy_ 20, clamp_min_ 20,
    # clamp_min 80, mul_ 2 x 40, clamp 50, elu 50
    assert m["compute_us"] == pytest.approx(4949 + 50 + 350 + 20 + 20 + 80 + 80 + 50 + 50)
