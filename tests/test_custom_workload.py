"""A user's own workload, written to a folder outside the project and swept through the CLI as a
person would: inference and training, eager and compiled, bad targets refused before any job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, job_dirs, read_metrics, run_cli, table_footer

USER_MODULE = '''
"""A user's benchmark module: nothing in it knows about profsweep."""
import torch
import torch.nn.functional as F
from torch import nn


class GeGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x))


def make_geglu(*, size, dtype, device, dim: int = 32, hidden: int = 64):
    module = GeGLU(dim, hidden).to(device=device, dtype=dtype)
    return module, (torch.randn(size, dim, device=device, dtype=dtype),)


def picky(*, size, dtype, device, limit: int = 32):
    """torch.add(torch.matmul(x, w), b), refusing sizes above `limit`."""
    if size > limit:
        raise ValueError(f"size {size} is above limit {limit}")
    x, w, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(3))
    return (lambda x, w, b: torch.add(torch.matmul(x, w), b)), (x, w, b)


NOT_A_FUNCTION = 42


def returns_int(*, size, dtype, device):
    """A broken factory: returns a number, not (fn, args)."""
    return 7


class Counting(nn.Module):
    """Counts its calls in a Python int: torch.compile guards on it and compiles again every call."""

    def __init__(self, dim):
        super().__init__()
        self.calls, self.lin = 0, nn.Linear(dim, dim)

    def forward(self, x):
        self.calls += 1
        return self.lin(x) * self.calls


def make_opaque(*, size, dtype, device):
    """A GRU, whose step Dynamo skips whole: compile=true compiles nothing."""
    module = nn.GRU(8, 8, batch_first=True).to(device=device, dtype=dtype)
    return module, (torch.randn(2, size, 8, device=device, dtype=dtype),)


def make_counting(*, size, dtype, device, precompiled: bool = False, limit: int = 3):
    torch._dynamo.config.recompile_limit = limit  # a user's setting: fewer compilations before it gives up
    module = Counting(16).to(device=device, dtype=dtype)
    return (torch.compile(module) if precompiled else module), (torch.randn(size, 16, device=device, dtype=dtype),)
'''


@pytest.fixture(scope="module")
def user_code(tmp_path_factory) -> Path:
    """A folder outside the repository holding the package `mybench`."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "mybench").mkdir()
    (folder / "mybench" / "__init__.py").write_text("")
    (folder / "mybench" / "blocks.py").write_text(textwrap.dedent(USER_MODULE))
    (folder / "mybench" / "other.py").write_text(textwrap.dedent(USER_MODULE))  # the same factories' names
    (folder / "mybench" / "script.py").write_text("import sys\nsys.exit(3)  # a script, not a module\n")
    assert ROOT not in folder.parents
    return folder


def _trace_names(job_dir: Path, record: dict) -> list[tuple[str, str]]:
    trace = json.loads((job_dir / record["trace_file"]).read_text())
    return [(e.get("cat"), e.get("name")) for e in trace["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.slow
def test_a_user_module_is_swept_for_inference_and_training(user_code, tmp_path):
    sweep, compiled = tmp_path / "sweep", tmp_path / "compiled"
    common = ["workload=custom", "workload._target_=mybench.blocks:make_geglu", "workload.hidden=16",
              "train=false,true"]
    done = run_cli("-m", *common, "size=8,64", f"hydra.sweep.dir={sweep}", env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done: 4 jobs (4 ok, 0 failed)" in done.stdout
    done = run_cli("-m", *common, "size=8", "compile=true", f"hydra.sweep.dir={compiled}",
                   env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 0, done.stdout + done.stderr
    records = {d: read_metrics(d) for d in job_dirs(sweep) + job_dirs(compiled)}
    dim, hidden = 32, 16
    for job_dir, m in records.items():
        assert m["status"] == "ok", m["error"]
        assert job_dir.name.split("_", 1)[1].startswith("make_geglu-hidden16_")  # the setting given
        assert (m["workload"], m["workload_target"]) == ("make_geglu", "mybench.blocks:make_geglu")
        assert (m["workload_hidden"], m["workload_dim"]) == (hidden, dim)  # the default is recorded too
        footer = table_footer((job_dir / m["table_file"]).read_text())
        assert m["self_cpu_total_us"] == pytest.approx(footer["CPU"], rel=0.01)
        assert m["peak_memory_bytes"] > 0 and m["flops_source"] == "counted"
        names = _trace_names(job_dir, m)
        phases = [n for c, n in names if c == "user_annotation" and n in ("forward", "backward", "optimizer")]
        if m["train"]:
            assert job_dir.name.endswith("_train") and m["optimizer"] == "adamw"
            assert sorted(phases) == ["backward"] * 3 + ["forward"] * 3 + ["optimizer"] * 3
        else:
            assert phases == []
            n = m["size"]
            # Counted by FlopCounterMode = the hand count: three GEMMs, then gelu and mul on (n, hidden).
            assert m["flops_per_call"] == 6 * n * dim * hidden + 2 * n * hidden
    trained = {(m["size"], m["compile"]): m["flops_per_call"] for m in records.values() if m["train"]}
    for (n, compile), flops in trained.items():
        # GEMMs alone: 3 forward, 4 backward (down: its input's and weight's gradients; gate and
        # up: their weights' only, x needs none), 2·n·dim·hidden each; then pointwise and AdamW.
        assert flops > 7 * 2 * n * dim * hidden
    assert trained[(8, True)] == trained[(8, False)]  # counted on the eager step either way

    summary = pd.read_csv(sweep / "summary.csv").set_index("job")
    for train, rows in summary.groupby("train"):
        by_size = rows.set_index("size")
        assert by_size.loc[64, "peak_memory_bytes"] > by_size.loc[8, "peak_memory_bytes"], train
        assert by_size["achieved_flops_per_s"].notna().all() and by_size["regime"].notna().all()
    trained = summary[summary["train"]]
    for phase in ("forward", "backward", "optimizer"):
        assert (trained[f"step_{phase}_host_us_median"] > 0).all()
        assert (trained[f"step_{phase}_compute_us_median"] > 0).all()  # backward and optimizer ops are compute
    report = (sweep / "report.html").read_text()
    assert "Training steps: time per phase" in report and (sweep / "plots" / "memory.png").exists()


@pytest.mark.slow
def test_a_factory_that_raises_fails_only_its_job_and_settings_name_series(user_code, tmp_path):
    """Run from the user's folder: the module is found in the working directory."""
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "run.py"), "-m", "workload=custom",
         "workload._target_=mybench.blocks:picky", "workload.limit=32,100", "size=16,64", "run.repeats=1",
         f"hydra.sweep.dir={sweep}"],
        cwd=user_code, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "done: 4 jobs (3 ok, 1 failed)" in done.stdout
    records = [read_metrics(d) for d in job_dirs(sweep)]
    failed = [m for m in records if m["status"] != "ok"]
    assert len(failed) == 1 and (failed[0]["size"], failed[0]["workload_limit"]) == (64, 32)
    assert failed[0]["error"] == "ValueError: size 64 is above limit 32"
    for m in records:
        if m["status"] == "ok":  # a plain function without a cost model: FLOPs counted
            assert m["flops_per_call"] == 2 * m["size"] ** 3 + m["size"] ** 2
    summary = pd.read_csv(sweep / "summary.csv")
    assert set(summary["variant"]) == {"picky limit=32", "picky limit=100"}


@pytest.mark.parametrize(
    "overrides,needles",
    [
        ([], ["workload._target_ is missing", "workload._target_=mybench.blocks:make_block"]),
        (["workload._target_=mybench.nowhere:f"], ["workload._target_='mybench.nowhere:f' does not import",
                                                    "No module named 'mybench.nowhere'"]),
        (["workload._target_=mybench.blocks:NOT_A_FUNCTION"], ["is not callable: it is a int"]),
        (["workload._target_=mybench.script:make"], ["workload._target_='mybench.script:make' does not import: the "
                                                     "module called sys.exit(3) as it was imported"]),
        (["workload._target_=mybench.blocks:make_geglu", "workload.hiden=3"],
         ["workload.hiden=3 is not allowed", "unexpected keyword argument 'hiden'", "its settings are dim, hidden"]),
        (["workload._target_=mybench.blocks:make_geglu", "workload.hidden=8,abc"],
         ["workload.hidden='abc' is not allowed", "must be an integer"]),
        (["workload._target_=os:getcwd"], ["rejects its arguments", "size, dtype, device"]),
    ],
)
def test_bad_targets_are_refused_before_any_job(user_code, tmp_path, overrides, needles):
    sweep = tmp_path / "sweep"
    done = run_cli("-m", "workload=custom", *overrides, "size=8", f"hydra.sweep.dir={sweep}",
                   env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 2, done.stdout + done.stderr
    for needle in needles:
        assert needle in done.stderr
    assert not sweep.exists()  # nothing written


@pytest.mark.slow
def test_two_factories_with_one_name_are_named_apart(user_code, tmp_path):
    """mybench.blocks:make_geglu and mybench.other:make_geglu: their folders and progress lines
    tell them apart (the same on a resume); their series keep the factory's name, told apart by
    `target`, so that each pairs with a sweep of it alone."""
    sweep = tmp_path / "sweep"
    args = ["-m", "workload=custom", "workload._target_=mybench.blocks:make_geglu,mybench.other:make_geglu",
            "workload.hidden=16", "size=8", "run=fast", f"hydra.sweep.dir={sweep}"]
    done = run_cli(*args, env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("note: factories with the same name are shown apart in job folders and progress lines: "
            "mybench.blocks:make_geglu as blocks.make_geglu, mybench.other:make_geglu as other.make_geglu") in done.stdout
    assert [d.name.split("_", 1)[1] for d in job_dirs(sweep)] == [
        "blocks.make_geglu-hidden16_8_bf16_cold_eager", "other.make_geglu-hidden16_8_bf16_cold_eager"]
    assert "] blocks.make_geglu hidden=16 size=8" in done.stdout and "] other.make_geglu hidden=16 size=8" in done.stdout
    summary = pd.read_csv(sweep / "summary.csv")
    assert list(summary["workload"]) == ["make_geglu"] * 2
    assert sorted(summary["variant"]) == ["make_geglu hidden=16 target=mybench.blocks:make_geglu",
                                          "make_geglu hidden=16 target=mybench.other:make_geglu"]
    again = run_cli(*args, env={"PYTHONPATH": str(user_code)})
    assert "2 of them already ok, not run again (resume)" in again.stdout, again.stdout


@pytest.mark.slow
def test_a_failure_no_process_can_change_runs_one_process_per_grid_point(user_code, tmp_path):
    """A factory that returns an int fails the same way in every process: with run.repeats=3 only
    the first repeat of each grid point runs; the later ones are not run, said once."""
    sweep = tmp_path / "sweep"
    done = run_cli("-m", "workload=custom", "workload._target_=mybench.blocks:returns_int", "size=8,16",
                   "run.repeats=3", f"hydra.sweep.dir={sweep}", env={"PYTHONPATH": str(user_code)}, repeats=None)
    assert done.returncode == 1, done.stdout + done.stderr
    dirs = job_dirs(sweep)
    assert len(dirs) == 2  # one process per grid point, not three
    assert all(read_metrics(d)["failure_is_final"] is True and "returned a value of type int" in read_metrics(d)["error"]
               for d in dirs)
    assert "done: 2 jobs (0 ok, 2 failed) in" in done.stdout and "missing" not in done.stdout
    assert done.stdout.count("not run: the later repeats of 2 grid points") == 1
    # one process per grid point asked for: there are no later repeats to name
    done = run_cli("-m", "workload=custom", "workload._target_=mybench.blocks:returns_int", "size=8",
                   "run.repeats=1", f"hydra.sweep.dir={tmp_path / 'one'}", env={"PYTHONPATH": str(user_code)},
                   repeats=None)
    assert "done: 1 job (0 ok, 1 failed) in" in done.stdout and "not run" not in done.stdout, done.stdout


@pytest.mark.slow
def test_a_failure_that_can_change_is_repeated(user_code, tmp_path):
    """A factory that raises its own exception may not raise it in another process: repeated."""
    sweep = tmp_path / "sweep"
    done = run_cli("-m", "workload=custom", "workload._target_=mybench.blocks:picky", "workload.limit=4", "size=8",
                   "run.repeats=2", f"hydra.sweep.dir={sweep}", env={"PYTHONPATH": str(user_code)}, repeats=None)
    assert done.returncode == 1
    assert len(job_dirs(sweep)) == 2 and read_metrics(job_dirs(sweep)[0])["failure_is_final"] is False


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_a_target_without_workload_custom_is_refused(user_code, tmp_path, multirun):
    """workload._target_ on a built-in workload would run the user's factory under matmul_add's name,
    folders and claims: refused before any job, with the fix."""
    where = tmp_path / "out"
    args = (["-m", f"hydra.sweep.dir={where}"] if multirun else [f"hydra.run.dir={where}"])
    done = run_cli(*args, "workload._target_=mybench.blocks:make_geglu", "size=8", env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("workload._target_='mybench.blocks:make_geglu' is not allowed under the name matmul_add, a built-in "
            "workload's" in done.stderr)
    assert "give workload=custom" in done.stderr
    assert not where.exists() or not any(where.rglob("metrics.json"))


@pytest.mark.slow
def test_a_step_compiled_again_while_measured_is_said_and_noisy(user_code, tmp_path):
    """A module that changes a Python int every call compiles again on every call (Dynamo's
    guard on it) until its recompile limit: the job warns, the grid point is noisy for it; and an
    'eager' job whose factory returned a compiled module says it measured compiled code. Before,
    both were ok without a word and compile against eager was concluded from them."""
    sweep = tmp_path / "s"
    done = run_cli("-m", "workload=custom", "workload._target_=mybench.blocks:make_counting", "size=8",
                   "compile=true", "warmup=true,false", f"hydra.sweep.dir={sweep}", env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 0, done.stdout + done.stderr
    for job in job_dirs(sweep):
        record = read_metrics(job)
        # cold: compiled again in the profiled steps; warm: its warm-up calls reached the limit of 3
        assert record["status"] == "ok" and (record["recompiles"] >= 1 or record["recompile_limit"] == 1), record
        assert any("compiled again while it was measured" in w and "job.log has Dynamo's reasons" in w
                   for w in record["warnings"]), record["warnings"]
        assert "triggered by the following guard failure(s)" in (job / "job.log").read_text()  # the reasons are there
    summary = pd.read_csv(sweep / "summary.csv")
    assert summary["noise_reason"].str.contains("compiled again while it was measured").all()
    # a limit the job's few profiled steps stay under and the twin's many timed steps reach: its steps
    # past it ran eagerly, said as the job's own (before: recompile_limit 0, a reviewer's finding)
    twin = tmp_path / "t"
    done = run_cli("-m", "workload=custom", "workload._target_=mybench.blocks:make_counting", "size=8",
                   "+workload.limit=12", "compile=true", "warmup=false", f"hydra.sweep.dir={twin}",
                   env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 0, done.stdout + done.stderr
    record = read_metrics(job_dirs(twin)[0])
    assert record["timed_in"].startswith("a twin process") and record["recompile_limit"] == 1, record
    assert any("Dynamo reached its recompile limit and runs the rest eagerly" in w for w in record["warnings"])
    eager = tmp_path / "e"
    done = run_cli("-m", "workload=custom", "workload._target_=mybench.blocks:make_counting", "size=8",
                   "+workload.precompiled=true", "compile=false", "warmup=true", f"hydra.sweep.dir={eager}",
                   env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 0, done.stdout + done.stderr
    record = read_metrics(job_dirs(eager)[0])
    assert any("torch.compile ran inside the workload" in w for w in record["warnings"]), record["warnings"]


@pytest.mark.slow
def test_a_compiled_job_that_compiled_nothing_says_so(user_code, tmp_path):
    """helper-33: a GRU compiled nothing (Dynamo made no graph) and the report concluded 'compile
    against eager: no clear difference' without a word."""
    sweep = tmp_path / "s"
    done = run_cli("-m", "workload=custom", "workload._target_=mybench.blocks:make_opaque", "size=8", "compile=true",
                   "run.repeats=1", f"hydra.sweep.dir={sweep}", env={"PYTHONPATH": str(user_code)})
    assert done.returncode == 0, done.stdout + done.stderr
    record = read_metrics(job_dirs(sweep)[0])
    assert record["status"] == "ok"
    assert any(w.startswith("torch.compile compiled nothing: Dynamo made no graph") for w in record["warnings"])
    assert record["compiled_nothing"] is True  # the analysis then compares nothing with it
    assert "torch.compile compiled nothing" in done.stdout  # the conclusions' warnings line


def test_a_frame_compiled_again_without_a_graph_counts_as_a_recompilation():
    """helper-56: a step that reads `.item()` of a buffer it changes breaks its graph there, and
    Dynamo compiles the resumed frame again for each new value (a guard on the Python float) without
    making a graph: counted by graphs, 8 recompilations in the profiled steps read `recompiles 0`,
    no warning, and the report blamed the machine. Run in a process of its own (Dynamo's counters
    only grow in a process)."""
    code = textwrap.dedent("""
        import contextlib, io, torch
        from torch import nn
        from experiments.job import Prepared, dynamo_graphs

        class ItemGuard(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(8, 8)
                self.register_buffer("n", torch.zeros(()))

            def forward(self, x):
                h = self.a(x)
                self.n.add_(1).clamp_(max=5)
                if self.n.item() > 0:
                    print("step")
                    h = h * 2
                return h

        step, x = torch.compile(ItemGuard(), dynamic=False), torch.randn(4, 8)
        with contextlib.redirect_stdout(io.StringIO()):
            step(x)
            job = Prepared(*[None] * 8)
            job.warm()
            graphs = dynamo_graphs()[0]
            for _ in range(6):
                step(x)
        print(job.recompiles(), dynamo_graphs()[0] - graphs)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    recompiles, graphs = map(int, done.stdout.split()[-2:])
    assert graphs == 0 and recompiles == 4, done.stdout  # the values 2, 3, 4 and 5; then 5 again: none
