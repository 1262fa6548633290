"""The grid sweeper and the sweep's preflight: the basic sweeper's grid, every value checked before
any job, and a grid of any size composed in the same handful of configs."""

from __future__ import annotations

import errno
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.types import HydraContext
from omegaconf import OmegaConf

from experiments import preflight, refusals, sweep_folder
from experiments.config import register_configs
from hydra_plugins.profsweep_grid import grid
from hydra_plugins.profsweep_grid.grid_sweeper import BASIC_LAUNCHER, GridSweeper
from profsweep.sweep_state import SWEEP
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def hydra_conf():
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        yield
    GlobalHydra.instance().clear()


class Composer:
    """load_sweep_config as the config loader answers it, counting the configs it composes."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, master, overrides):
        self.calls.append(list(overrides))
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def planned(overrides: list[str], composer: Composer | None = None) -> list[preflight.Planned]:
    master = compose("config", overrides=[o for o in overrides if "," not in o and "range" not in o],
                     return_hydra_config=True)
    axes = grid.axes(grid.arguments(master.hydra.sweeper.params, overrides))
    return preflight.preflight(master, axes, composer or Composer())


@pytest.fixture
def interrupted():
    yield SWEEP
    SWEEP.reset()


# --- the grid ------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [
    ["size=1,2,3", "dtype=bf16,fp32"],
    ["workload=mlp,bmm", "size=range(1,5)", "compile=true", "size=7,8"],  # a later size wins, in place
    ["+experiment=part1", "dtype='fp32',bf16", "warmup=false"],
])
def test_the_grid_is_the_basic_sweepers(overrides):
    # The order decides job numbers and folder names: compare with Hydra's own basic sweeper.
    basic = pytest.importorskip("hydra._internal.core_plugins.basic_sweeper")
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = {"size": "64,128", "compile": "false,true"}
    args = grid.arguments(params, overrides)
    [expected] = basic.BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(args), None)
    assert list(grid.jobs(grid.axes(args))) == expected


def test_a_grid_of_a_million_jobs_is_held_as_its_axes():
    import itertools
    import tracemalloc

    args = ["size=range(0,1000)", "dtype=bf16,fp32", "compile=false,true", "workload.hidden=range(0,250)"]
    tracemalloc.start()
    axes = grid.axes(args)
    jobs = grid.jobs(axes)
    order, _ = grid.round_order(2, range(len(jobs)))
    first = next(grid.batches(grid.Round(jobs, order, ["run.repeat=2"]), 1))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(jobs) == 1_000_000 and peak < 2_000_000  # a list of the jobs would take hundreds of MB
    assert first == [["size=999", "dtype=fp32", "compile=True", "workload.hidden=249", "run.repeat=2"]]
    product = itertools.product(*(a.strings for a in axes))
    for index, expected in enumerate(itertools.islice(product, 1200)):  # index by index, as the sweeper asks
        assert jobs[index] == list(expected)
    assert jobs[-1] == jobs[999_999] == ["size=999", "dtype=fp32", "compile=True", "workload.hidden=249"]
    assert jobs[500_000:500_002] == [["size=500", "dtype=bf16", "compile=False", "workload.hidden=0"],
                                     ["size=500", "dtype=bf16", "compile=False", "workload.hidden=1"]]
    with pytest.raises(IndexError):
        jobs[1_000_000]


def test_a_range_past_the_axis_limit_is_refused_before_it_is_expanded():
    """helper-52: size=range(1,100000000) took 5.8 GB in 43 s before a MemoryError's traceback."""
    import tracemalloc

    tracemalloc.start()
    with pytest.raises(HydraException, match=r"^size=range\(1,100000000\) is not allowed: it sweeps size over "
                                             r"99,999,999 values, more than the 100,000"):
        grid.axes(["size=range(1,100000000)"])
    assert tracemalloc.get_traced_memory()[1] < 50_000_000
    tracemalloc.stop()
    assert len(grid.axes([f"size=range(0,{grid.MAX_AXIS_VALUES})"])[0].values) == grid.MAX_AXIS_VALUES
    assert len(grid.axes(["size=range(0.5,3,0.5)"])[0].values) == 5


def test_batches_of_max_batch_size():
    jobs = [[f"size={i}"] for i in range(5)]
    assert [len(b) for b in grid.batches(jobs, None)] == [5]
    assert [len(b) for b in grid.batches(jobs, 2)] == [2, 2, 1]
    assert [len(b) for b in grid.batches([], None)] == []


def test_a_presets_params_are_its_grid(hydra_conf):
    master = compose("config", overrides=["+experiment=part1"], return_hydra_config=True)
    assert master.hydra.sweeper._target_ == preflight.GRID_SWEEPER
    axes = grid.axes(grid.arguments(master.hydra.sweeper.params, ["+experiment=part1", "size=16,32"]))
    assert grid.size(axes) == 2 * 2 * 2 * 2
    assert next(iter(grid.jobs(axes))) == ["size=16", "dtype=bf16", "compile=False", "warmup=False", "+experiment=part1"]


# --- the preflight composes a handful of configs, whatever the grid's size -----------------------


def test_a_1000_job_grid_composes_as_few_configs_as_a_10_job_grid(hydra_conf):
    small, large = Composer(), Composer()
    planned(["size=range(1,11)", "dtype=bf16,fp32", "compile=false,true"], small)
    plan = planned(["size=range(1,1001)", "dtype=bf16,fp32", "compile=false,true"], large)
    assert len(small.calls) == len(large.calls) == 1
    assert sum(p.jobs for p in plan) == 4000


def test_one_composition_per_config_group_combination(hydra_conf):
    composer = Composer()
    plan = planned(["workload=bmm,mlp", "size=range(1,301)", "expect=[],['step_ops_median > 0']"], composer)
    assert len(composer.calls) == 4
    assert sorted(c[0] for c in composer.calls) == ["workload=bmm"] * 2 + ["workload=mlp"] * 2
    assert sum(p.jobs for p in plan) == 1200


def test_a_100000_job_grid_is_checked_without_converting_a_config_per_value(hydra_conf, monkeypatch):
    """Each value is set once and checked, but the composed config is turned into plain data
    once per composition, not once per value (that took 34 s for 100,000 sizes)."""
    conversions = []
    real = preflight.plain_config
    monkeypatch.setattr(preflight, "plain_config", lambda cfg: conversions.append(1) or real(cfg))
    composer = Composer()
    plan = planned(["size=range(1,100001)", "dtype=bf16,fp32"], composer)
    assert sum(p.jobs for p in plan) == 200_000
    assert len(composer.calls) == 1 and len(conversions) <= 3


@pytest.mark.parametrize("bad,needles", [
    ("size=range(1000,-1,-1)", ["size=0", "> 0", "(in the job size=0 dtype=bf16)"]),  # its last value
    ("dtype=bf16,fp16,fp99", ["dtype='fp99'", "bf16, fp16, fp32", "(in the job size=1 dtype=fp99)"]),
    ("size=1,2,abc", ["size=abc is not allowed", "Integer", "(key size)", "(in the job size=abc dtype=bf16)"]),
])
def test_a_bad_value_deep_in_a_grid_is_refused(hydra_conf, capsys, bad, needles):
    other = "dtype=bf16" if bad.startswith("size") else "size=1"
    overrides = [bad, other] if bad.startswith("size") else [other, bad]
    with pytest.raises(SystemExit) as info:
        planned(overrides)
    assert info.value.code == refusals.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, (needle, err)


def test_an_unknown_key_is_refused_by_hydras_composition(hydra_conf, capsys):
    with pytest.raises(SystemExit):
        planned(["sise=1,2"])
    assert "error: sise=1 is not allowed: sise is not a key of this configuration" in capsys.readouterr().err


def test_left_out_jobs_are_counted_from_the_grid(hydra_conf, capsys):
    # workload.backend is checked in every combination with device: 2 x 50 jobs use 'efficient'.
    plan = planned(["workload=attention", "workload.backend=math,efficient", "size=range(1,51)",
                    "dtype=bf16,fp32", "run.unavailable=skip", "device=cpu"])
    preflight.check_configs([p.config for p in plan], [p.jobs for p in plan])
    out = capsys.readouterr().out
    assert "left out on this machine: 100 grid points with workload.backend='efficient' (CUDA only; device=cpu)" in out


# --- the disk -------------------------------------------------------------------------------------


def test_a_short_disk_is_warned_of(hydra_conf, capsys, monkeypatch, tmp_path):
    plan = planned(["size=range(1,1001)", "run.repeats=2"])  # 2,000 jobs: each process writes its own
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 0, 1_000_000))
    sweep_folder.warn_if_short_of_space(tmp_path / "not" / "yet", "hydra.sweep.dir", plan)
    err = capsys.readouterr().err
    each = sweep_folder.estimated_job_bytes(plan[0].config, cuda=False)
    assert 40_000 < each < 100_000  # profiler=article: 3 steps
    assert err == (f"warning: hydra.sweep.dir={tmp_path / 'not' / 'yet'} has 1.0 MB free; this sweep of 2,000 "
                   f"jobs may write about {sweep_folder._bytes(2000 * each)} (about {sweep_folder._bytes(each)} a job; "
                   "profiler.gzip=true writes traces several times smaller)\n")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 10**11))
    sweep_folder.warn_if_short_of_space(tmp_path, "hydra.sweep.dir", plan)
    assert capsys.readouterr().err == ""


def test_the_estimate_grows_with_profiled_steps_stacks_and_shrinks_with_gzip(hydra_conf):
    def each(*overrides):
        return sweep_folder.estimated_job_bytes(planned(list(overrides))[0].config, cuda=False)

    assert each("profiler.active=20") > each("profiler.active=3")
    assert each("profiler=detailed") > 3 * each() - 3 * sweep_folder.JOB_FIXED_BYTES
    assert each("profiler.gzip=true") < each()


# --- the sweeper ------------------------------------------------------------------------------------


Result = namedtuple("Result", "return_value")


class Launcher:
    def __init__(self, fail_at: int | None = None, error: OSError | None = None, stop_after: int | None = None):
        self.launched: list[tuple[int, list[list[str]]]] = []
        self.fail_at, self.error, self.stop_after = fail_at, error, stop_after

    def launch(self, batch, initial_job_idx):
        if initial_job_idx == self.fail_at:
            raise self.error
        self.launched.append((initial_job_idx, [list(j) for j in batch]))
        if self.stop_after is not None and initial_job_idx + len(batch) >= self.stop_after:
            SWEEP.stop()  # Ctrl-C during this job: it ran, and failed (a job a stop caught waiting returns None)
            return [Result({"status": "failed", "error": "interrupted"}) for _ in batch]
        return [Result(None) for _ in batch]


def sweeper(tmp_path: Path, launcher: Launcher, target: str = BASIC_LAUNCHER, **kwargs) -> GridSweeper:
    s = GridSweeper(**kwargs)
    s.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "launcher": {"_target_": target}}})
    s.hydra_context = HydraContext(config_loader=None, callbacks=None)
    s.launcher = launcher
    s.validate_batch_is_legal = lambda batch: None  # composed by Hydra elsewhere
    return s


def test_the_basic_launcher_gets_one_job_at_a_time(tmp_path, interrupted):
    launcher = Launcher()
    sweeper(tmp_path, launcher, params={"dtype": "bf16,fp32"}).sweep(["size=1,2"])
    assert launcher.launched == [(0, [["dtype=bf16", "size=1"]]), (1, [["dtype=bf16", "size=2"]]),
                                 (2, [["dtype=fp32", "size=1"]]), (3, [["dtype=fp32", "size=2"]])]
    assert (tmp_path / "multirun.yaml").is_file()


def test_other_launchers_get_batches(tmp_path, interrupted):
    launcher = Launcher()
    sweeper(tmp_path, launcher, "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
            max_batch_size=3).sweep(["size=range(1,8)"])
    assert [(i, len(b)) for i, b in launcher.launched] == [(0, 3), (3, 3), (6, 1)]


def test_no_job_is_launched_after_an_interrupt(tmp_path, interrupted, capsys):
    launcher = Launcher(stop_after=2)
    sweeper(tmp_path, launcher).sweep(["size=range(1,1001)"])
    assert [i for i, _ in launcher.launched] == [0, 1]
    assert capsys.readouterr().out == "not started: 998 jobs (the sweep was interrupted)\n"


def test_a_job_a_stop_caught_waiting_for_its_device_counts_as_not_started(tmp_path, interrupted, capsys):
    class Waiting(Launcher):
        def launch(self, batch, initial_job_idx):
            super().launch(batch, initial_job_idx)
            return [Result(None) for _ in batch]  # run_task's None: stopped before it started

    sweeper(tmp_path, Waiting(stop_after=2)).sweep(["size=range(1,1001)"])
    assert capsys.readouterr().out == "not started: 999 jobs (the sweep was interrupted)\n"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_while_hydra_writes_a_job_stops_the_sweep(tmp_path, interrupted, code, capsys):
    full = OSError(code, "No space left on device", str(tmp_path / "2_x" / ".hydra" / "config.yaml"))
    launcher = Launcher(fail_at=2, error=full)
    sweeper(tmp_path, launcher).sweep(["size=range(1,10)"])
    assert [i for i, _ in launcher.launched] == [0, 1]
    assert SWEEP.stopped and SWEEP.disk_error.startswith("disk full: ")
    assert "config.yaml" in SWEEP.disk_error
    assert capsys.readouterr().out == "not started: 7 jobs (the disk is full)\n"


def test_other_os_errors_are_not_a_full_disk(tmp_path, interrupted):
    launcher = Launcher(fail_at=0, error=PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermissionError):
        sweeper(tmp_path, launcher).sweep(["size=1,2"])
    assert not SWEEP.stopped


def test_a_range_is_checked_by_its_ends_not_value_by_value(hydra_conf, monkeypatch):
    """size=range(1,3000000): the preflight set and checked three million values one by one,
    minutes with no word (helper-37). A range's values are numbers of one kind evenly apart: its
    ends and its second stand for them, and a bad end is still refused."""
    calls = []
    original = preflight._set
    monkeypatch.setattr(preflight, "_set", lambda *a, **k: (calls.append(a[2]), original(*a, **k))[1])
    plan = planned(["size=range(1,100000)", "dtype=bf16,fp32"])
    assert sum(p.jobs for p in plan) == 2 * 99_999 and len(calls) <= 8, len(calls)
    with pytest.raises(SystemExit):
        planned(["size=range(5,-2,-1)"])  # its last value, -1, is no size
