"""`python -m analysis compare BASE NEW`: pairing by grid point, verdicts from the repeats' samples,
false discoveries controlled across the grid, the op diff, the CI gate and the refusals. Verdicts
are tested on hand-made job folders whose step durations are chosen here; nothing asserts a
timing of this machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis.__main__ import main
from analysis.compare import control_discoveries, count_diff, verdict
from tests.conftest import job_dirs, run_cli

# --- hand-made job folders ---------------------------------------------------------------------------


def hand_made_job(folder: Path, num: int, step_us: list[float], *, size: int = 8, ops: tuple[str, ...] = ("aten::mm",),
                  repeat: int = 1, **settings) -> Path:
    """One finished CPU job whose trace has one ProfilerStep# of each duration, each running `ops`;
    the `repeat`-th of its grid point (the jobs of one point share a config_hash)."""
    job = folder / f"{num}_matmul_add_{size}_bf16_cold_eager{f'_r{repeat}' if repeat > 1 else ''}"
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
        "self_cpu_total_us": float(sum(step_us)), "trace_file": "t.json", "table_file": "t.txt", "repeat": repeat,
        "config_hash": f"size={size} {json.dumps(settings, sort_keys=True)}", "schema_version": 1, **settings,
    }
    (job / "metrics.json").write_text(json.dumps(metrics))
    return job


def hand_made_point(folder: Path, num: int, repeats: list[list[float]], **kwargs) -> list[Path]:
    """One grid point measured in len(repeats) jobs, each with its steps' durations."""
    return [hand_made_job(folder, num + k * 100, steps, repeat=k + 1, **kwargs) for k, steps in enumerate(repeats)]


def processes(center: float, n: int = 3, steps: int = 20, between: float = 0.02,
              within: float = 0.1) -> list[list[float]]:
    """n repeats whose step medians lie at center × (1, 1 - between, 1 + between, ...), their steps
    spread ± within."""
    factors = [1 + between * ((k + 1) // 2) * (-1) ** k for k in range(n)]
    return [jitter(center * f, steps, within) for f in factors]


def jitter(center: float, n: int, spread: float = 0.1) -> list[float]:
    """n samples spread evenly over center ± spread, in a shuffled order."""
    return [center * (1 - spread + 2 * spread * ((i * 7) % n) / max(n - 1, 1)) for i in range(n)]


def compare(*args: object, capsys) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- the verdict rule ----------------------------------------------------------------------------------


def test_twice_as_slow_over_repeats_is_slower_and_the_gate_names_the_pair(tmp_path, capsys):
    hand_made_point(tmp_path / "base", 0, processes(100))
    hand_made_point(tmp_path / "new", 0, processes(200))
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", "--fail-if-slower", "1.1", capsys=capsys)
    assert code == 1
    assert "slower: 0_matmul_add_8_bf16_cold_eager -> 0_matmul_add_8_bf16_cold_eager: 2.000x" in out
    assert "Benjamini-Hochberg at 0.05 over 1 pairs" in out
    row = pd.read_csv(tmp_path / "new" / "compare" / "compare.csv").iloc[0]
    assert row["verdict"] == "slower" and row["step_ratio"] == pytest.approx(2.0)
    assert row["interval_low"] > 1.05 and row["repeats_base"] == row["repeats_new"] == 3
    # the other way round it is faster, and the gate lets it through
    code, _, _ = compare(tmp_path / "new", tmp_path / "base", "--out", tmp_path / "back", "--fail-if-slower", "1.1",
                         capsys=capsys)
    assert code == 0
    assert pd.read_csv(tmp_path / "back" / "compare.csv").loc[0, "verdict"] == "faster"


def test_a_gate_above_the_ratio_passes_a_slower_pair(tmp_path, capsys):
    hand_made_point(tmp_path / "base", 0, processes(100))
    hand_made_point(tmp_path / "new", 0, processes(120))
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", "--fail-if-slower", "1.5", capsys=capsys)
    assert code == 0 and "1 slower" in out


def test_one_repeat_per_side_is_inconclusive_and_says_what_to_do(tmp_path, capsys):
    hand_made_job(tmp_path / "base", 0, jitter(100, 20))
    hand_made_job(tmp_path / "new", 0, jitter(300, 20))  # 3x slower, but one process each
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", "--fail-if-slower", "1.1", capsys=capsys)
    assert code == 0
    assert "inconclusive matmul_add size=8 bf16 cold eager: 3.000x" in out and "run.repeats=3" in out
    row = pd.read_csv(tmp_path / "new" / "compare" / "compare.csv").iloc[0]
    assert row["verdict"] == "inconclusive" and "1 repeat per side" in row["verdict_why"]
    html = (tmp_path / "new" / "compare" / "compare.html").read_text()
    assert "one repeat on a side" in html and "run.repeats=3" in html


def test_a_side_measured_on_a_loaded_machine_gets_no_verdict(tmp_path, capsys):
    hand_made_point(tmp_path / "base", 0, processes(100))
    # twice as slow, every repeat alike, while other processes kept 1.8 of 2 CPUs busy
    hand_made_point(tmp_path / "new", 0, processes(200), other_cpus=1.8, cpu_count=2, torch_threads=2)
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", "--fail-if-slower", "1.1", capsys=capsys)
    assert code == 0
    row = pd.read_csv(tmp_path / "new" / "compare" / "compare.csv").iloc[0]
    assert row["verdict"] == "inconclusive"
    assert "NEW noisy: other processes used 1.8 CPUs" in row["verdict_why"] and "quiet machine" in row["verdict_why"]


def test_verdict_rule_on_repeats():
    assert verdict([[100.0] * 3], [[100.0] * 3]).verdict == "same"  # identical: same, however few
    assert verdict(processes(100), [g[::-1] for g in processes(100)[::-1]]).verdict == "same"  # reordered
    tight = processes(100, n=5, between=0.005, within=0.01)
    assert verdict(tight, [[v * 1.01 for v in g] for g in tight]).verdict == "same"  # 1% is within the band
    spread = processes(100, between=0.3)  # processes 30% apart: three of them cannot tell 10%
    assert verdict(spread, [[v * 1.1 for v in g] for g in spread[::-1]]).verdict == "inconclusive"
    assert verdict(processes(100, n=1), processes(300, n=1)).verdict == "inconclusive"
    assert "run.repeats=3" in verdict(processes(100, n=1), processes(300, n=1)).why
    assert verdict(processes(100), processes(300)).verdict == "slower"
    assert verdict([], [[1.0]]).verdict == "inconclusive"
    # seeded: the same samples give the same interval
    assert verdict(spread, spread[::-1]) == verdict(spread, spread[::-1])


def test_false_discoveries_are_controlled_across_the_pairs():
    def pair(verdict: str, p: float | None) -> dict:
        return {"verdict": verdict, "p_value": p, "verdict_why": "95% interval"}

    # Benjamini-Hochberg by hand: .04 > 1/3 * .05, .5 > 2/3 * .05, .6 > .05: no discovery
    pairs = [pair("slower", 0.04), pair("same", 0.5), pair("same", 0.6)]
    control_discoveries(pairs, 0.05)
    assert [p["verdict"] for p in pairs] == ["inconclusive", "same", "same"]
    assert "not a discovery at a false discovery rate of 0.05 over 3 pairs" in pairs[0]["verdict_why"]
    # .01 <= 1/3 * .05: a discovery; .04 <= 2/3 * .05? no; untested pairs do not count
    pairs = [pair("slower", 0.01), pair("faster", 0.04), pair("inconclusive", None), pair("same", 0.9)]
    control_discoveries(pairs, 0.05)
    assert [p["verdict"] for p in pairs] == ["slower", "inconclusive", "inconclusive", "same"]


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


def test_a_sweep_from_before_threads_were_recorded_pairs_with_one_at_the_default(tmp_path, capsys):
    hand_made_point(tmp_path / "base", 0, processes(100))  # no `threads` in its records
    hand_made_point(tmp_path / "new", 0, processes(100), threads="auto")
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", capsys=capsys)
    assert code == 0 and "1 pairs" in out


@pytest.mark.parametrize("hostile", [5, "123", [None, "x", float("inf")], {"a": 1}])
def test_hostile_timed_samples_never_crash_the_comparison(tmp_path, capsys, hostile):
    hand_made_point(tmp_path / "base", 0, processes(100), timed_us_per_step=20.0, timed_samples_us=hostile)
    hand_made_point(tmp_path / "new", 0, processes(100), timed_us_per_step=20.0, timed_samples_us=hostile)
    code, out, _ = compare(tmp_path / "base", tmp_path / "new", capsys=capsys)
    assert code == 0 and "1 pairs" in out


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
    assert code == 0 and "2 pairs (0 slower, 0 faster, 2 same, 0 inconclusive)" in out
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
