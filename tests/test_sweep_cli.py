"""End-to-end sweeps on the CPU, run as a subprocess the way a person runs them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import job_dirs, read_metrics, run_cli, table_footer

pytestmark = pytest.mark.slow


def test_two_sizes_eager_and_compile(sweep_dir):
    done = run_cli("-m", "size=32,256", "compile=true,false", f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stderr

    names = [d.name for d in job_dirs(sweep_dir)]
    assert names == [
        "0_matmul_add_32_bf16_cold_compile",
        "1_matmul_add_32_bf16_cold_eager",
        "2_matmul_add_256_bf16_cold_compile",
        "3_matmul_add_256_bf16_cold_eager",
    ]
    for job_dir in job_dirs(sweep_dir):
        m = read_metrics(job_dir)
        stem = f"{m['size']}_bf16_cold_{'compile' if m['compile'] else 'eager'}"
        assert m["status"] == "ok" and m["error"] is None
        assert (m["trace_file"], m["table_file"]) == (f"{stem}.json", f"{stem}.txt")
        assert (job_dir / ".hydra" / "config.yaml").is_file()
        json.loads((job_dir / m["trace_file"]).read_text())  # a complete trace
        footer = table_footer((job_dir / m["table_file"]).read_text())
        assert m["self_cpu_total_us"] == pytest.approx(footer["CPU"], rel=0.01)
        assert m["device"] == "cpu" and m["self_device_total_us"] is None
        assert m["steps"] == 3 and m["first_call_ms"] > 0
        assert not list(job_dir.glob("*.partial")) and not list(job_dir.glob(".*tmp"))

    lines = done.stdout.splitlines()
    assert "[1/4] matmul_add size=32 bf16 cold compile ..." in lines
    assert any(l.startswith("[4/4] matmul_add size=256 bf16 cold eager ok ") for l in lines)
    assert lines[-1] == f"done: 4 jobs (4 ok, 0 failed) in {sweep_dir}"
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    assert plan["jobs"] == 4


def test_a_time_stamped_sweep_folder_is_one_folder(tmp_path):
    # Hydra's default sweep folder is time-stamped (${now:...}): every job of the sweep must
    # land in the one folder stamped when the sweep started, however long the jobs take.
    done = run_cli("-m", "size=16,32", "compile=false", f"hydra.sweep.dir={tmp_path}/${{now:%H-%M-%S-%f}}")
    assert done.returncode == 0, done.stdout + done.stderr
    [folder] = list(tmp_path.iterdir())
    assert [d.name for d in job_dirs(folder)] == ["0_matmul_add_16_bf16_cold_eager", "1_matmul_add_32_bf16_cold_eager"]
    assert done.stdout.splitlines()[-1] == f"done: 2 jobs (2 ok, 0 failed) in {folder}"


def test_identical_cold_compiles_both_pay_compilation(sweep_dir, tmp_path):
    # compile_cache=fresh (default): each job compiles from scratch, in its own interpreter.
    fresh = run_cli("-m", "size=32", "compile=true", f"hydra.sweep.dir={sweep_dir}", repeats=2)
    assert fresh.returncode == 0, fresh.stderr
    for job_dir in job_dirs(sweep_dir):
        m = read_metrics(job_dir)
        assert (m["inductor_cache_misses"], m["inductor_cache_hits"]) == (1, 0), job_dir.name

    # The same sweep sharing one cache: the second job finds the first one's compiled graph,
    # which shows the check above can tell the two apart.
    shared_dir = tmp_path / "shared"
    shared = run_cli(
        "-m", "size=32", "compile=true", "run.compile_cache=shared", f"hydra.sweep.dir={shared_dir}",
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")}, repeats=2,
    )
    assert shared.returncode == 0, shared.stderr
    second = read_metrics(job_dirs(shared_dir)[1])
    assert second["inductor_cache_hits"] >= 1


def test_failed_jobs_are_recorded_and_the_sweep_goes_on(sweep_dir):
    done = run_cli(
        "-m", "size=16,200000", "dtype=fp32", "compile=false,true", f"hydra.sweep.dir={sweep_dir}",
    )
    assert done.returncode == 1
    by_name = {d.name: read_metrics(d) for d in job_dirs(sweep_dir)}
    assert by_name["0_matmul_add_16_fp32_cold_eager"]["status"] == "ok"
    assert by_name["1_matmul_add_16_fp32_cold_compile"]["status"] == "ok"
    assert "memory" in by_name["2_matmul_add_200000_fp32_cold_eager"]["stderr_tail"]  # its last words
    for name in ("2_matmul_add_200000_fp32_cold_eager", "3_matmul_add_200000_fp32_cold_compile"):
        m = by_name[name]
        assert m["status"] == "failed" and m["error"].startswith("JobError: memory: ")
        assert "GiB" in m["error"] and "available on cpu" in m["error"]
        assert not (sweep_dir / name / "200000_fp32_cold_eager.json").exists()
    assert "done: 4 jobs (2 ok, 2 failed)" in done.stdout
    summary = pd.read_csv(sweep_dir / "summary.csv")
    assert list(summary["status"]) == ["ok", "ok", "failed", "failed"]
    assert "  failed: 2_matmul_add_200000_fp32_cold_eager: JobError: memory: " in done.stdout


BAD_INPUTS = {
    # key: (single-run override, sweep whose first job is good, what the message must name)
    "size<0": ("size=-1", "size=16,-1", ["size=-1", "> 0"]),
    "size str": ("size=abc", "size=16,abc", ["size=abc is not allowed", "Integer", "(key size)"]),
    "size float": ("size=1.5", "size=16,1.5", ["size=1.5 is not allowed", "Integer", "(key size)"]),
    "size empty": ("size=", "size=", ["size= is not allowed", "Integer"]),
    "dtype": ("dtype=int3", "dtype=bf16,int3", ["dtype='int3'", "bf16, fp16, fp32"]),
    "compile": ("compile=maybe", "compile=false,maybe", ["compile=maybe is not allowed"]),
    # OmegaConf would take these for true: a user who wrote warmup=2 meant warm-up calls
    "warmup count": ("warmup=2", "warmup=false,2", ["warmup=2 is not allowed: warmup must be true or false",
                                                    "run.warmup_iters"]),
    "flag word": ("train=yes", "train=false,yes", ["train=yes is not allowed: train must be true or false"]),
    "flag number": ("profiler.gzip=1", "profiler.gzip=false,1",
                    ["profiler.gzip=1 is not allowed: profiler.gzip must be true or false"]),
    "workload": ("workload=nope", "workload=matmul_add,nope",
                 ["workload=nope is not allowed: choose one of", "bmm", "linear", "matmul_add", "mlp"]),
    "trailing comma": ("size=16,", "size=16,", ["size=16, is not allowed: it is not a valid override"]),
    "workload empty": ("workload=", "workload=", ["workload= is not allowed: choose one of", "matmul_add"]),
    "workload null": ("workload=null", "workload=null", ["workload=null is not allowed: workload takes one of",
                                                         "matmul_add"]),
    "group null": ("profiler=null", "workload=matmul_add,linear profiler=null",
                   ["profiler=null is not allowed: profiler takes one of article, detailed"]),
    "typo": ("sise=3", "sise=3", ["sise=3 is not allowed: sise is not a key of this configuration (did you mean "
                                  "size? the keys: size, dtype"]),
    "typo in a group": ("run.thread=1", "run.thread=1", ["run.thread is not a key of this configuration (did you mean "
                                                        "run.threads? the keys: run.isolation"]),
    "non-ascii": ("dtype=ñ", "dtype=ñ", ["dtype=ñ is not allowed: it is not a valid override", "quote"]),
    "backend": ("compile=true compiler.backend=nope", "compile=true compiler.backend=inductor,nope",
                ["compiler.backend='nope' is not allowed", "aot_eager", "inductor"]),
    "backend, eager": ("compiler.backend=nope", "compiler.backend=nope",  # refused as compiler.mode=nope is
                       ["compiler.backend='nope' is not allowed", "aot_eager", "inductor"]),
    "interpolation": ("size=${oops}", "size=16,${oops}",
                      ["size=${oops} is not allowed: OmegaConf cannot resolve it", "Interpolation key 'oops' not found"]),
    "interpolated dir": ("hydra.run.dir=${oops}/x", "size=16 hydra.sweep.dir=${oops}/x",
                         ["dir=${oops}/x is not allowed: OmegaConf cannot resolve it", "'oops'"]),
    # helper-37: OmegaConf's words alone, a message about hydra.run.dir, or the wrong key named
    "expect not a list": ("expect=5", "expect=5", ["expect=5 is not allowed", "int is not a ListConfig",
                                                   "expect is a list of quoted expectations"]),
    "no factory": ("workload=custom", "workload=custom",
                   ["workload._target_ is missing: name your factory, e.g. workload._target_="]),
    "factory key misspelt": ("workload=custom workload.target=experiments.workloads:linear",
                             "workload=custom workload.target=experiments.workloads:linear",
                             ["workload.target=experiments.workloads:linear is not allowed: the factory is "
                              "workload._target_"]),
    "a built-in's name": ("workload=custom workload._target_=experiments.workloads:linear workload.name=matmul_add",
                          "workload=custom workload._target_=experiments.workloads:linear workload.name=matmul_add",
                          ["under the name matmul_add, a built-in workload's", "workload.name=my_matmul_add"]),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
@pytest.mark.parametrize("multirun", [True, False], ids=["sweep", "single"])
def test_bad_input_is_refused_before_any_job(tmp_path, case, multirun):
    single, sweep, needles = BAD_INPUTS[case]
    out = tmp_path / "out"
    if multirun:
        done = run_cli("-m", *sweep.split(), *([] if "hydra.sweep.dir" in sweep else [f"hydra.sweep.dir={out}"]))
    else:
        done = run_cli(*single.split(), *([] if "hydra.run.dir" in single else [f"hydra.run.dir={out}"]))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and "HYDRA_FULL_ERROR" not in done.stderr + done.stdout
    for needle in needles:
        assert needle in done.stderr, (needle, done.stderr)
    assert not list(tmp_path.rglob("metrics.json"))
    assert " ok " not in done.stdout


def test_device_cuda_without_a_gpu_is_refused(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    done = run_cli("-m", "size=16,32", "device=cuda", f"hydra.sweep.dir={tmp_path / 'out'}")
    assert done.returncode == 2
    assert "device='cuda'" in done.stderr and "device=cpu" in done.stderr
    assert not list(tmp_path.rglob("metrics.json"))


def test_other_workloads_run(sweep_dir):
    done = run_cli("-m", "workload=mlp,linear,bmm", "size=16", "warmup=true",
                   f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stdout + done.stderr
    for job_dir, workload in zip(job_dirs(sweep_dir), ("mlp", "linear", "bmm")):
        m = read_metrics(job_dir)
        assert job_dir.name == f"{m['job'].split('_')[0]}_{workload}_16_bf16_warm_eager"
        assert m["status"] == "ok" and m["workload"] == workload and m["warmup"] is True
        footer = table_footer((job_dir / m["table_file"]).read_text())
        assert m["self_cpu_total_us"] == pytest.approx(footer["CPU"], rel=0.01)
        assert workload in (job_dir / m["trace_file"]).read_text()  # the record_function span


def test_single_run_in_process(tmp_path):
    out = tmp_path / "run"
    done = run_cli("size=16", "run=fast", "run.ceilings=off", f"hydra.run.dir={out}")  # (no ceilings' line first)
    assert done.returncode == 0, done.stderr
    m = read_metrics(out)
    assert m["status"] == "ok" and m["isolation"] == "none"
    assert not (out / "job_config.json").exists()  # no child process was needed
    # (after the lines of a wait for the CPU, where another test's sweep held it)
    said = [line for line in done.stdout.splitlines() if " waiting for the CPU (one job per device)" not in line]
    assert said[0] == "[1/1] matmul_add size=16 bf16 cold eager ..."
    assert (out / "report.html").is_file()  # the analysis runs after a single run too
    assert (out / "summary.csv").read_text().count("\n") == 2  # header and the one job
    # a single run plans one process: no advice to rerun it "to finish" three that never come
    assert m["repeats_planned"] == 1 and "was planned" not in done.stdout, done.stdout
    assert "(run.repeats=3 or more, in a sweep with -m, for that)" in done.stdout


def test_attention_backends_each_run_their_own_kernel(sweep_dir):
    done = run_cli("-m", "workload=attention", "size=16,32", "workload.backend=math,flash",
                   "workload.batch=1", "workload.heads=2", f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/4] attention backend=math batch=1 heads=2 size=16 bf16 cold eager ..." in done.stdout
    kernel = {"math": "aten::_scaled_dot_product_attention_math",
              "flash": "aten::_scaled_dot_product_flash_attention_for_cpu"}
    for job_dir in job_dirs(sweep_dir):
        m = read_metrics(job_dir)
        assert m["status"] == "ok" and m["workload_backend"] in kernel
        names = {e.get("name") for e in json.loads((job_dir / m["trace_file"]).read_text())["traceEvents"]}
        assert kernel[m["workload_backend"]] in names
        other = kernel["flash" if m["workload_backend"] == "math" else "math"]
        assert other not in names
        footer = table_footer((job_dir / m["table_file"]).read_text())
        assert m["self_cpu_total_us"] == pytest.approx(footer["CPU"], rel=0.01)
    summary = pd.read_csv(sweep_dir / "summary.csv")
    # the series are named as the progress lines name them: every setting the command line gives
    both = ["attention backend=flash batch=1 heads=2", "attention backend=math batch=1 heads=2"]
    assert sorted(set(summary["variant"])) == both
    crossovers = pd.read_csv(sweep_dir / "crossovers.csv")
    assert sorted(crossovers["variant"]) == both
    assert set(crossovers["sizes"]) == {"16;32"}


OWN_BLOCK = """
import torch
from torch import nn


def make_block(*, size, dtype, device, hidden: int = 8):
    block = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
    return block.to(device=device, dtype=dtype), (torch.randn(size, hidden, device=device, dtype=dtype),)
"""


def test_own_model_jobs_name_every_swept_value_in_folder_and_progress_line(tmp_path, sweep_dir):
    # hidden=8 is the factory's default: named all the same, as hidden=16 is.
    (tmp_path / "ownbench.py").write_text(OWN_BLOCK)
    done = run_cli("-m", "workload=custom", "workload._target_=ownbench:make_block", "workload.hidden=8,16",
                   "size=8", f"hydra.sweep.dir={sweep_dir}", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert [d.name for d in job_dirs(sweep_dir)] == ["0_make_block-hidden8_8_bf16_cold_eager",
                                                      "1_make_block-hidden16_8_bf16_cold_eager"]
    for n, hidden in ((1, 8), (2, 16)):
        assert f"[{n}/2] make_block hidden={hidden} size=8 bf16 cold eager ..." in done.stdout
    for job_dir in job_dirs(sweep_dir):
        m = read_metrics(job_dir)
        assert (m["trace_file"], m["table_file"]) == ("8_bf16_cold_eager.json", "8_bf16_cold_eager.txt")
    summary = pd.read_csv(sweep_dir / "summary.csv")
    assert sorted(summary["variant"]) == ["make_block hidden=16", "make_block hidden=8"]


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_cuda_only_attention_backend_is_refused_without_cuda(tmp_path, device):
    import torch

    if device == "auto" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    done = run_cli("-m", "workload=attention", "size=16", "workload.backend=math,efficient",
                   f"device={device}", f"hydra.sweep.dir={tmp_path / 'out'}")
    assert done.returncode == 2
    assert "workload.backend='efficient' is not allowed" in done.stderr
    assert "choose auto, math, flash, naive or inplace" in done.stderr
    assert not list(tmp_path.rglob("metrics.json"))


@pytest.mark.parametrize("multirun", [True, False], ids=["sweep", "single"])
def test_an_output_folder_that_is_a_file_is_refused(tmp_path, multirun):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    done = run_cli(*(["-m", "size=16,32"] if multirun else ["size=16"]), f"{key}={taken}")
    assert done.returncode == 2, done.stderr
    assert f"{key}={taken} is a file, not a folder" in done.stderr
    assert "Traceback" not in done.stderr and taken.read_text() == "not a folder"


def test_a_value_given_twice_in_a_swept_key_is_refused(tmp_path):
    """size=16,16 made two grid points of one configuration, each `repeat` 1 (a reviewer's finding)."""
    done = run_cli("-m", "size=16,32,16", f"hydra.sweep.dir={tmp_path / 'out'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: size=16,32,16 is not allowed: 16 is given twice" in done.stderr and "run.repeats" in done.stderr
    assert not (tmp_path / "out").exists()


def test_run_repeat_which_the_sweep_sets_is_refused_on_its_command_line(tmp_path):
    """helper-52: run.repeat=7 named a sweep's one job `..._r7`, "repeat 7" of a one-process point."""
    done = run_cli("-m", "size=16", "run.repeat=7", f"hydra.sweep.dir={tmp_path / 'out'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: run.repeat=7 is not allowed: run.repeat is which of a grid point's processes a job is, set by " \
        "the sweep: give run.repeats=N" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("multirun", [True, False], ids=["sweep", "single"])
def test_a_key_given_twice_on_the_command_line_is_refused(tmp_path, multirun):
    """size=16 size=32 ran size=32 alone without a word (helper-34): Hydra keeps the last."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    done = run_cli(*(["-m"] if multirun else []), "size=16", "size=32", f"{key}={tmp_path / 'out'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: size is given twice on the command line (size=16 and size=32): give it once" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("multirun", [True, False], ids=["sweep", "single"])
def test_a_key_every_job_needs_deleted_on_the_command_line_is_refused(tmp_path, multirun):
    """`~size` left a sweep folder of 3 jobs "not started" (Interpolation key 'size' not found),
    and a single run a refusal about hydra.run.dir."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    done = run_cli(*(["-m"] if multirun else []), "~size", f"{key}={tmp_path / 'out'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: ~size is not allowed: every job needs size; give it a value instead (size=VALUE)" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_deleted_key_given_again_or_one_no_job_needs_is_no_refusal():
    from omegaconf import OmegaConf

    from experiments.preflight import refuse_deleted_keys

    def cfg(*task: str):
        return OmegaConf.create({"hydra": {"overrides": {"task": list(task)}}})

    refuse_deleted_keys(cfg("~compiler", "+compiler={mode: default}", "~size", "+size=16"))
    refuse_deleted_keys(cfg("~expect", "~workload.settings.width"))
    for gone in ("~dtype", "~run.threads", "~workload._target_", "~compiler"):
        with pytest.raises(SystemExit):
            refuse_deleted_keys(cfg("size=16", gone))


def test_a_delete_then_an_add_of_one_key_is_no_repeat():
    """`~compiler '+compiler={mode: default}'` is how Hydra replaces a key (helper-35)."""
    from omegaconf import OmegaConf

    from experiments.preflight import refuse_repeated_keys

    def cfg(*task: str):
        return OmegaConf.create({"hydra": {"overrides": {"task": list(task)}}})

    refuse_repeated_keys(cfg("~compiler", "+compiler={mode: default}", "size=16"))
    with pytest.raises(SystemExit):
        refuse_repeated_keys(cfg("size=16", "dtype=bf16", "size=32"))


def test_more_threads_than_cpus_is_warned_of(monkeypatch, capsys):
    """run.threads=999 on a 2-core machine ran without a word (helper-34)."""
    import os

    from experiments.config import JobConfig, RunConfig
    from experiments.preflight import warn_oversubscribed

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    warn_oversubscribed([JobConfig(run=RunConfig(threads=cpus)), JobConfig(run=RunConfig(threads="auto"))])
    assert capsys.readouterr().out == ""
    warn_oversubscribed([JobConfig(run=RunConfig(threads=cpus + 1)), JobConfig(run=RunConfig(threads=cpus + 7))])
    assert capsys.readouterr().out == (f"warning: run.threads={cpus + 7} is more than the {cpus} CPUs this machine "
                                       "lets the jobs use: their threads take turns on them, and the steps measure "
                                       "the turns\n")


def test_a_swept_key_of_no_value_is_refused(tmp_path):
    """size=range(5,5) started a sweep of 0 jobs with an IndexError warning from the callback, exited 0
    and left an empty report (helper-34)."""
    done = run_cli("-m", "size=range(5,5)", f"hydra.sweep.dir={tmp_path / 'out'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: size=range(5,5) gives size no value: a sweep of no grid point" in done.stderr
    assert "Traceback" not in done.stderr and "IndexError" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("multirun", [True, False], ids=["sweep", "single"])
def test_an_empty_output_folder_is_refused_not_taken_as_the_current_one(tmp_path, multirun):
    """`hydra.sweep.dir=""` is Path("") once made a path: "." (a reviewer's sweep wrote 18 files into
    the repository it ran from)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    args = ["-m", "size=16"] if multirun else ["size=16"]
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "run.py"), *args, f'{key}=""'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert f"{key}='' is not allowed: give a folder to write into" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran
    out = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path), "--out", ""], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "argument --out: '' is not allowed" in out.stderr
    (tmp_path / "a file").write_text("")
    out = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path), "--out", str(tmp_path / "a file")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "a file is a file, not a folder" in out.stderr


def test_a_1000_job_grid_starts_its_first_job_at_once(tmp_path):
    # Nothing is composed ahead of its job: the first job line comes as soon as with a small
    # grid (benchmarks/grid_start.py times both); the sweep is stopped there.
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "experiments/run.py", "-m", "size=range(1,1001)", "run.isolation=none", "run.repeats=1",
         f"hydra.sweep.dir={out}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("[1/1000] "):
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert f"sweep of 1,000 jobs -> {out}" in lines, lines
    # its first job started: at once, or waiting for the device another test's sweep holds (two workers)
    assert lines[-1] == "[1/1000] matmul_add size=1 bf16 cold eager ..." or lines[-1].startswith(
        "[1/1000] matmul_add size=1 bf16 cold eager waiting for the CPU (one job per device)"), lines
    axes = json.loads((out / "sweep.json").read_text())["axes"]  # the grid as its axes, not 1000 lists
    assert [(a["key"], len(a["overrides"]), a["overrides"][-1]) for a in axes] == [
        ("size", 1000, "size=1000"), ("run.isolation", 1, "run.isolation=none"), ("run.repeats", 1, "run.repeats=1")]
    assert (out / "multirun.yaml").is_file()


def test_a_bad_value_deep_in_a_large_grid_is_refused_before_any_job(tmp_path):
    out = tmp_path / "out"
    done = run_cli("-m", "size=range(1,1001)", "dtype=bf16,fp99", f"hydra.sweep.dir={out}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "dtype='fp99' is not allowed" in done.stderr
    assert "(in the job size=1 dtype=fp99 run.repeats=1)" in done.stderr
    assert not out.exists() and " ok " not in done.stdout


def test_interpolations_that_work_keep_working(tmp_path):
    """A swept value that names another key, and the time stamp in the sweep folder: resolved."""
    done = run_cli("-m", "workload=bmm", "workload.batch=2", "size=8,${workload.batch}",
                   f"hydra.sweep.dir={tmp_path}/s/${{now:%Y}}")
    assert done.returncode == 0, done.stdout + done.stderr
    [folder] = (tmp_path / "s").iterdir()
    assert folder.name.isdigit() and sorted(read_metrics(d)["size"] for d in job_dirs(folder)) == [2, 8]


@pytest.mark.slow
def test_repeats_in_one_process_are_said_not_to_be_independent(tmp_path):
    """Part 1's preset asks for 5 repeats, and run=fast runs them all in the sweep's own process (a
    reviewer's composition): the sweep says their interval is not one between processes."""
    done = run_cli("-m", "size=8", "run=fast", "run.ceilings=off", "run.repeats=2", f"hydra.sweep.dir={tmp_path / 's'}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: run.isolation=none runs every repeat in this one process (run.repeats=2)" in done.stdout
    quiet = run_cli("-m", "size=8", "run=fast", "run.ceilings=off", f"hydra.sweep.dir={tmp_path / 'q'}")
    assert "runs every repeat in this one process" not in quiet.stdout  # run=fast's own run.repeats=1


def test_slurm_without_slurm_is_refused_before_any_folder(tmp_path):
    """hydra/launcher=slurm where sbatch and srun are not on PATH: one line, exit 2, no sweep folder
    (before: submitit's 40-line traceback, exit 1, and a half-made sweep folder)."""
    import shutil

    if shutil.which("sbatch") or shutil.which("srun"):
        pytest.skip("this machine has SLURM's commands")
    done = run_cli("-m", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "size=16",
                   f"hydra.sweep.dir={tmp_path / 'out'}")
    assert done.returncode == 2 and done.stderr.startswith("error: hydra/launcher=slurm is not allowed here: sbatch "
                                                           "and srun are not on PATH"), done.stderr
    assert "Traceback" not in done.stderr + done.stdout and not (tmp_path / "out").exists()


def test_settings_one_process_leaves_without_effect_are_warned_of(capsys):
    """run.isolation=none run.job_timeout_s=5: a hanging job ran on, with no word at the start
    (helper-37); run.start=fresh the same."""
    from experiments.config import JobConfig, RunConfig
    from experiments.preflight import warn_unused_with_one_process

    warn_unused_with_one_process([JobConfig(run=RunConfig(isolation="none")),
                                  JobConfig(run=RunConfig(isolation="none", job_timeout_s=0)),  # run=fast's
                                  JobConfig(run=RunConfig(job_timeout_s=5))])
    assert capsys.readouterr().out == ""  # the default timeout in one process, a timeout in its own process
    warn_unused_with_one_process([JobConfig(run=RunConfig(isolation="none", job_timeout_s=5, start="fresh"))])
    said = capsys.readouterr().out
    assert "warning: run.job_timeout_s does not apply with run.isolation=none" in said
    assert "warning: run.start does not apply with run.isolation=none" in said
