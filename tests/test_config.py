"""Every config group composes; every bad value is refused with key, value and what is allowed."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from experiments.config import (
    ConfigError,
    JobConfig,
    WorkloadConfig,
    config_from_dict,
    config_to_dict,
    register_configs,
)
from experiments import seam
from experiments.records import settings_record
from experiments.sweep import job_config
from tests.conftest import ROOT

CONF = ROOT / "conf"
GROUPS = ("workload", "profiler", "compiler", "run")


@pytest.fixture(scope="module")
def hydra_conf():
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield
    GlobalHydra.instance().clear()


def test_defaults_mirror_the_article(hydra_conf):
    config = job_config(compose(config_name="config"))
    assert (config.workload.name, config.size, config.dtype) == ("matmul_add", 64, "bf16")
    assert (config.compile, config.warmup, config.device) == (False, False, "auto")
    p = config.profiler
    assert (p.wait, p.warmup, p.active, p.repeat, p.row_limit) == (1, 1, 3, 1, 15)
    assert (config.compiler.mode, config.compiler.backend, config.compiler.dynamic) == (
        "default", "inductor", False,
    )
    assert (config.run.isolation, config.run.compile_cache, config.run.warmup_iters) == (
        "process", "fresh", 3,
    )


@pytest.mark.parametrize(
    "group,option",
    [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))],
)
def test_every_group_option_composes_with_its_values(hydra_conf, group, option):
    custom = ["workload._target_=mybench.blocks:make_block"] if option == "custom" else []
    config = job_config(compose(config_name="config", overrides=[f"{group}={option}", *custom]))
    part = getattr(config, group)
    node = part.as_node() if group == "workload" else dataclasses.asdict(part)
    expected = {k: v for k, v in yaml.safe_load((CONF / group / f"{option}.yaml").read_text()).items() if k != "defaults"}
    if option == "custom":  # named after its factory
        expected.update(_target_="mybench.blocks:make_block", name="make_block")
    assert {k: node[k] for k in expected} == expected
    if group == "workload" and option != "custom":  # the YAML's defaults are the factory's
        assert seam.defaults(part.target) == part.settings


def test_article_shapes_for_part2(hydra_conf):
    mlp = job_config(compose(config_name="config", overrides=["workload=mlp"])).workload
    linear = job_config(compose(config_name="config", overrides=["workload=linear"])).workload
    assert (mlp.settings["dim"], mlp.settings["hidden"]) == (768, 3072)
    assert (linear.settings["in_features"], linear.settings["out_features"]) == (32, 64)


def test_workload_keys_can_be_overridden(hydra_conf):
    cfg = compose(config_name="config", overrides=["workload=mlp", "workload.hidden=128", "size=8"])
    config = job_config(cfg)
    assert config.workload.name == "mlp" and config.workload.settings["hidden"] == 128


@pytest.mark.parametrize(
    "override,needles",
    [
        ("size=-1", ["size=-1", "> 0"]),
        ("size=0", ["size=0", "> 0"]),
        ("dtype=int3", ["dtype='int3'", "bf16, fp16, fp32"]),
        ("device=tpu", ["device='tpu'", "auto, cpu, cuda"]),
        ("profiler.active=0", ["profiler.active=0", "> 0"]),
        ("profiler.wait=-1", ["profiler.wait=-1", ">= 0"]),
        ("compiler.mode=fast", ["compiler.mode='fast'", "default, reduce-overhead, max-autotune"]),
        ("run.isolation=thread", ["run.isolation='thread'", "process, none"]),
        ("run.compile_cache=old", ["run.compile_cache='old'", "fresh, shared"]),
        ("workload.batch=0", ["workload.batch=0", "> 0"]),
        ("workload.backend=fast", ["workload.backend='fast'", "auto, math, flash, efficient, cudnn"]),
    ],
)
def test_bad_values_are_refused_with_key_value_and_choices(hydra_conf, override, needles):
    workload = "attention" if override.startswith("workload.backend") else "bmm"
    overrides = [override] + ([f"workload={workload}"] if override.startswith("workload.") else [])
    with pytest.raises((ConfigError, seam.WorkloadError)) as info:
        # A workload's own settings are checked against its factory, as the sweep does.
        w = job_config(compose(config_name="config", overrides=overrides)).workload
        seam.check(w.target, w.settings)
    for needle in needles:
        assert needle in str(info.value)


def test_round_trip_through_plain_data():
    config = JobConfig(workload=WorkloadConfig.builtin("mlp", dim=16, hidden=32), size=8, dtype="fp32", compile=True)
    assert config_from_dict(config_to_dict(config)) == config


def test_unknown_workload_and_key_are_refused():
    nope = config_from_dict({"workload": {"name": "nope"}}).workload
    with pytest.raises(seam.WorkloadError, match="'experiments.workloads.nope' does not import.*no attribute 'nope'"):
        seam.check(nope.target, nope.settings)
    with pytest.raises(ConfigError, match="unknown configuration key"):
        config_from_dict({"sise": 3})


def test_bool_is_not_a_size():
    with pytest.raises(ConfigError, match="size=True"):
        JobConfig(size=True)


def test_settings_record_is_flat_and_complete():
    record = settings_record(JobConfig(workload=WorkloadConfig.builtin("mlp")))
    assert all(not isinstance(v, (dict, list)) for v in record.values())
    for key in ("workload", "size", "dtype", "compile", "warmup", "device_requested",
                "workload_dim", "workload_hidden", "profiler_active", "profiler_row_limit",
                "compile_mode", "compile_backend", "compile_dynamic",
                "isolation", "compile_cache", "warmup_iters"):
        assert key in record, key


# --- the sweep's bookkeeping around composition -------------------------------------------------


@pytest.mark.parametrize(
    "overrides,own_processes",
    [
        ([], True),
        (["size=64,1024"], True),
        (["run=fast"], False),
        (["run.isolation=none"], False),
        (["run.isolation=process,none"], False),
        (["~run"], False),
        (["run.warmup_iters=5"], True),
    ],
)
def test_analysis_preloads_only_when_every_job_has_its_own_process(hydra_conf, overrides, own_processes):
    from analysis.callback import jobs_in_own_processes

    plain = [o for o in overrides if "," not in o and not o.startswith("~")]
    config = compose("config", overrides=plain, return_hydra_config=True)
    config.hydra.overrides.task = overrides
    assert jobs_in_own_processes(config) is own_processes


def test_sweep_parameters_of_a_preset_count_as_overrides(hydra_conf):
    from analysis.callback import jobs_in_own_processes

    config = compose("config", return_hydra_config=True)
    config.hydra.sweeper.params = {"size": "16,64", "run.isolation": "none,process"}
    assert not jobs_in_own_processes(config)
