"""Repeats as processes: the settings, the interleaved rounds and their resume, one summary row per
grid point with intervals, noise flags from recorded machine readings and steps, adaptive
repeats, and claims and expectations that can say "inconclusive". No timing of this machine is
asserted: the sweeps here check counts, names, orders and columns."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from analysis import points as grid_points
from profsweep.contract import GridPoint, Job
from analysis.report.claims import _Data, _more
from analysis.report.expect import check, parse
from experiments import records
from profsweep import machine
from experiments.config import ConfigError, JobConfig, RunConfig, config_from_dict, config_to_dict
from hydra_plugins.profsweep_grid import grid
from hydra_plugins.profsweep_grid.grid_sweeper import Repeats
from tests.conftest import job_dirs, read_metrics, run_cli

# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value, message", [
    ("repeats", 0, "run.repeats=0 is not allowed"), ("repeats", "many", "or auto"), ("repeats", True, "run.repeats"),
    ("threads", 0, "run.threads=0 is not allowed"), ("threads", "all", "or auto"),
    ("threads", 100_000, "run.threads=100000 is not allowed: give a thread count from 1 to 1024"),
    ("precision", 0, "between 0 and 1"), ("precision", 1.5, "between 0 and 1"),
    ("max_repeats", 1, "at least 2"), ("repeat", 0, "run.repeat"),
])
def test_bad_run_settings_are_refused_by_name(key, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        RunConfig(**{key: value})


def test_repeats_and_threads_take_counts_or_auto():
    assert RunConfig(repeats="auto", threads=4).repeats == "auto"
    assert RunConfig(repeats=5, threads="auto").threads == "auto"


def test_config_hash_ignores_the_repeat_and_how_many_but_not_the_threads():
    base = JobConfig()
    same = [JobConfig(run=RunConfig(repeat=2)), JobConfig(run=RunConfig(repeats=7)),
            JobConfig(run=RunConfig(repeats="auto", precision=0.02, max_repeats=20))]
    assert {records.config_hash(c) for c in same} == {records.config_hash(base)}
    assert records.config_hash(JobConfig(run=RunConfig(threads=1))) != records.config_hash(base)
    # and the round trip through job_config.json keeps them
    assert config_from_dict(json.loads(json.dumps(config_to_dict(same[2])))).run.repeats == "auto"


def test_rounds_interleave_the_grid_in_a_recorded_order():
    first, how = grid.round_order(1, range(5))
    assert list(first) == [0, 1, 2, 3, 4] and how == "grid order"
    second, how = grid.round_order(2, range(5))
    assert list(second) == [4, 3, 2, 1, 0] and how == "reversed"
    third, how = grid.round_order(3, range(5))
    assert sorted(third) == [0, 1, 2, 3, 4] and how == "shuffled (seed 3)"
    assert grid.round_order(3, range(5))[0] == third  # the same order on a rerun
    assert grid.first_rounds("auto") == 2 and grid.first_rounds(4) == 4


def test_adaptive_repeats_go_on_only_where_the_interval_is_too_wide(tmp_path):
    def record(samples):
        return {"status": "ok", "timed_samples_us": samples}

    precise = [record([100.0, 100.5, 99.5] * 10), record([100.2, 100.4, 99.8] * 10)]
    loose = [record([100.0, 101.0] * 10), record([160.0, 161.0] * 10)]  # processes 60% apart
    failed = [{"status": "failed"}, None]
    def added(plan, found):
        for point, records in found.items():
            for r in records:
                plan.add(point, r)
        return plan

    found = {0: precise, 1: loose, 2: failed}
    plan = added(Repeats("auto", 0.05, 4, tmp_path), found)
    assert list(plan.points(1, 3)) == list(plan.points(2, 3)) == [0, 1, 2]
    assert plan.points(3, 3) == [1]  # never a point without an ok repeat
    assert plan.points(5, 3) == []  # run.max_repeats=4
    # one of the first two rounds failed: one process says nothing of the others, so go on
    half = added(Repeats("auto", 0.05, 4, tmp_path), {0: [record([100.0] * 10), {"status": "failed"}]})
    assert half.points(3, 1) == [0]
    fixed = added(Repeats(3, 0.05, 10, tmp_path), found)
    assert list(fixed.points(3, 3)) == [0, 1, 2] and fixed.points(4, 3) == []


def test_adaptive_repeats_go_on_where_compile_against_eager_is_undecided(tmp_path):
    """auto stops by the one rule the report judges compile against eager with: a pair of precise
    points whose ratio the rule leaves inconclusive gets more processes, up to those that would
    decide it; a decided pair, a pair on the band's edge and an unpaired point get none."""
    from profsweep.decide import decide_test
    from profsweep.stats import ratio_test

    axes = grid.axes(["size=64,1024,4096", "compile=true,false"])
    pairs = grid.Pairs(axes)
    # job i: size i // 2, compile true at even i: (eager, compiled) of each size
    assert [pairs.of(g) for g in range(6)] == [(1, 0), (1, 0), (3, 2), (3, 2), (5, 4), (5, 4)]
    assert not grid.Pairs(grid.axes(["size=64,1024", "compile=false"]))
    assert grid.Pairs(grid.axes(["compile=false,true", "size=1,2,3"])).of(4) == (1, 4)

    def process(median, spread=0.001):  # one process's un-profiled steps around its median
        return {"status": "ok", "timed_samples_us": [median * (1 + spread * k) for k in (-1, 0, 1)] * 5}

    def plan(medians):
        p = Repeats("auto", 0.025, 10, tmp_path, pairs)
        for point, values in medians.items():
            for m in values:
                p.add(point, process(m))
        return p

    same = [100.0, 100.1, 100.05]  # three processes 0.1% apart: precise (±2.5%)
    edge = {0: [103.5, 104.5, 104.0], 1: same}  # compiled 1.04x, precise, but inconclusive at three a side
    medians = {**edge, 2: [200.0, 201.0, 200.5], 3: same, 4: [100.3, 100.2, 100.4], 5: same}
    p = plan(medians)
    d = decide_test(ratio_test([process(m)["timed_samples_us"] for m in edge[1]],
                               [process(m)["timed_samples_us"] for m in edge[0]]), 3)
    assert not d.decided and 3 < d.processes_needed <= 10  # the rule's own verdict on pair (1, 0)
    assert p.points(4, 6) == [0, 1]  # 2.0x and 1.00x are decided: only the undecided pair goes on
    assert p.why == {"compile against eager undecided": [0, 1]}
    # once both sides have the processes the rule asked for, no more
    enough = plan({0: edge[0] + [104.0] * (d.processes_needed - 3), 1: same + [100.0] * (d.processes_needed - 3)})
    assert enough.points(4, 2) == []
    # on the band's edge (more than max_repeats would be needed) and without pairs: nothing added
    assert plan({0: [105.0, 105.1, 105.05], 1: same}).points(4, 2) == []
    unpaired = Repeats("auto", 0.025, 10, tmp_path)
    for point, values in edge.items():
        for m in values:
            unpaired.add(point, process(m))
    assert unpaired.points(4, 2) == []
    # as the report judges it: where both points' processes carry their rounds, in pairs by round.
    # Compiled 1.2x eager in every round, the rounds' machine 1.0, 1.1, 0.95x as fast: unpaired that
    # is undecided and asks for 7 processes, paired it is decided and none are added.
    rounds = Repeats("auto", 0.5, 10, tmp_path, pairs)
    speeds = (1.0, 1.1, 0.95)
    for r, f in enumerate(speeds, 1):
        rounds.add(1, {**process(100.0 * f), "repeat": r})
        rounds.add(0, {**process(120.0 * f), "repeat": r})
    unpaired = decide_test(ratio_test([process(100.0 * f)["timed_samples_us"] for f in speeds],
                                      [process(120.0 * f)["timed_samples_us"] for f in speeds]), 3)
    assert not unpaired.decided and 3 < unpaired.processes_needed <= 10
    assert rounds.points(4, 2) == []
    # a round one side lost (its job failed): the rounds differ, so the pair is judged unpaired, as
    # the report judges it (grid_points.rounds_paired), and every process counts
    lost = Repeats("auto", 0.5, 10, tmp_path, pairs)
    for r, f in enumerate(speeds, 1):
        lost.add(1, {**process(100.0 * f), "repeat": r})
        lost.add(0, {**process(120.0 * f), "repeat": r} if r < 3 else {"status": "failed", "repeat": r})
    assert lost._processes_needed(1, 0) == decide_test(ratio_test(
        [process(100.0 * f)["timed_samples_us"] for f in speeds],
        [process(120.0 * f)["timed_samples_us"] for f in speeds[:2]]), 2).processes_needed
    # where every compiled process timed the step eager beside its own, as the report judges it:
    # one ratio per compiled process. Its processes' own steps 0.9-1.4x eager's (undecided, by round
    # too); side by side 1.20x in each (± 0.5%): decided, none needed. Side by side 1.00-1.04x
    # (processes 1% apart on their own): precise but undecided at three, it gets the processes that
    # would decide it by that rule.
    from profsweep.stats import paired_ratio_test

    def compiled(median, eager, step, r):
        return {**process(median), "repeat": r, "side_by_side_eager_us": eager, "side_by_side_compiled_us": step}

    for own, ratios, decided in (((0.9, 1.4, 1.1), (1.2, 1.206, 1.194), True),
                                 ((1.0, 1.01, 0.99), (1.0, 1.04, 1.02), False)):
        side = Repeats("auto", 0.5, 10, tmp_path, pairs)
        for r, (f, ratio) in enumerate(zip(own, ratios), 1):
            side.add(1, {**process(100.0), "repeat": r})
            side.add(0, compiled(100.0 * f, 50.0 * r, 50.0 * r * ratio, r))
        rule = decide_test(paired_ratio_test([([50.0 * r], [50.0 * r * x]) for r, x in enumerate(ratios, 1)]), 3)
        assert rule.decided == decided and side._processes_needed(1, 0) == (None if decided else rule.processes_needed)
        if not decided:
            assert 3 < rule.processes_needed <= 10
            assert side.points(4, 2) == [0, 1] and side.why == {"compile against eager undecided": [0, 1]}
    # a point added for its own reason brings its pair's other point into the round
    wide = Repeats("auto", 0.025, 10, tmp_path, pairs)
    for point, values in {0: [100.0, 130.0, 80.0], 1: same}.items():
        for m in values:
            wide.add(point, process(m))
    assert wide.points(4, 2) == [0, 1]
    assert wide.why == {"interval wider than the precision": [0], "its compile pair's other point runs in this round": [1]}
    # the round's entry in sweep.json says why its points were added
    p.record_round(4, "shuffled (seed 4)", [0, 1], 6, 18)
    entry = json.loads((tmp_path / "sweep.json").read_text())["rounds"][-1]
    assert entry["why"] == {"compile against eager undecided": [0, 1]} and entry["points"] == [0, 1]


def test_adaptive_repeats_go_on_where_a_series_crossover_is_not_located(tmp_path):
    """auto stops by the report's model too (profsweep.fit): a series whose line fits but whose
    crossover's interval spans more than CROSSOVER_SPAN gets more rounds for all its points, up to
    the processes a grid point that would locate it; none where that is beyond max_repeats, where
    the model does not fit, or where size is not swept."""
    from profsweep.fit import CROSSOVER_SPAN, fit_series
    from profsweep.stats import estimate

    series = grid.Series(grid.axes(["size=16,64,256"]))
    assert [series.of(g) for g in range(3)] == [(0, 1, 2)] * 3
    assert [grid.Series(grid.axes(["size=16,64", "compile=true,false"])).of(g) for g in range(4)] == \
        [(0, 2), (1, 3), (0, 2), (1, 3)]
    assert not grid.Series(grid.axes(["size=64", "compile=true,false"]))

    sizes, floor, per_flop = (16, 64, 256), 20.0, 20.0 / (2 * 64**3)  # the work costs the floor at 64

    def process(median):
        return [median * (1 + 0.001 * k) for k in (-1, 0, 1)] * 5

    def plan(spreads, max_repeats=10, bend=1.0):
        p = Repeats("auto", 10.0, max_repeats, tmp_path, None, series)  # precision 10: every interval is narrow enough
        for g, n in enumerate(sizes):
            step = (floor + per_flop * 2 * n**3) * (bend if n == 64 else 1.0)
            for s in spreads:
                p.add(g, {"status": "ok", "timed_samples_us": process(step * s), "size": n,
                          "flops_per_call": 2 * n**3, "bytes_per_call": 6 * n * n})
        return p

    spreads = [1.0, 1.4, 0.7]  # processes 2x apart
    found = [estimate([process((floor + per_flop * 2 * n**3) * s) for s in spreads]) for n in sizes]
    fit = fit_series(sizes, [2 * n**3 for n in sizes], [e.value for e in found], [e.low for e in found],
                     [e.high for e in found], [3] * 3)
    assert fit.fits and fit.crossover_size_high > CROSSOVER_SPAN * fit.crossover_size_low  # the report's own fit
    assert 3 < fit.crossover_processes_needed <= 10
    p = plan(spreads)
    assert p.points(3, 3) == [0, 1, 2]
    assert p.why == {"the series' crossover or regime undecided": [0, 1, 2]}
    assert plan(spreads, max_repeats=3).points(3, 3) == []  # more than max_repeats would be needed: none
    assert plan([1.0, 1.05, 0.97]).points(3, 3) == []  # located, and every regime decided (at 64 it is on the edge)
    assert plan(spreads, bend=10.0).points(3, 3) == []  # the model does not fit: the report judges size by size
    unseries = Repeats("auto", 10.0, 10, tmp_path)
    for g, n in enumerate(sizes):
        for s in spreads:
            unseries.add(g, {"status": "ok", "timed_samples_us": process(100.0 * s), "size": n, "flops_per_call": 1})
    assert unseries.points(3, 3) == []


# --- machine readings and noise ---------------------------------------------------------------------


def test_other_processes_cpu_time_from_recorded_proc_stat_readings():
    tick = 1 / __import__("os").sysconf("SC_CLK_TCK")
    before = "cpu  1000 0 500 9000 10 0 5 0 0 0\ncpu0 ...\n"
    after = "cpu  1150 0 550 9100 10 0 5 0 0 0\n"  # 200 ticks busy
    assert machine.cpu_busy_s(after) - machine.cpu_busy_s(before) == pytest.approx(200 * tick)
    start = machine.Reading(wall_s=10.0, busy_s=machine.cpu_busy_s(before), own_s=1.0, stalled_us=1_000_000)
    end = machine.Reading(wall_s=12.0, busy_s=machine.cpu_busy_s(after), own_s=1.0 + 200 * tick / 4,
                          stalled_us=1_600_000)
    seen = machine.between(start, end)
    assert seen["other_cpus"] == pytest.approx(200 * tick * 3 / 4 / 2.0)
    assert seen["cpu_pressure"] == pytest.approx(0.3) and seen["measured_s"] == 2.0
    # a window of a few milliseconds (three tiny profiled steps) holds at most a tick or two of
    # /proc/stat: it does not say how many CPUs others used (it would read as several)
    short = machine.Reading(wall_s=10.002, busy_s=machine.cpu_busy_s(before) + tick, own_s=1.0, stalled_us=1_000_100)
    assert machine.between(start, short)["other_cpus"] is None
    assert machine.stalled_us("some avg10=0.00 avg60=0.00 avg300=0.00 total=2392698\nfull total=0") == 2392698
    assert machine.cpu_busy_s("garbage") is None and machine.stalled_us("") is None
    # only the CPUs the job may run on: another process busy on CPU 2 is not this job's load
    per_cpu = "cpu  300 0 0 900 0 0 0 0 0 0\ncpu0 100 0 0 300 0 0 0 0 0 0\ncpu1 0 0 0 400 0 0 0 0 0 0\n" \
              "cpu2 200 0 0 200 0 0 0 0 0 0\nintr 5\n"
    assert machine.cpu_busy_s(per_cpu, cpus={0, 1}) == pytest.approx(100 * tick)
    assert machine.cpu_busy_s(per_cpu) == pytest.approx(300 * tick)


def _job(job, hash_, repeat, timed, **extra):
    return {"job": job, "config_hash": hash_, "repeat": repeat, "status": "ok", "trace_error": None,
            "workload": "matmul_add", "size": 64, "compile": False, "warmup": False, "cpu_count": 2,
            "torch_threads": 2, "timed_samples_us": timed, "timed_us_per_step": sorted(timed)[len(timed) // 2],
            "timed_steps": len(timed), "timed_slow_steps": 0, "first_call_ms": 3.0 * repeat, **extra}


def points_of(jobs: list[dict]) -> list[GridPoint]:
    """The grid points of these jobs' records, as the analysis makes them."""
    return [GridPoint(p) for p in grid_points.points([Job(j) for j in jobs], [])]


def test_one_row_per_grid_point_with_the_median_of_repeat_medians_and_an_interval():
    jobs = [_job("0_a", "h1", 1, [10.0, 11.0, 12.0]), _job("1_b", "h2", 1, [50.0] * 3),
            _job("2_b_r2", "h2", 2, [52.0] * 3), _job("3_a_r2", "h1", 2, [20.0, 21.0, 22.0]),
            _job("4_a_r3", "h1", 3, [30.0, 31.0, 32.0])]
    rows = points_of(jobs)
    assert [r["jobs"] for r in rows] == ["0_a;3_a_r2;4_a_r3", "1_b;2_b_r2"]
    a, b = rows
    assert a["repeats"] == 3 and a["timed_us_per_step"] == 21.0  # medians 11, 21, 31
    assert a["timed_us_per_step_low"] <= 21.0 <= a["timed_us_per_step_high"]
    assert a["first_call_ms"] == 6.0 and a["timed_steps"] == 9
    assert a["spread"] == pytest.approx(31 / 11) and a["noisy"] is True
    assert "repeats disagree 2.8x (processes 52% apart)" in a["noise_reason"]  # sd of log(11, 21, 31)
    assert b["timed_us_per_step"] == 51.0 and b["noisy"] is False and not b["noise_load"]
    assert "timed_samples_us" not in a


def test_processes_slowed_with_the_machines_cache_probe_are_said_to_be_the_machines():
    """Compiled matmul_add 64's two modes on this project's VM moved the cache probe, not the
    matmul or the overhead probe (docs/numbers.md): the noise reason names the probe that moved."""
    jobs = [_job(str(k), "h", k + 1, [step] * 20, speed_probe_us=4.4, overhead_probe_us=0.86, cache_probe_us=cache)
            for k, (step, cache) in enumerate([(52.0, 17.0), (75.0, 31.0), (50.0, 17.5), (78.0, 30.0)])]
    reason = points_of(jobs)[0]["noise_reason"]
    assert "two modes, 51 µs (2 processes) and 76.5 µs (2 processes)" in reason, reason
    assert "the machine's cache probe (one thread adding 1.5 MiB timed beside the steps) took 1.77x as long in the " \
           "slow processes (17.2 µs -> 30.5 µs): another tenant" in reason, reason
    assert "speed probe" not in reason and "run.threads=1" not in reason
    # the probes alike on both modes: nothing they record tells them apart
    alike = [dict(j, cache_probe_us=17.0) for j in jobs]
    assert "cache probe" not in points_of(alike)[0]["noise_reason"]


def test_processes_slowed_with_the_machines_speed_probe_are_said_to_be_the_machines():
    # two modes, 20 and 26.5 µs; the slow processes' probe took 9.4 µs, the fast ones' 6.9
    jobs = [_job("0", "h", 1, [20.0] * 20, speed_probe_us=6.9), _job("1", "h", 2, [26.5] * 20, speed_probe_us=9.4),
            _job("2", "h", 3, [19.8] * 20, speed_probe_us=6.95)]
    row = points_of(jobs)[0]
    assert row["noisy"] and "two modes, 19.9 µs (2 processes) and 26.5 µs (1 process)" in row["noise_reason"]
    assert "speed probe (a 64x64 matmul timed beside the steps) took 1.36x as long" in row["noise_reason"]
    assert "another tenant" in row["noise_reason"] and "run.threads=1" not in row["noise_reason"]
    assert grid_points.remedy([row], jobs) == "rerun on a quiet machine"  # more processes would not help
    # with other processes on this machine busy during the slow one, the probe was slowed by that load
    local = [dict(j, other_cpus=1.0 if j["job"] == "1" else 0.0) for j in jobs]
    reason = points_of(local)[0]["noise_reason"]
    assert "other processes used 1.0 CPUs during the slow ones" in reason
    assert "took 1.36x as long in the slow processes (6.93 µs -> 9.4 µs): the load above slowed it too" in reason
    assert "another tenant" not in reason
    # two slow processes, one with its probe slowed 800x: said of that one, not as a median of both
    two = [*jobs[:2], _job("2", "h", 3, [26.0] * 20, speed_probe_us=5500.0), _job("3", "h", 4, [20.1] * 20,
                                                                                 speed_probe_us=6.9)]
    two[1] = dict(two[1], speed_probe_us=6.9)
    reason = points_of(two)[0]["noise_reason"]
    assert "took 797.10x as long in 1 of the 2 slow processes (6.9 µs -> 5.5 ms)" in reason, reason
    # the probe alike: nothing recorded differs, and with 2 threads their placement is named
    alike = [dict(j, speed_probe_us=6.9) for j in jobs]
    assert "run.threads=1" in points_of(alike)[0]["noise_reason"]


def test_processes_apart_by_the_pages_they_fault_are_given_the_allocators_remedy():
    # attention 256 (math) here: 12 ms at ~600 faults a step or 22 ms at ~6,600, by the heap's layout
    jobs = [_job("0", "h", 1, [12_000.0] * 20, timed_minor_faults_per_step=644.0),
            _job("1", "h", 2, [22_000.0] * 20, timed_minor_faults_per_step=6624.0),
            _job("2", "h", 3, [12_300.0] * 20, timed_minor_faults_per_step=1398.0)]
    row = points_of(jobs)[0]
    assert "two modes, 12.2 ms (2 processes) and 22 ms (1 process)" in row["noise_reason"]
    assert "the slow processes faulted 6,624 pages a step, the fast ones 1,021" in row["noise_reason"]
    assert grid_points.ALLOCATOR_REMEDY in row["noise_reason"] and "run.threads=1" not in row["noise_reason"]
    assert grid_points.remedy([row], jobs) == "rerun with run.allocator=steady"
    # the thresholds already held (run.allocator=steady): the faults are named, the remedy is not
    held = [dict(j, allocator="steady") for j in jobs]
    row = points_of(held)[0]
    assert "faulted 6,624 pages a step" in row["noise_reason"] and "thresholds held" in row["noise_reason"]
    assert "(allocator steady: possibly memory its heap does not keep (blocks of 32 MiB or more" in row["noise_reason"]
    fixed = points_of([dict(j, allocator="fixed") for j in jobs])[0]["noise_reason"]
    assert "(allocator fixed: possibly memory its heap does not keep (blocks of 256 MiB or more" in fixed
    assert grid_points.remedy([row], held) == "rerun with run.repeats=5", row["noise_reason"]
    # faults alike: not the allocator's doing
    alike = [dict(j, timed_minor_faults_per_step=644.0) for j in jobs]
    assert grid_points.ALLOCATOR_REMEDY not in points_of(alike)[0]["noise_reason"]


def test_noise_from_other_processes_and_time_slices():
    loaded = [_job("0", "h", 1, [100.0] * 20, other_cpus=1.3), _job("1", "h", 2, [100.0] * 20)]
    row = loaded_row = points_of(loaded)[0]
    assert row["noisy"] and row["noise_load"] and "other processes used 1.3 CPUs" in row["noise_reason"]
    # one thread on two CPUs leaves one free: 1.3 other CPUs is not contention yet
    spare = [_job("0", "h", 1, [100.0] * 20, other_cpus=1.3, torch_threads=1)]
    assert points_of(spare)[0]["noisy"] is False
    sliced = [_job("0", "h", 1, [100.0] * 20, timed_slow_steps=5)]
    row = points_of(sliced)[0]
    assert "whole OS time slices (5 of 20 timed steps)" in row["noise_reason"] and row["noise_load"]
    # runnable tasks waiting while others used CPUs is load; with nobody else on the CPUs it is the
    # job's own threads filling them (two threads on two CPUs, one more waking up)
    waited = [_job("0", "h", 1, [100.0] * 20, cpu_pressure=0.23, other_cpus=0.4)]
    assert "runnable tasks waited for a CPU 23% of the time" in points_of(waited)[0]["noise_reason"]
    alone = [_job("0", "h", 1, [100.0] * 20, cpu_pressure=0.23, other_cpus=0.03)]
    assert points_of(alone)[0]["noisy"] is False
    unknown = [_job("0", "h", 1, [100.0] * 20, cpu_pressure=0.23)]  # a window too short to say who used the CPUs
    assert points_of(unknown)[0]["noise_load"] is True
    few = [_job("0", "h", 1, [100.0] * 100, timed_slow_steps=2)]  # 2 of 100: a page fault, a GC pause
    assert points_of(few)[0]["noisy"] is False
    lines = grid_points.noise_lines([row, points_of([_job("9", "g", 1, [5.0] * 3)])[0]])
    assert lines[0] == ("1 of 2 grid points noisy: steps waited for a busy core in whole OS time slices (5 of 20 "
                        "timed steps) at matmul_add size=64 cold eager; rerun on a quiet machine")
    many = [row.replace(job=str(i)) for i in range(3)] + [loaded_row]
    assert grid_points.noise_lines(many)[0].startswith(
        "4 of 4 grid points noisy: steps waited for a busy core in whole OS time slices (3 points); other processes")
    # a point whose reason names one kind twice (its profiled window and its twin's) counts once
    twice = loaded_row.replace(noise_reason=f"{loaded_row['noise_reason']}; other processes used 1.0 CPUs")
    assert grid_points.noise_lines([twice, row.replace(job="x")])[0].startswith("2 of 2 grid points noisy: ")
    assert "(2 points)" not in grid_points.noise_lines([twice, row.replace(job="x")])[0]


def test_profiled_steps_far_slower_than_the_unprofiled_step_are_noise():
    """Measured grid points (summary.csv rows of this project's sweeps): a compiled BatchNorm model
    whose profiled steps ran beside another sweep, 19.4 ms against a 64.6 µs un-profiled step, is
    noisy (not load: compare's verdicts rest on the un-profiled steps); a cold first step at 16
    (10x, microseconds an op), a cold 4096 step (1.2x) and a step of 100 tiny ops (80x, 4 µs an
    op) are what the profiler makes of them."""
    def point(timed, profiled, ops):
        return {"timed_us_per_step": timed, "step_host_us_median": profiled, "step_aten_ops_median": ops}

    said = grid_points.profiled_disturbed(point(64.6, 19368.9, 6))
    assert said.startswith("its profiled steps took 300x its un-profiled step (3.2 ms more an aten op")
    for timed, profiled, ops in ((6.1, 62.6, 6), (49811.4, 60857.1, 6), (5.0, 400.0, 100)):
        assert grid_points.profiled_disturbed(point(timed, profiled, ops)) == ""
    assert grid_points.profiled_disturbed(point(None, 100.0, 6)) == ""  # no un-profiled timing: nothing to hold it to
    reasons = grid_points.noise_reasons(point(64.6, 19368.9, 6), [], {})
    assert list(reasons) == ["profiled steps"] and not set(reasons) & grid_points.LOAD


def test_one_process_per_grid_point_says_whether_more_were_planned():
    one = points_of([_job("0", "h", 1, [100.0] * 5, repeats_planned=1)])
    assert grid_points.noise_lines(one)[-1].endswith("(run.repeats=3 or more, in a sweep with -m, for that)")
    # a sweep of run.repeats=2 stopped after its first round: finishing it is the remedy, not 3
    stopped = points_of([_job("0", "h", 1, [100.0] * 5, repeats_planned=2)])
    assert grid_points.noise_lines(stopped)[-1].endswith(
        "(run.repeats=2 was planned: rerun the same command into the same folder to finish)")
    stopped = points_of([_job("0", "h", 1, [100.0] * 5, repeats_planned="auto")])
    assert grid_points.noise_lines(stopped)[-1].endswith("(run.repeats=auto was planned: rerun the same command "
                                                         "into the same folder to finish)")


# --- claims and expectations over intervals ------------------------------------------------------------


def test_a_comparison_is_decided_by_the_one_rule_on_the_ratio_over_processes():
    """claims._more: NEW / BASE over each side's processes (from the jobs), decided by
    profsweep.decide: past +5% "true", past -5% or within ±5% "false", else inconclusive; one
    process a side uses its steps' interval, and no interval decides nothing."""
    def point(name, values):
        return pd.Series({"jobs": ";".join(f"{name}{i}" for i in range(len(values))),
                          "dead_window_us": sorted(values)[len(values) // 2]})

    def data(*points):
        jobs = [{"job": f"{name}{i}", "dead_window_us": v} for name, values in points for i, v in enumerate(values)]
        return _Data(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), jobs)

    cold, warm, same = [30.0, 30.2, 29.9], [10.0, 10.4, 9.8], [30.1, 29.95, 30.05]
    d = data(("c", cold), ("w", warm), ("s", same))
    assert _more(d, point("c", cold), point("w", warm), "dead_window_us") == "true"
    assert _more(d, point("w", warm), point("c", cold), "dead_window_us") == "false"
    assert _more(d, point("s", same), point("c", cold), "dead_window_us") == "false"  # the same within ±5%
    wide = [15.8, 9.0, 25.0]
    d = data(("c", wide), ("w", [15.3, 10.0, 22.0]))
    assert _more(d, point("c", wide), point("w", [15.3, 10.0, 22.0]), "dead_window_us") == "inconclusive"
    plain = pd.Series({"dead_window_us": 15.8})  # one process, no interval: nothing is decided
    assert _more(data(), plain, pd.Series({"dead_window_us": 15.3}), "dead_window_us") == "inconclusive"


def test_cold_against_warm_pairs_the_processes_of_each_round():
    """Part 1's dead window at 16 (this project's CPU, 2026-12-06): cold 20.8, 25.5, 20.4 µs and warm
    13.4, 14.1, 13.8 µs in rounds 1-3. Over the processes unpaired that is inconclusive (1.51x
    [0.94, 2.42] in the report); in pairs by round (each round's two processes ran seconds apart)
    the three ratios 1.56, 1.81, 1.48 decide it."""
    cold, warm = [20.828, 25.545, 20.428], [13.362, 14.102, 13.810]

    def point(name):
        return pd.Series({"jobs": ";".join(f"{name}{r}" for r in (1, 2, 3))})

    def data(rounds):
        jobs = [{"job": f"{name}{r}", "dead_window_us": v, "status": "ok", "trace_error": None,
                 **({"repeat": r} if rounds else {})}
                for name, values in (("c", cold), ("w", warm)) for r, v in zip((1, 2, 3), values)]
        return _Data(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), jobs)

    assert _more(data(rounds=False), point("c"), point("w"), "dead_window_us") == "inconclusive"
    assert _more(data(rounds=True), point("c"), point("w"), "dead_window_us") == "true"


def test_an_expectation_on_a_measured_interval_can_be_inconclusive():
    job = {"job": "0_a", "status": "ok", "trace_error": None, "host_us_per_step": 150.0,
           "host_us_per_step_low": 120.0, "host_us_per_step_high": 260.0, "regime": "overhead-bound",
           "regime_uncertain": True, "step_kernels_median": 5}
    texts = {"host_us_per_step < 200": "inconclusive", "host_us_per_step < 300": "true",
             "host_us_per_step > 100": "true", "host_us_per_step > 270": "false",
             "regime == overhead-bound": "inconclusive", "step_kernels_median == 5": "true"}
    rows = check([parse(t) for t in texts], [GridPoint(job)], {}, {})
    assert {r["expectation"]: r["holds"] for r in rows} == texts
    assert next(r for r in rows if r["expectation"] == "host_us_per_step < 200")["measured"] == "150.0 [120, 260]"


# --- sweeps -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_repeats_run_round_by_round_and_a_rerun_adds_only_the_missing_ones(sweep_dir):
    done = run_cli("-m", "size=8,16", "device=cpu", "run.repeats=2", f"hydra.sweep.dir={sweep_dir}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sweep of 4 jobs (2 grid points × 2 repeats)" in done.stdout
    started = re.findall(r"^\[(\d)/4\] matmul_add (size=\d+) bf16 cold eager( repeat 2)? \.\.\.", done.stdout, re.M)
    assert started == [("1", "size=8", ""), ("2", "size=16", ""), ("3", "size=16", " repeat 2"),
                       ("4", "size=8", " repeat 2")]
    names = [d.name for d in job_dirs(sweep_dir)]
    assert names == ["0_matmul_add_8_bf16_cold_eager", "1_matmul_add_16_bf16_cold_eager",
                     "2_matmul_add_16_bf16_cold_eager_r2", "3_matmul_add_8_bf16_cold_eager_r2"]
    assert [read_metrics(sweep_dir / n)["repeat"] for n in names] == [1, 1, 2, 2]
    assert read_metrics(sweep_dir / names[0])["config_hash"] == read_metrics(sweep_dir / names[3])["config_hash"]
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    assert [r["order"] for r in plan["rounds"]] == ["grid order", "reversed"] and plan["jobs"] == 4
    summary = pd.read_csv(sweep_dir / "summary.csv")
    assert list(summary["size"]) == [8, 16] and list(summary["repeats"]) == [2, 2]
    for metric in ("host_us_per_step", "timed_us_per_step", "first_call_ms", "dead_window_us"):
        assert (summary[f"{metric}_low"] <= summary[metric]).all() and (summary[metric] <= summary[f"{metric}_high"]).all()
    assert summary["noisy"].notna().all()
    repeats = pd.read_csv(sweep_dir / "repeats.csv")
    assert sorted(repeats["repeat"]) == [1, 1, 2, 2] and len(repeats) == 4
    # the median over repeats of each repeat's median, from repeats.csv
    for _, point in summary.iterrows():
        mine = repeats[repeats["size"] == point["size"]]["timed_us_per_step"]
        assert point["timed_us_per_step"] == pytest.approx(mine.median(), rel=1e-6)

    again = run_cli("-m", "size=8,16", "device=cpu", "run.repeats=3", f"hydra.sweep.dir={sweep_dir}")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("skipped: already ok") == 4
    assert "done: 6 jobs (6 ok, 0 failed; 4 of them already ok, not run again (resume))" in again.stdout
    assert re.findall(r"^\[(\d)/6\] .* repeat 3 ok [\d.]+ s$", again.stdout, re.M) == ["5", "6"]
    assert len(job_dirs(sweep_dir)) == 6
    assert list(pd.read_csv(sweep_dir / "summary.csv")["repeats"]) == [3, 3]


@pytest.mark.slow
def test_threads_reach_the_job_and_a_swept_repeats_is_refused(tmp_path):
    done = run_cli("size=8", "device=cpu", "run.threads=1", f"hydra.run.dir={tmp_path / 'one'}")
    assert done.returncode == 0, done.stdout + done.stderr
    m = read_metrics(tmp_path / "one")
    assert m["torch_threads"] == 1 and m["threads"] == 1
    assert m["timed_steps"] >= 3 and len(m["timed_samples_us"]) <= 201 and m["timed_us_per_step"] > 0
    assert m["measured_s"] > 0 and m["lock_wait_s"] is not None
    refused = run_cli("-m", "size=8", "run.repeats=2,3", f"hydra.sweep.dir={tmp_path / 'no'}", repeats=None)
    assert refused.returncode == 2 and "run.repeats=2,3 is not allowed" in refused.stderr
    assert not (tmp_path / "no").exists()


def test_a_noise_reason_with_a_semicolon_inside_parentheses_is_one_reason():
    """helper-33's terminal line cut a reason apart inside its parentheses: 'over 64 MiB on another
    thread (2 points); another allocator's)) (2 points)'."""
    text = "faults apart (12 against 900 a step; the allocator's two ways (steady or system)); load (1.2 CPUs)"
    assert grid_points.reasons(text) == ["faults apart (12 against 900 a step; the allocator's two ways (steady or "
                                         "system))", "load (1.2 CPUs)"]
    assert grid_points.reasons("") == [] and grid_points.reasons("one") == ["one"]


def test_a_step_compiled_again_is_given_its_own_remedy_not_more_processes():
    """helper-33: a recompiling model was advised 'rerun with run.repeats=5', which compiles again too."""
    row = points_of([_job("0", "h", 1, [100.0] * 20)])[0]
    recompiled = row.replace(noisy=True, noise_reason="the step was compiled again while it was measured (3 graphs "
                             "over its processes, after their first call)")
    said = grid_points.remedy([recompiled], [recompiled])
    assert said.startswith("make the step compile once") and "run.repeats" not in said
