"""`python -m analysis compare BASE NEW`: pairing by grid point, verdicts from per-step samples,
the op diff, the CI gate and the refusals. Verdicts are tested on hand-made job folders whose
step durations are chosen here; nothing asserts a timing of this machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.compare import MIN_STEPS, count_diff, verdict
from tests.conftest import job_dirs, run_cli

# --- hand-made job folders ---------------------------------------------------------------------------


def hand_made_job(folder: Path, num: int, step_us: list[float], *, size: int = 8, ops: tuple[str, ...] = ("aten::mm",),
                  **settings) -> Path:
    """One finished CPU job whose trace has one ProfilerStep# of each duration, each running `ops`."""
    job = folder / f"{num}_matmul_add_{size}_bf16_cold_eager"
    job.mkdir(parents=True)
    events, ts = [], 0.0
    for i, dur in enumerate(step_us, 1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": ts, "dur": dur})
        for k, op in enumerate(ops):
            events.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1,
                           "ts": ts + 1 + k, "dur": 0.5})
        ts += dur + 10
    (job / "t.json").write_text(json.dumps({"traceEvents": events}))
    metrics = {
        "job": job.name, "workload": "matmul_add", "size": size, "dtype": "bf16", "compile": False,
        "warmup": False, "device": "cpu", "status": "ok", "error": None, "steps": len(step_us),
        "self_cpu_total_us": float(sum(step_us)), "trace_file": "t.json", "table_file": "t.txt", **settings,
    }
    (job / "metrics.json").write_text(json.dumps(metrics))
    return job


def jitter(center: float, n: int, spread: float = 0.1) -> list[float]:
    """n samples spread evenly over center ± spread, in a shuffled order."""
    return [center * (1 - spread + 2 * spread * ((i * 7) % n) / max(n - 1, 1)) for i in range(n)]


def compare(*args: object, capsys) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- the verdict rule ----------------------------------------------------------------------------------


def test_twice_as_slow_over_many_steps_is_slower_and_the_gate_names_the_pair(tmp_path, capsys):
    hand_made_job(tmp_path / "base", 0, jitter(100, 20))
    hand_made_job(tmp_path / "new", 0, jitter(200, 20))
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", "--fail-if-slower", "1.1", capsys=capsys)
    assert code == 1
    assert "slower: 0_matmul_add_8_bf16_cold_eager -> 0_matmul_add_8_bf16_cold_eager: 2.000x" in out
    row = pd.read_csv(tmp_path / "new" / "compare" / "compare.csv").iloc[0]
    assert row["verdict"] == "slower" and row["step_ratio"] == pytest.approx(2.0)
    assert row["interval_low"] > 1.05
    # the other way round it is faster, and the gate lets it through
    code, _, _ = compare(tmp_path / "new", tmp_path / "base", "--out", tmp_path / "back", "--fail-if-slower", "1.1",
                         capsys=capsys)
    assert code == 0
    assert pd.read_csv(tmp_path / "back" / "compare.csv").loc[0, "verdict"] == "faster"


def test_a_gate_above_the_ratio_passes_a_slower_pair(tmp_path, capsys):
    hand_made_job(tmp_path / "base", 0, jitter(100, 20))
    hand_made_job(tmp_path / "new", 0, jitter(120, 20))
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", "--fail-if-slower", "1.5", capsys=capsys)
    assert code == 0 and "1 slower" in out


def test_three_overlapping_steps_are_too_noisy_and_say_so(tmp_path, capsys):
    hand_made_job(tmp_path / "base", 0, [100, 150, 120])
    hand_made_job(tmp_path / "new", 0, [130, 110, 140])
    code, _, _ = compare(tmp_path / "base", tmp_path / "new", "--fail-if-slower", "1.1", capsys=capsys)
    assert code == 0
    row = pd.read_csv(tmp_path / "new" / "compare" / "compare.csv").iloc[0]
    assert row["verdict"] == "too noisy" and "too few steps" in row["verdict_why"]
    html = (tmp_path / "new" / "compare" / "compare.html").read_text()
    assert "rest on too few steps" in html and "profiler.active=20" in html


def test_verdict_rule_on_samples():
    assert verdict([100.0] * 3, [100.0] * 3).verdict == "same"  # identical: same, however few
    assert verdict(jitter(100, 20), jitter(100, 20)[::-1]).verdict == "same"  # the same samples, reordered
    assert verdict(jitter(100, 20, 0.02), jitter(101, 20, 0.02)).verdict == "same"  # 1% is within the band
    assert verdict(jitter(100, 20), jitter(101, 20)).verdict == "too noisy"  # ±10%: 20 steps cannot tell
    wide = [50, 400, 90, 300, 120, 60, 250, 80, 500, 70]
    assert verdict(wide, [v * 1.1 for v in wide[::-1]]).verdict == "too noisy"
    assert verdict(jitter(100, MIN_STEPS - 1), jitter(300, MIN_STEPS - 1)).verdict == "too noisy"
    assert verdict(jitter(100, MIN_STEPS), jitter(300, MIN_STEPS)).verdict == "slower"
    assert verdict([], [1.0]).verdict == "too noisy"
    # seeded: the same samples give the same interval
    assert verdict(wide, wide[::-1]) == verdict(wide, wide[::-1])


def test_count_diff_is_an_outer_join_of_calls_per_step():
    rows = count_diff({"aten::mm": 6, "aten::add": 3, "aten::relu": 3}, {"aten::mm": 3, "aten::addmm": 6,
                      "aten::relu": 6}, steps_base=3, steps_new=6)
    assert {r["name"]: r["change"] for r in rows} == {
        "aten::add": "vanished", "aten::addmm": "appeared", "aten::mm": "changed count"}  # relu: 1 per step both
    assert next(r for r in rows if r["name"] == "aten::mm")["new_per_step"] == 0.5
    # one compiled graph under two hashes is the same call
    assert count_diff({"## Call CompiledFxGraph abc123 ##": 3}, {"## Call CompiledFxGraph f00d ##": 3}, 3, 3) == []


# --- pairing ---------------------------------------------------------------------------------------------


def test_pairs_by_grid_point_not_by_folder_name_and_lists_the_unmatched(tmp_path, capsys):
    base, new = tmp_path / "base", tmp_path / "new"
    hand_made_job(base, 0, jitter(100, 10), size=8)
    hand_made_job(base, 1, jitter(100, 10), size=16)
    hand_made_job(base, 2, jitter(100, 10), size=32, job_timeout_s=60)
    # NEW numbers its jobs differently, has a size BASE lacks and another timeout
    hand_made_job(new, 5, jitter(100, 10), size=32, job_timeout_s=600)
    hand_made_job(new, 7, jitter(100, 10), size=8)
    hand_made_job(new, 9, jitter(100, 10), size=64)
    code, out, _ = compare(base, new, capsys=capsys)
    assert code == 0
    frame = pd.read_csv(new / "compare" / "compare.csv")
    assert dict(zip(frame["size"], frame["base_job"].str.split("_").str[0])) == {8: "0", 32: "2"}
    assert "without a partner in BASE: 1_matmul_add_16_bf16_cold_eager" in out
    assert "without a partner in NEW: 9_matmul_add_64_bf16_cold_eager" in out
    html = (new / "compare" / "compare.html").read_text()
    assert "Jobs of BASE without a partner" in html and "1_matmul_add_16_bf16_cold_eager" in html


def test_more_profiled_steps_still_pair(tmp_path, capsys):
    hand_made_job(tmp_path / "base", 0, jitter(100, 3), profiler_active=3)
    hand_made_job(tmp_path / "new", 0, jitter(100, 20), profiler_active=20)
    assert compare(tmp_path / "base", tmp_path / "new", capsys=capsys)[0] == 0


def test_ignore_pairs_across_a_key_and_refuses_an_unknown_one(tmp_path, capsys):
    hand_made_job(tmp_path / "base", 0, jitter(100, 10), workload_hidden=512)
    hand_made_job(tmp_path / "new", 0, jitter(100, 10), workload_hidden=1024)
    code, _, err = compare(tmp_path / "base", tmp_path / "new", capsys=capsys)
    assert code == 2 and "nothing in common" in err and "workload_hidden" in err
    assert not (tmp_path / "new" / "compare").exists()
    assert compare(tmp_path / "base", tmp_path / "new", "--ignore", "workload.hidden", capsys=capsys)[0] == 0
    code, _, err = compare(tmp_path / "base", tmp_path / "new", "--out", tmp_path / "x", "--ignore", "colour",
                           capsys=capsys)
    assert code == 2 and "--ignore 'colour'" in err and "size" in err
    assert not (tmp_path / "x").exists()


def test_bad_folders_are_refused_with_exit_2_and_nothing_written(tmp_path, capsys):
    hand_made_job(tmp_path / "sweep", 0, jitter(100, 10))
    (tmp_path / "empty").mkdir()
    code, _, err = compare(tmp_path / "empty", tmp_path / "sweep", capsys=capsys)
    assert code == 2 and f"{tmp_path / 'empty'}: not a sweep or a run" in err
    code, _, err = compare(tmp_path / "sweep", tmp_path / "missing", capsys=capsys)
    assert code == 2 and "no such folder" in err
    code, _, err = compare(tmp_path / "sweep", tmp_path / "sweep", "--fail-if-slower", "0.9", capsys=capsys)
    assert code == 2 and "--fail-if-slower 0.9" in err
    assert not (tmp_path / "sweep" / "compare").exists()
    # and the sweep analysis of a folder with no jobs
    assert main([str(tmp_path / "empty")]) == 2
    assert "not a sweep or a run" in capsys.readouterr().err
    assert list((tmp_path / "empty").iterdir()) == []


def test_two_traces_give_the_op_diff(tmp_path, capsys):
    a = hand_made_job(tmp_path / "a", 0, [100, 100], ops=("aten::mm", "aten::add"))
    b = hand_made_job(tmp_path / "b", 0, [100, 100], ops=("aten::addmm",))
    code, out, _ = compare(a / "t.json", b / "t.json", capsys=capsys)
    assert code == 0
    assert "op vanished" in out and "aten::add" in out and "op appeared" in out and "aten::addmm" in out


# --- real CPU sweeps ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eager_and_compiled(tmp_path_factory) -> tuple[Path, Path]:
    """One quick sweep, eager and compiled, split into an eager and a compiled folder."""
    root = tmp_path_factory.mktemp("compare")
    done = run_cli("-m", "size=16,64", "compile=false,true", "warmup=true", "run=fast", "profiler.active=5",
                   f"hydra.sweep.dir={root / 'sweep'}")
    assert done.returncode == 0, done.stdout + done.stderr
    eager, compiled = root / "eager", root / "compiled"
    for job in job_dirs(root / "sweep"):
        shutil.copytree(job, (compiled if job.name.endswith("_compile") else eager) / job.name)
    shutil.copy(root / "sweep" / "environment.json", eager)
    return eager, compiled


@pytest.mark.slow
def test_a_sweep_compared_with_itself_is_the_same_everywhere(eager_and_compiled, tmp_path, capsys):
    eager, _ = eager_and_compiled
    code, out, _ = compare(eager, eager, "--out", tmp_path, "--fail-if-slower", "1.0", capsys=capsys)
    assert code == 0 and "2 pairs (0 slower, 0 faster, 2 same, 0 too noisy)" in out
    frame = pd.read_csv(tmp_path / "compare.csv")
    assert (frame["verdict"] == "same").all()
    assert (frame["host_us_per_step_ratio"] == 1.0).all() and (frame["step_ratio"] == 1.0).all()
    assert (frame["ops_changed"] == 0).all() and (frame["kernels_changed"] == 0).all()
    assert len(pd.read_csv(tmp_path / "ops_diff.csv")) == 0
    assert "Nothing recorded differs" in (tmp_path / "compare.html").read_text()
    assert (tmp_path / "plots" / "ratio.png").stat().st_size > 0


@pytest.mark.slow
def test_eager_against_compiled_shows_the_fused_addmm(eager_and_compiled, capsys):
    eager, compiled = eager_and_compiled
    code, _, err = compare(eager, compiled, capsys=capsys)
    assert code == 2 and "nothing in common" in err and "--ignore" in err
    code, out, _ = compare(eager, compiled, "--ignore", "compile", capsys=capsys)
    assert code == 0 and "2 pairs" in out
    frame = pd.read_csv(compiled / "compare" / "compare.csv")
    assert sorted(frame["size"]) == [16, 64]
    assert frame["first_call_ms_ratio"].notna().all()
    ops = pd.read_csv(compiled / "compare" / "ops_diff.csv")
    ops = ops[ops["what"] == "op"]
    for pair, changes in ops.groupby("new_job"):
        change = dict(zip(changes["name"], changes["change"]))
        assert change.get("aten::mm") == "vanished" and change.get("aten::add") == "vanished", pair
        assert change.get("aten::addmm") == "appeared", pair
    html = (compiled / "compare" / "compare.html").read_text()
    assert "aten::addmm" in html and "environment" in html
