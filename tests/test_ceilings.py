"""This machine's measured ceilings (profsweep.ceilings), what the analysis holds grid points
against (analysis.peaks.Ceilings), and the roofline they give."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
import pytest

from analysis.__main__ import main as analysis_main
from analysis.peaks import DATASHEET, Ceilings
from analysis.tables import derive, regime_doubt
from profsweep import ceilings
from profsweep.ceilings import Ceiling
from tests.conftest import ROOT, run_cli

CPU_BF16 = Ceiling(device="cpu", dtype="bf16", threads=2, machine="host AMD EPYC", torch_version="2.13.0",
                   flops_per_s=200e9, matmul_size=2048, matmul_low=190e9, bytes_per_s=20e9, copy_bytes_per_s=18e9,
                   array_bytes=128 << 20, cache_bytes=32 << 20, processes=3, seconds=9.0,
                   measured_at="2026-12-04T17:00:00+00:00", how="by hand")


def environment(*found: Ceiling, mode: str = "measure") -> dict:
    return {"ceilings_mode": mode, "ceilings": [asdict(c) for c in found]}


def test_a_point_is_held_against_the_ceiling_of_its_device_dtype_and_threads():
    have = Ceilings.of(environment(CPU_BF16, replace(CPU_BF16, threads=1, flops_per_s=110e9),
                                   replace(CPU_BF16, dtype="fp32", flops_per_s=90e9)))
    assert have.peak({"platform": "cpu", "dtype": "bf16", "torch_threads": 2}) == (200e9, 20e9, "measured 2026-12-04")
    assert have.peak({"platform": "cpu", "dtype": "bf16", "torch_threads": 1})[0] == 110e9
    assert have.peak({"platform": "cpu", "dtype": "fp32", "torch_threads": 2})[0] == 90e9
    # no fp16 matmul peak measured: none to hold its FLOPs against, but memory moves bytes alike
    assert have.peak({"platform": "cpu", "dtype": "fp16", "torch_threads": 2}) == (None, 20e9, "measured 2026-12-04")
    # an integer workload's products (ran_dtype int64, from the job's count of its products): its
    # integer operations are no fraction of a floating-point peak
    int64 = {"platform": "cpu", "dtype": "bf16", "ran_dtype": "int64", "torch_threads": 2}
    assert have.peak(int64) == (None, 20e9, "measured 2026-12-04")
    assert have.ridge(int64) is None
    assert have.peak({**int64, "torch_threads": 4}) == (None, None, None)  # no ceiling of these threads at all
    # the dtype the step ran in (a factory that ignores dtype: helper-33's fp32 model swept at bf16
    # read "13% of the bf16 peak"), where the job recorded one
    assert have.peak({"platform": "cpu", "dtype": "bf16", "ran_dtype": "fp32", "torch_threads": 2})[0] == 90e9
    assert have.peak({"platform": "cpu", "dtype": "bf16", "ran_dtype": "float64", "torch_threads": 2})[0] is None
    assert have.peak({"platform": "cpu", "dtype": "bf16", "ran_dtype": None, "torch_threads": 2})[0] == 200e9
    # a GPU without a measured ceiling: its datasheet's, said as such; off: none at all
    h100 = {"platform": "cuda", "dtype": "bf16", "device_name": "NVIDIA H100 80GB HBM3"}
    assert have.peak(h100) == (989e12, 3350e9, DATASHEET)
    assert have.peak({**h100, "ran_dtype": "fp32"})[0] == 67e12
    assert Ceilings.of(environment(CPU_BF16, mode="off")).peak({"platform": "cpu", "dtype": "bf16",
                                                                "torch_threads": 2}) == (None, None, None)


@pytest.mark.parametrize("entry", [
    "not a dict", {"device": "cpu"}, {**asdict(CPU_BF16), "flops_per_s": -1.0},
    {**asdict(CPU_BF16), "bytes_per_s": float("nan")}, {**asdict(CPU_BF16), "flops_per_s": "fast"},
    {**asdict(CPU_BF16), "flops_per_s": True}, {**asdict(CPU_BF16), "flops_per_s": 10 ** 400},
    {**asdict(CPU_BF16), "bytes_per_s": 5e-324}, {**asdict(CPU_BF16), "device": 7},
])
def test_a_malformed_ceiling_in_environment_json_is_left_out(entry):
    have = Ceilings.of({"ceilings_mode": "measure", "ceilings": [entry]})
    assert have.measured == ()
    assert Ceilings.of({"ceilings": "nonsense"}).measured == ()
    assert Ceilings.of(None).mode == "table"  # a sweep from before ceilings: datasheets only


def test_the_fractions_of_the_ceilings_are_the_achieved_rates_over_them_with_their_intervals():
    # 2 * 1024^3 FLOPs in 10 ms [8, 12.5]: 214.7 GFLOP/s [171.8, 268.4]; against 200 GFLOP/s
    flops = 2 * 1024 ** 3
    row = {"platform": "cpu", "dtype": "bf16", "torch_threads": 2, "flops_per_call": flops,
           "bytes_per_call": 3 * 1024 * 1024 * 2, "timed_us_per_step": 10_000.0, "timed_us_per_step_low": 8_000.0,
           "timed_us_per_step_high": 12_500.0, "repeats": 3}
    derive(row, Ceilings.of(environment(CPU_BF16)))
    assert row["achieved_flops_frac"] == pytest.approx(flops / 0.010 / 200e9)
    assert row["achieved_flops_frac_low"] == pytest.approx(flops / 0.0125 / 200e9)
    assert row["achieved_flops_frac_high"] == pytest.approx(flops / 0.008 / 200e9)
    assert row["achieved_bandwidth_frac"] == pytest.approx(3 * 1024 * 1024 * 2 / 0.010 / 20e9)
    assert row["peak_source"] == "measured 2026-12-04"
    # the roofline's ridge is the measured one: 10 FLOP/byte; this matmul's intensity is 341
    assert row["arithmetic_intensity"] == pytest.approx(1024 / 3)


def test_the_ridge_has_the_range_its_measurement_leaves_and_a_point_at_it_is_neither_bound():
    have = Ceilings.of(environment(CPU_BF16))
    cpu = {"platform": "cpu", "dtype": "bf16", "torch_threads": 2}
    # matmul 190..200 GFLOP/s over copy 18 / triad 20 GB/s: 10 FLOP/byte [9.5, 11.1]
    assert have.ridge(cpu) == pytest.approx((10.0, 190 / 20, 200 / 18))
    h100 = {"platform": "cuda", "dtype": "bf16", "device_name": "NVIDIA H100 80GB HBM3"}
    assert have.ridge(h100) == pytest.approx((989e12 / 3350e9,) * 3)  # a datasheet's: exact
    assert have.ridge({**cpu, "dtype": "fp16"}) is None

    def regime(flops: float, moved: float) -> dict:
        # work 100x the overhead, decided: the work bounds it, the roofline says which ceiling
        row = {**cpu, "flops_per_call": flops, "bytes_per_call": moved, "timed_us_per_step": 1000.0,
               "work_host_ratio": 100.0, "work_host_ratio_low": 90.0, "work_host_ratio_high": 110.0, "repeats": 5}
        derive(row, have)
        return row

    clear = regime(12.0 * 1e6, 1e6)  # 12 FLOP/byte: past the ridge's range and the band
    assert (clear["regime"], clear["regime_at_ridge"], clear["regime_uncertain"]) == ("compute-bound", False, False)
    low = regime(8.0 * 1e6, 1e6)  # 8: below 9.5 / 1.05
    assert (low["regime"], low["regime_at_ridge"]) == ("memory-bound", False)
    lookup = regime(0.0, 1e6)  # no FLOPs at all (an embedding's lookup): memory, not compute (helper-44)
    assert (lookup["regime"], lookup["regime_at_ridge"]) == ("memory-bound", False)
    assert regime(12.0 * 1e6, 1e6)["regime"] == regime(float("nan"), 1e6)["regime"] == "compute-bound"  # unknown FLOPs: by time
    for intensity in (9.3, 10.0, 11.5):  # within the range, or within 5% of its ends
        at = regime(intensity * 1e6, 1e6)
        assert at["regime_at_ridge"] is True and at["regime_uncertain"] is False, intensity
        assert at["regime"] == ("compute-bound" if intensity >= 10 else "memory-bound")
        assert regime_doubt(at).startswith(f"arithmetic intensity {intensity:.3g} FLOP/byte is at the roofline's ridge, "
                                           "10 [9.5, 11.1]")
    overhead = {**cpu, "flops_per_call": 10e6, "bytes_per_call": 1e6, "timed_us_per_step": 10.0,
                "work_host_ratio": 0.1, "work_host_ratio_low": 0.08, "work_host_ratio_high": 0.12, "repeats": 5}
    derive(overhead, have)
    assert (overhead["regime"], overhead["regime_at_ridge"]) == ("overhead-bound", None)


def test_the_ridges_range_takes_the_wider_of_copy_and_triad_and_leaves_out_rates_far_from_their_ceiling():
    cpu = {"platform": "cpu", "dtype": "bf16", "torch_threads": 2}

    def ridge(**changed):
        return Ceilings.of(environment(replace(CPU_BF16, **changed))).ridge(cpu)

    # copy above triad: the range's low end is the slowest matmul over the faster copy
    assert ridge(copy_bytes_per_s=25e9) == pytest.approx((10.0, 190 / 25, 200 / 20))
    # untrusted: a copy rate or slowest matmul more than 2x from its ceiling (or above it) is left out
    for changed in ({"copy_bytes_per_s": 1e15}, {"copy_bytes_per_s": 1e6}, {"copy_bytes_per_s": -1.0},
                    {"copy_bytes_per_s": float("nan")}, {"copy_bytes_per_s": "fast"}):
        assert ridge(**changed) == pytest.approx((10.0, 190 / 20, 10.0)), changed
    for changed in ({"matmul_low": 1e6}, {"matmul_low": 300e9}, {"matmul_low": None}):
        assert ridge(**changed) == pytest.approx((10.0, 200 / 20, 200 / 18)), changed


def test_the_summary_table_marks_a_regime_uncertain_or_at_the_ridge():
    from analysis.report.page import _cell
    from profsweep.contract import GridPoint

    def cell(**flags):
        return _cell(GridPoint({"status": "ok", "regime": "memory-bound", **flags}), "regime")

    assert cell(regime_uncertain="False", regime_at_ridge="False") == "memory-bound"
    assert cell(regime_at_ridge="True") == "memory-bound <small class='noisy'>at the roofline's ridge</small>"
    assert cell(regime_uncertain=True, regime_at_ridge=True) == \
        "memory-bound <small class='noisy'>uncertain, at the roofline's ridge</small>"


def test_the_cache_keeps_one_entry_per_machine_dtype_torch_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv(ceilings.CACHE_DIR_ENV, str(tmp_path))
    mine = replace(CPU_BF16, machine=ceilings.machine("cpu"))
    assert ceilings.cached("cpu", "bf16", 2, "2.13.0") is None
    ceilings.remember(mine, 2)
    ceilings.remember(replace(mine, flops_per_s=1.0, torch_version="2.14.0"), 2)
    found = ceilings.cached("cpu", "bf16", 2, "2.13.0")
    assert found is not None and found.flops_per_s == 200e9 and found.source == "cached"
    assert ceilings.cached("cpu", "bf16", 2, "2.14.0").flops_per_s == 1.0
    assert ceilings.cached("cpu", "bf16", "auto", "2.13.0") is None
    assert ceilings.cached("cpu", "fp32", 2, "2.13.0") is None
    (tmp_path / ceilings.CACHE_FILE).write_text("{not json")
    assert ceilings.cached("cpu", "bf16", 2, "2.13.0") is None  # an unreadable cache: measured again


@pytest.mark.parametrize("args, said", [
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--dtype", "fp64"], "invalid choice: 'fp64'"),
])
def test_calibrate_refuses_a_device_or_dtype_it_does_not_know(args, said, capsys):
    with pytest.raises(SystemExit) as stopped:
        analysis_main(["calibrate", *args])
    assert stopped.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("threads", ["0", "many", "-2"])
def test_calibrate_refuses_a_thread_count_that_is_not_one(threads, capsys):
    assert analysis_main(["calibrate", "--threads", threads]) == 2
    assert f"--threads {threads!r} is not allowed: give a count >= 1, or auto" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be here")
def test_calibrating_cuda_without_a_gpu_says_so(capsys):
    assert analysis_main(["calibrate", "--device", "cuda", "--processes", "1"]) == 2
    assert "device cuda is not available here" in capsys.readouterr().err


@pytest.mark.slow
def test_calibrate_measures_the_cpu_and_caches_what_it_measured(tmp_path):
    done = subprocess.run([sys.executable, "-m", "analysis", "calibrate", "--device", "cpu", "--dtype", "fp32",
                           "--threads", "1", "--processes", "2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, ceilings.CACHE_DIR_ENV: str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "cpu fp32, 1 thread: matmul" in done.stdout and "triad" in done.stdout
    [entry] = json.loads((tmp_path / ceilings.CACHE_FILE).read_text()).values()
    found = Ceiling.from_dict(entry)
    assert found.threads == 1 and found.processes == 2 and found.dtype == "fp32"
    assert found.matmul_size >= ceilings.FIRST_SIZE and found.matmul_size & (found.matmul_size - 1) == 0
    assert 0 < found.matmul_low <= found.flops_per_s and found.bytes_per_s > 0 and found.copy_bytes_per_s > 0
    # STREAM's rule: each array at least four times the last-level cache
    assert found.array_bytes >= 4 * found.cache_bytes and found.array_bytes >= ceilings.MIN_ARRAY_BYTES["cpu"]


def test_run_ceilings_must_be_one_of_its_modes(sweep_dir):
    done = run_cli("-m", "size=64", "run.ceilings=guess", f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode != 0
    assert "run.ceilings='guess' is not allowed" in done.stderr + done.stdout
    assert "measure" in done.stderr + done.stdout and not (sweep_dir / "0_matmul_add_64_bf16_cold_eager").exists()


@pytest.mark.slow
def test_a_sweep_records_its_ceilings_and_draws_the_roofline(sweep_dir):
    # every dtype of the grid gets its ceiling, not only the first value of the axis
    done = run_cli("-m", "size=64,256", "dtype=bf16,fp32", "run.threads=1", f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stdout + done.stderr
    env = json.loads((sweep_dir / "environment.json").read_text())
    assert env["ceilings_mode"] == "measure"
    used = {c["dtype"]: c for c in env["ceilings"]}
    assert sorted(used) == ["bf16", "fp32"]
    for c in used.values():
        assert (c["device"], c["threads"], c["threads_setting"]) == ("cpu", 1, "1")
    summary = pd.read_csv(sweep_dir / "summary.csv")
    assert len(summary) == 4
    for _, row in summary.iterrows():
        ceiling = used[row["dtype"]]
        assert row["peak_flops_per_s"] == pytest.approx(ceiling["flops_per_s"])
        assert row["achieved_flops_frac"] == pytest.approx(row["achieved_flops_per_s"] / ceiling["flops_per_s"])
        assert row["peak_source"] == f"measured {ceiling['measured_at'][:10]}"
        # the roofline's side of the ridge (where the two measured ceilings meet) names a work-bound
        # point: matmul lies right of it on a quiet machine, left where the bandwidth measured low
        ridge = ceiling["flops_per_s"] / ceiling["bytes_per_s"]
        work_bound = "compute-bound" if row["arithmetic_intensity"] >= ridge else "memory-bound"
        assert row["regime"] in ("overhead-bound", work_bound), (row["arithmetic_intensity"], ridge)
    assert (sweep_dir / "plots" / "roofline.png").is_file()
    largest = summary[summary["dtype"] == "bf16"].sort_values("size").iloc[-1]  # the ceiling it is held against
    held = "memory bandwidth" if largest["regime"] == "memory-bound" else "bf16 matmul peak"
    assert f"of this machine's measured {held}" in done.stdout
    # a second sweep reads the cache: the same ceiling, not measured again
    again = run_cli("-m", "size=64", "run.threads=1", f"hydra.sweep.dir={sweep_dir}-2")
    assert again.returncode == 0 and "measuring this machine's" not in again.stdout
    assert json.loads((Path(f"{sweep_dir}-2") / "environment.json").read_text())["ceilings"][0]["source"] == "cached"


@pytest.mark.slow
def test_a_stop_while_the_ceilings_are_measured_ends_the_sweep_and_its_measuring(sweep_dir, tmp_path):
    import os
    import signal
    import time

    env = {**os.environ, ceilings.CACHE_DIR_ENV: str(tmp_path / "empty-cache")}
    sweep = subprocess.Popen([sys.executable, "experiments/run.py", "-m", "size=64,128", "run.threads=1",
                              f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    said = []
    for line in sweep.stdout:
        said.append(line)
        if line.startswith("measuring this machine's"):
            break
    time.sleep(0.5)  # the worker is measuring
    sweep.send_signal(signal.SIGTERM)
    out = "".join(said) + sweep.stdout.read()
    assert sweep.wait(timeout=120) == 130, out
    assert "interrupted" in out and "[1/" not in out  # no job started
    assert not list(sweep_dir.glob("0_*/metrics.json"))
    assert not (tmp_path / "empty-cache" / ceilings.CACHE_FILE).exists()  # nothing half-measured cached
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _measuring():
        time.sleep(0.2)
    assert not _measuring(), "a measuring process outlived the stop"


def _measuring() -> bool:
    found = subprocess.run(["pgrep", "-f", "profsweep.ceilings cpu"], capture_output=True, text=True)
    return bool(found.stdout.strip())


@pytest.mark.slow
def test_ceilings_off_and_table_measure_nothing(sweep_dir):
    done = run_cli("-m", "size=64", "run.ceilings=off", f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0 and "measuring" not in done.stdout
    assert json.loads((sweep_dir / "environment.json").read_text())["ceilings"] == []
    summary = pd.read_csv(sweep_dir / "summary.csv")
    assert summary["achieved_flops_frac"].isna().all() and not (sweep_dir / "plots" / "roofline.png").exists()
    assert not math.isnan(summary.loc[0, "achieved_flops_per_s"])


def test_a_cached_ceiling_measured_long_ago_or_on_a_busy_machine_is_said_to_be_stale():
    import datetime as dt

    now = dt.datetime(2026, 12, 6, tzinfo=dt.timezone.utc)  # CPU_BF16 was measured 2026-12-04
    assert CPU_BF16.stale(now) == ""
    assert replace(CPU_BF16, other_cpus=1.2, cpus=2).stale(now) == "measured while other processes used 1.2 of 2 CPUs"
    assert CPU_BF16.stale(now + dt.timedelta(days=40)) == "measured 41 days ago"  # 41 days and 7 hours
    assert replace(CPU_BF16, measured_at="yesterday").stale(now) == "its measuring date cannot be read"


def test_a_worker_whose_parent_is_gone_already_measures_nothing():
    """The worker is told its parent's pid: one whose parent died before it could ask to die with
    it (a sweep killed while the worker imported torch) left it measuring for 11 s, holding the
    CPU's lock (helper-38); now it ends at once, before torch's import."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "profsweep.ceilings", "cpu", "bf16", "1", "1", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)  # pid 1: not its parent
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert "| torch" not in done.stderr and "| profsweep" in done.stderr  # stopped before torch's import
