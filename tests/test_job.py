"""One job in this process: its files, and metrics that equal torch's own table footer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from experiments.config import JobConfig, ProfilerConfig, RunConfig, WorkloadConfig
from experiments.job import run_job
from tests.conftest import table_footer

IN_PROCESS = RunConfig(isolation="none", compile_cache="shared")


def test_cpu_job_writes_article_artifacts(tmp_path):
    config = JobConfig(size=16, dtype="fp32", device="cpu", run=IN_PROCESS)
    record = run_job(config, tmp_path)

    assert record["status"] == "ok", record["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "16_fp32_cold_eager.json", "16_fp32_cold_eager.txt", "metrics.json",
    ]
    assert json.loads((tmp_path / "metrics.json").read_text()) == record
    table = (tmp_path / "16_fp32_cold_eager.txt").read_text()
    footer = table_footer(table)
    assert "CUDA" not in footer and record["self_device_total_us"] is None
    assert record["self_cpu_total_us"] == pytest.approx(footer["CPU"], rel=0.01)
    assert record["steps"] == 3 and record["device"] == "cpu"
    assert record["trace_file"] == "16_fp32_cold_eager.json"
    assert record["first_call_ms"] > 0


def test_trace_holds_the_active_steps_and_the_annotation(tmp_path):
    config = JobConfig(size=8, device="cpu", warmup=True, run=IN_PROCESS)
    record = run_job(config, tmp_path)
    trace = json.loads((tmp_path / record["trace_file"]).read_text())
    names = [e.get("name", "") for e in trace["traceEvents"]]
    # schedule(wait=1, warmup=1, active=3): steps 2, 3 and 4 are recorded.
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
        "ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4",
    ]
    assert names.count("matmul_add") == 3
    assert record["warmup_ms"] > 0 and record["trace_file"] == "8_bf16_warm_eager.json"


def test_repeat_writes_one_trace_per_cycle_and_sums_their_footers(tmp_path):
    config = JobConfig(size=8, device="cpu", run=IN_PROCESS, profiler=ProfilerConfig(active=2, repeat=2))
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    tables = record["table_file"].split(";")
    assert tables == ["8_bf16_cold_eager_cycle1.txt", "8_bf16_cold_eager_cycle2.txt"]
    total = sum(table_footer((tmp_path / t).read_text())["CPU"] for t in tables)
    assert record["self_cpu_total_us"] == pytest.approx(total, rel=0.01)
    assert record["steps"] == 4


def test_mlp_table_sees_three_gemms_per_step(tmp_path):
    config = JobConfig(workload=WorkloadConfig.builtin("mlp", dim=16, hidden=32), size=8, device="cpu", run=IN_PROCESS)
    record = run_job(config, tmp_path)
    table = (tmp_path / record["table_file"]).read_text()
    mm = next(line for line in table.splitlines() if line.strip().startswith("aten::mm "))
    assert mm.split()[-1] == "9"  # 3 GEMMs x 3 active steps


def test_memory_guard_fails_before_allocating(tmp_path):
    config = JobConfig(size=200_000, dtype="fp32", device="cpu", run=IN_PROCESS)
    record = run_job(config, tmp_path)
    assert record["status"] == "failed"
    assert "memory" in record["error"] and "GiB" in record["error"]
    assert record["memory_estimate_bytes"] > record["memory_available_bytes"]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
    # more than the machine has in all: no other process of the grid point can run it, its repeats are not
    # started (3 processes of 37 s for size=10000000: helper-41)
    from experiments.job import total_memory_bytes

    hopeless = record["memory_estimate_bytes"] > total_memory_bytes("cpu")
    assert bool(record.get("failure_is_final")) == hopeless and ("a smaller size fits" in record["error"]) == hopeless


def test_a_raising_workload_is_recorded_not_raised(tmp_path):
    config = JobConfig(size=8, device="cpu", compile=True, run=IN_PROCESS)
    config.compiler.backend = "no_such_backend"
    record = run_job(config, tmp_path)
    assert record["status"] == "failed" and "no_such_backend" in record["error"]


PRETRAINED = """
import torch


def make(*, size, dtype, device):
    model = torch.nn.Linear(4, 1)
    loss = model(torch.randn(8, 4)).pow(2).mean()  # a fit before returning it
    loss.backward()
    return model, (torch.randn(size, 4),)
"""


def _custom_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, module: str) -> dict:
    """One CPU job of `source`'s factory `make`, saved as `module`, in this process."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    config = JobConfig(size=8, dtype="fp32", device="cpu", run=IN_PROCESS,
                       workload=WorkloadConfig(name="custom", target=f"{module}:make"))
    return run_job(config, tmp_path)


def test_a_factory_that_takes_gradients_is_told_it_runs_under_no_grad(tmp_path, monkeypatch):
    """helper-44: a factory that fits its model before returning it failed with autograd's
    'element 0 of tensors does not require grad', no word of profsweep's torch.no_grad()."""
    record = _custom_job(tmp_path, monkeypatch, PRETRAINED, "pretrained_bench")
    assert record["status"] == "failed", record
    assert "does not require grad" in record["error"] and "under torch.no_grad()" in record["error"]
    assert "with torch.enable_grad():" in record["error"]


HEADLESS = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 4096)  # never called by the step

    def features(self, x):
        return self.body(x)


def make(*, size, dtype, device):
    return Net().features, (torch.randn(size, 16),)
"""


def test_weights_no_op_was_seen_reading_are_said_to_be_counted_whole(tmp_path, monkeypatch):
    """helper-44: a backbone's step that never calls its 4096-way head counted the head whole in
    bytes_per_call (bandwidth 12.6x the machine's measured ceiling), with no word of it."""
    record = _custom_job(tmp_path, monkeypatch, HEADLESS, "headless_bench")
    assert record["status"] == "ok", record
    head = (16 * 4096 + 4096) * 4
    said = [w for w in record["warnings"] if "no op was seen reading" in w]
    assert len(said) == 1 and f"{head:,} bytes of weights whole" in said[0], record["warnings"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_job_device_total_equals_table_footer(tmp_path):
    config = JobConfig(size=256, device="cuda", run=IN_PROCESS)
    record = run_job(config, tmp_path)
    footer = table_footer((tmp_path / record["table_file"]).read_text())
    assert record["self_device_total_us"] == pytest.approx(footer["CUDA"], rel=0.01)
    assert record["self_cpu_total_us"] == pytest.approx(footer["CPU"], rel=0.01)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_training_step_has_its_phases_and_allocator_peak(tmp_path):
    config = JobConfig(workload=WorkloadConfig.builtin("mlp", dim=256, hidden=1024), size=512, device="cuda",
                       train=True, run=IN_PROCESS)
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    footer = table_footer((tmp_path / record["table_file"]).read_text())
    assert record["self_device_total_us"] == pytest.approx(footer["CUDA"], rel=0.01)
    weights = 3 * 256 * 1024 * 2  # bf16: the weights alone, then gradients and AdamW's moments
    assert record["peak_memory_bytes"] > 4 * weights
    assert record["peak_memory_reserved_bytes"] >= record["peak_memory_bytes"]
    names = [e.get("name") for e in json.loads((tmp_path / record["trace_file"]).read_text())["traceEvents"]
             if e.get("cat") == "user_annotation"]  # the GPU track mirrors them as gpu_user_annotation
    assert all(names.count(phase) == 3 for phase in ("forward", "backward", "optimizer"))


@pytest.mark.slow
def test_compiled_cpu_mlp_names_its_fused_kernel(tmp_path):
    config = JobConfig(workload=WorkloadConfig.builtin("mlp", dim=16, hidden=32), size=8, device="cpu", compile=True,
                       run=IN_PROCESS)
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    table = (tmp_path / record["table_file"]).read_text()
    fused = [line for line in table.splitlines() if "cpp_fused" in line]
    assert len(fused) == 1 and "gelu" in fused[0] and "mul" in fused[0]
    assert fused[0].split()[-1] == "3"  # one fused kernel per step


@pytest.mark.parametrize("warmup", [False, True], ids=["cold", "warm"])
def test_nothing_of_the_job_runs_inside_a_recorded_step(tmp_path, monkeypatch, warmup):
    """The synchronisation and the counter read that prepare the first recorded step happen
    before the profiler opens it: marked with record_function, they appear in no trace (a call
    made inside a recorded step would be in it)."""
    from torch.profiler import record_function

    from experiments import job, profiling

    read = profiling.machine.read

    def marked_read():
        with record_function("profsweep-counter-read"):
            return read()

    def marked_sync(device):
        def sync():
            with record_function("profsweep-sync"):
                pass
        return sync

    monkeypatch.setattr(profiling.machine, "read", marked_read)
    monkeypatch.setattr(job, "_synchroniser", marked_sync)
    config = JobConfig(size=8, device="cpu", warmup=warmup, run=IN_PROCESS, profiler=ProfilerConfig(active=2, repeat=2))
    record = run_job(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    names = [e.get("name") for t in record["trace_file"].split(";")
             for e in json.loads((tmp_path / t).read_text())["traceEvents"]]
    assert names.count("matmul_add") == 4  # 2 recorded steps in each of 2 cycles
    assert "profsweep-sync" not in names and "profsweep-counter-read" not in names
    assert record["other_cpus"] is not None or record["cpu_pressure"] is not None  # the read did happen


def test_unprofiled_steps_are_timed_before_any_trace_is_written(tmp_path, monkeypatch):
    """The trace export changes the process (glibc's allocator): the un-profiled steps are timed
    before it, with their page faults counted."""
    from experiments import job

    seen = []
    timed = job._timed

    def watching(call, sync):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        return timed(call, sync)

    monkeypatch.setattr(job, "_timed", watching)
    record = run_job(JobConfig(size=8, device="cpu", run=IN_PROCESS), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert seen == [[]]  # no trace, no table yet
    assert (tmp_path / record["trace_file"]).exists()
    assert record["timed_minor_faults_per_step"] >= 0 and record["timed_steps"] >= 20


def test_a_speed_probe_that_cannot_run_leaves_the_job_ok_without_one(tmp_path, monkeypatch):
    from experiments import job

    def broken(kind: str = "speed") -> float:
        raise RuntimeError("no BLAS today")

    monkeypatch.setattr(job, "_probe", broken)
    record = run_job(JobConfig(size=8, device="cpu", run=IN_PROCESS), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["timed_steps"] >= 20 and record["speed_probe_us"] is None
    assert record["speed_probe_before_us"] is None and record["speed_probe_after_us"] is None
    assert record["overhead_probe_us"] is None and record["cache_probe_us"] is None


def test_a_gzipped_trace_is_written_through_a_scratch_folder_of_the_jobs(tmp_path, monkeypatch):
    """torch writes a .json.gz trace through a temporary file in tempfile's folder (/tmp): a job
    stopped mid-export left 4-7 MB traces there (a reviewer's kills). It now goes to a folder of
    the job's, removed once the trace is written."""
    import tempfile

    from experiments.config import JobConfig, ProfilerConfig, RunConfig
    from experiments.job import run_job
    from experiments.profiling import EXPORT_SCRATCH

    seen = []
    made = tempfile.NamedTemporaryFile

    def noted(*args, **kwargs):
        seen.append(tempfile.gettempdir())
        return made(*args, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", noted)
    config = JobConfig(size=8, device="cpu", profiler=ProfilerConfig(gzip=True),
                       run=RunConfig(isolation="none", compile_cache="shared"))
    record = run_job(config, tmp_path)
    assert record["status"] == "ok" and record["trace_file"].endswith(".json.gz"), record["error"]
    assert seen and all(Path(d) == tmp_path / EXPORT_SCRATCH for d in seen), seen
    assert not (tmp_path / EXPORT_SCRATCH).exists() and tempfile.gettempdir() != str(tmp_path / EXPORT_SCRATCH)


def test_side_by_side_runs_eager_and_compiled_in_turn_each_way_round_and_an_eager_failure_leaves_the_job_as_it_was():
    """job._side_by_side: one untimed eager call, then pairs of blocks of the steps that take about
    SIDE_BLOCK_S, eager's first in every other pair (a block right after the other one is no
    favourite); only compiled jobs; an eager step that raises gives side_by_side_error, not a
    failed job."""
    from types import SimpleNamespace

    from experiments.job import SIDE_BLOCK_S, SIDE_MIN_PAIRS, _side_by_side

    order: list[str] = []

    def prepared(compile: bool, eager_raises: bool = False) -> SimpleNamespace:
        def eager() -> None:
            order.append("e")
            if eager_raises and len(order) > 3:
                raise RuntimeError("eager only fails here\nsecond line")

        step = SimpleNamespace(call=lambda: order.append("c"), eager=eager)
        return SimpleNamespace(config=SimpleNamespace(compile=compile), step=step, sync=lambda: None, device="cpu")

    found = _side_by_side(prepared(compile=True), step_us=SIDE_BLOCK_S * 1e6 / 3)  # blocks of 3 steps
    assert "".join(order[:19]) == "e" + "eee" + "ccc" + "ccc" + "eee" + "eee" + "ccc"
    steps = found["side_by_side_steps"]
    # ... and one compiled call last, untimed: the process's last step is the compiled one, as before
    assert steps >= 3 * SIDE_MIN_PAIRS and steps % 3 == 0 and order.count("e") == steps + 1
    assert order.count("c") == steps + 1 and order[-1] == "c"
    assert found["side_by_side_eager_us"] > 0 and found["side_by_side_compiled_us"] > 0
    order.clear()
    assert _side_by_side(prepared(compile=False)) == {} and order == []
    assert _side_by_side(prepared(compile=True, eager_raises=True)) == {
        "side_by_side_error": "the eager step raised: RuntimeError: eager only fails here"}


def test_side_by_side_of_steps_of_seconds_stops_after_one_pair(monkeypatch):
    """A step that takes seconds: SIDE_FLOOR pairs would take longer than SIDE_LONG_S, so one pair
    (an eager and a compiled step) once SIDE_MAX_S has passed; shorter steps run SIDE_FLOOR pairs,
    and an eager step far slower than the compiled one sizes the blocks."""
    from types import SimpleNamespace

    from experiments import job as job_module
    from experiments.job import SIDE_FLOOR, _side_by_side

    # (seconds each: compiled, eager) -> steps a side. Eager 10,000x the compiled step (a loop that
    # compile removed): blocks by the eager step, not a block of 100 eager steps of 0.2 s each.
    for (compiled_s, eager_s), steps in (((3.0, 3.0), 1), ((0.2, 0.2), SIDE_FLOOR), ((2e-5, 0.2), SIDE_FLOOR)):
        now = [0.0]

        def step(seconds: float) -> None:
            now[0] += seconds  # each step moves the clock by its duration

        monkeypatch.setattr(job_module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
        calls = SimpleNamespace(call=lambda s=compiled_s: step(s), eager=lambda s=eager_s: step(s))
        prepared = SimpleNamespace(config=SimpleNamespace(compile=True), step=calls, sync=lambda: None, device="cpu")
        found = _side_by_side(prepared, step_us=compiled_s * 1e6)
        assert found["side_by_side_steps"] == steps
        assert found["side_by_side_eager_us"] == pytest.approx(eager_s * 1e6)
        assert found["side_by_side_compiled_us"] == pytest.approx(compiled_s * 1e6)
        assert found["side_by_side_ratio"] == pytest.approx(compiled_s / eager_s, rel=1e-4)


def test_side_by_side_sizes_its_blocks_by_a_second_eager_call_when_the_first_was_only_first(monkeypatch):
    """An eager step whose first call is slow (a library's set-up) but whose steps are as short as the
    compiled one's: blocks of the steps that take SIDE_BLOCK_S, as for any short step, not one step
    a block (steps one by one in turn are slower than steps in a row)."""
    from types import SimpleNamespace

    from experiments import job as job_module
    from experiments.job import SIDE_BLOCK_MAX, SIDE_BLOCK_S, _side_by_side

    now, order = [0.0], []

    def eager() -> None:
        order.append("e")
        now[0] += 0.01 if len(order) == 1 else 2e-5

    def compiled() -> None:
        order.append("c")
        now[0] += 2e-5

    monkeypatch.setattr(job_module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    prepared = SimpleNamespace(config=SimpleNamespace(compile=True), step=SimpleNamespace(call=compiled, eager=eager),
                               sync=lambda: None, device="cpu")
    found = _side_by_side(prepared, step_us=20.0)
    block = min(SIDE_BLOCK_MAX, round(SIDE_BLOCK_S / 2e-5))
    assert "".join(order[:2 + 2 * block]) == "ee" + "e" * block + "c" * block
    assert found["side_by_side_eager_us"] == pytest.approx(20.0)


def test_a_phase_line_reaches_the_log_whatever_the_workload_made_of_sys_stderr(monkeypatch, capfd):
    """helper-46: a factory that set sys.stderr to os.devnull hid every later phase, and a timeout
    named the wrong one. The line goes to fd 2 (the job's log), on a line of its own."""
    import io

    from experiments import job, records
    from experiments.lifeline import PARENT_ENV

    monkeypatch.setenv(PARENT_ENV, "1")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    print("a partial line of the workload's", end="", file=sys.__stderr__, flush=True)
    job._phase("the profiled steps")
    err = capfd.readouterr().err
    assert records.last_phase(err) == "the profiled steps"
    assert "a partial line of the workload's\nprofsweep: now the profiled steps\n" in err


def test_an_error_of_the_code_raised_in_the_compilers_or_profsweeps_code_may_change():
    """helper-47: an ImportError of Inductor reading a cache another job still writes is no error of
    the workload's code: its later repeats run. The same TypeError raised in the user's code is final."""
    from experiments.job import final_failure

    def raised_in(filename: str) -> BaseException:
        try:
            exec(compile("raise ImportError('a module half written')", filename, "exec"), {})
        except ImportError as exc:
            return exc
        raise AssertionError("not raised")

    assert final_failure(raised_in("/home/me/mybench/blocks.py")) is True
    assert final_failure(raised_in("/venv/lib/python3.12/site-packages/torch/_inductor/codecache.py")) is False
    assert final_failure(raised_in("/repo/experiments/counting.py")) is False
    assert final_failure(ValueError("the data was unlucky")) is False
