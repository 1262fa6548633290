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
from experiments.task import job_config
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
        ("run.repeats=1000000", ["run.repeats=1000000", "from 1 to 1000, or auto"]),  # 1,484 h of jobs, started
        ("workload._target_=:", ["workload._target_=':'", "package.module:function"]),  # not workload.name
        ("run.max_repeats=5000", ["run.max_repeats=5000", "to 1000"]),
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
    with pytest.raises(ConfigError, match="sise is not allowed: it is not a key of this configuration"):
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


# --- job folders and progress lines name the variant: the workload settings the sweep sets --------


def grid_names(overrides: list[str]) -> list[tuple[str, str]]:
    """(job folder, progress label) of every job of a sweep's grid, each job composed with its own
    overrides as the sweeper composes it: nothing runs."""
    from omegaconf import open_dict

    from hydra_plugins.profsweep_grid import grid

    master = compose("config", overrides=[o for o in overrides if "," not in o], return_hydra_config=True)
    names = []
    for number, job in enumerate(grid.jobs(grid.axes(grid.arguments(master.hydra.sweeper.params, overrides)))):
        cfg = compose("config", overrides=list(job), return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.job.num = number
        names.append((str(cfg.hydra.sweep.subdir), job_config(cfg).label))
    return names


def test_part3_job_folders_and_progress_lines_name_their_backends(hydra_conf):
    from experiments.records import artifact_stem

    params = yaml.safe_load((CONF / "experiment" / "part3.yaml").read_text())["hydra"]["sweeper"]["params"]
    sizes, backends = params["size"].split(","), params["workload.backend"].split(",")
    names = grid_names(["+experiment=part3"])
    assert [folder.split("_", 1)[0] for folder, _ in names] == [str(n) for n in range(len(names))]
    assert {(folder.split("_", 1)[1], label) for folder, label in names} == {
        (f"attention-{b}_{s}_bf16_warm_eager", f"attention backend={b} size={s} bf16 warm eager")
        for s in sizes for b in backends
    }
    # The files inside keep the article's stem.
    cfg = compose("config", overrides=["+experiment=part3", "size=128", "workload.backend=flash", "warmup=true"])
    assert artifact_stem(job_config(cfg)) == "128_bf16_warm_eager"


def test_the_own_model_example_names_both_hidden_values(hydra_conf):
    # README's command; hidden=512 is the factory's default and is named all the same.
    names = grid_names(["workload=custom", "workload._target_=mybench.blocks:make_block",
                        "workload.hidden=512,1024", "size=128,512", "compile=true,false"])
    assert len(names) == 8
    for hidden in (512, 1024):
        mine = [(folder, label) for folder, label in names if f"hidden={hidden} " in label]
        assert len(mine) == 4
        for folder, label in mine:
            assert folder.split("_", 1)[1].startswith(f"make_block-hidden{hidden}_")
            assert label.startswith(f"make_block hidden={hidden} size=")
    assert names[0] == ("0_make_block-hidden512_128_bf16_cold_compile",
                        "make_block hidden=512 size=128 bf16 cold compile")


def test_default_jobs_keep_their_folder_names(hydra_conf):
    assert grid_names(["size=8,16", "compile=false,true"]) == [
        ("0_matmul_add_8_bf16_cold_eager", "matmul_add size=8 bf16 cold eager"),
        ("1_matmul_add_8_bf16_cold_compile", "matmul_add size=8 bf16 cold compile"),
        ("2_matmul_add_16_bf16_cold_eager", "matmul_add size=16 bf16 cold eager"),
        ("3_matmul_add_16_bf16_cold_compile", "matmul_add size=16 bf16 cold compile"),
    ]
    run_dir = compose("config", overrides=["size=8"], return_hydra_config=True).hydra.run.dir
    assert run_dir.endswith("_matmul_add_8_bf16_cold_eager")
    # A workload chosen by its group, no setting of its own swept: named as before.
    assert grid_names(["workload=mlp,bmm", "size=8"])[0] == ("0_mlp_8_bf16_cold_eager", "mlp size=8 bf16 cold eager")


def test_every_job_names_the_same_settings_whatever_their_values(hydra_conf):
    names = grid_names(["workload=attention", "workload.causal=true,false", "workload.batch=1",
                        "workload.backend=math", "size=8"])
    assert names == [
        ("0_attention-math-batch1-causal_8_bf16_cold_eager",
         "attention backend=math batch=1 causal=True size=8 bf16 cold eager"),
        ("1_attention-math-batch1-nocausal_8_bf16_cold_eager",
         "attention backend=math batch=1 causal=False size=8 bf16 cold eager"),
    ]
    run_dir = compose("config", overrides=["workload=attention", "workload.backend=flash"],
                      return_hydra_config=True).hydra.run.dir
    assert run_dir.endswith("_attention-flash_64_bf16_cold_eager")


def test_a_running_job_names_its_variant_from_its_own_hydra_config(hydra_conf):
    # Hydra hands the task its config without the `hydra` node: the job's overrides then come from
    # HydraConfig, as in experiments.task.task.
    from hydra.core.hydra_config import HydraConfig

    overrides = ["workload=bmm", "workload.batch=8", "size=8"]
    saved = HydraConfig.instance().cfg
    try:
        HydraConfig.instance().set_config(compose("config", overrides=overrides, return_hydra_config=True))
        config = job_config(compose("config", overrides=overrides))
    finally:
        HydraConfig.instance().cfg = saved
    assert config.label == "bmm batch=8 size=8 bf16 cold eager"  # 8 is bmm's default


@pytest.mark.parametrize(
    "overrides,settings",
    [
        (["size=8", "workload=custom", "workload._target_=a.b:c", "workload.name=x", "+experiment=part3"], []),
        (["workload.hidden=1", "+workload.dim=2", "++workload.depth=3", "~workload.bias", "run.repeat=2"],
         ["depth", "dim", "hidden"]),
        (["workload.hidden=1", "workload.hidden=2"], ["hidden"]),
    ],
)
def test_the_settings_named_are_the_workload_settings_among_the_overrides(overrides, settings):
    from experiments.config import overridden_settings

    assert overridden_settings(overrides) == settings


@pytest.mark.parametrize(
    "key,value,word",
    [
        ("backend", "flash", "flash"),
        ("hidden", 1024, "hidden1024"),
        ("lr", 0.5, "lr0.5"),
        ("causal", True, "causal"),
        ("causal", False, "nocausal"),
        ("shape", [64, 128], "shape64x128"),
        ("path", "data/my file.bin", "data_my_file.bin"),
        ("tag", "", "tagempty"),
        ("mode", None, "modeNone"),
    ],
)
def test_a_setting_in_a_folder_name_is_folder_safe(key, value, word):
    from experiments.config import NAME_PATTERN, folder_word

    assert folder_word(key, value) == word
    assert NAME_PATTERN.match(word)


def test_variant_settings_are_not_part_of_the_config_hash():
    from experiments.records import config_hash

    config = JobConfig(workload=WorkloadConfig.builtin("bmm", batch=2))
    named = dataclasses.replace(config, run=dataclasses.replace(config.run, variant_settings="batch"))
    assert named.label == "bmm batch=2 size=64 bf16 cold eager" and config.label == "bmm size=64 bf16 cold eager"
    assert config_hash(named) == config_hash(config)  # resume finds a job whatever its folder's name
    with pytest.raises(ConfigError, match="run.variant_settings='batch,size' is not allowed"):
        dataclasses.replace(config.run, variant_settings="batch,size")


def test_a_grid_point_reads_the_same_in_the_progress_lines_and_in_the_analysis():
    from analysis.history.engine import point_labels
    from profsweep.contract import GridPoint, Job, point_label

    config = JobConfig(workload=WorkloadConfig.builtin("mlp"), size=64, dtype="bf16", warmup=True, train=True)
    row = {"variant": "mlp", "workload": "mlp", "size": 64.0, "dtype": "bf16", "warmup": "True", "compile": False,
           "train": True, "optimizer": "adamw", "device": "cpu", "job": "0_mlp_64_bf16_warm_eager_train"}
    assert config.label == GridPoint(row).label() == Job(row).label() == point_label(row) \
        == "mlp size=64 bf16 warm eager train adamw"
    assert GridPoint({"job": "4_x_r3"}).label() == "4_x" and Job({"job": "4_x_r3"}).label() == "4_x_r3"
    assert point_labels([row], ["workload", "size", "dtype", "warmup", "compile", "train", "optimizer"]) == [config.label]
    assert point_label({**row, "device": "cuda"}) == config.label + " on cuda"
    assert point_label(row, without=["compile", "warmup"]) == "mlp size=64 bf16 train adamw"
    assert point_label({"job": "3_x", "size": float("nan"), "dtype": ""}) == "3_x"


def test_an_unknown_key_is_named_with_the_keys_there_are():
    """+foo=1 said "JobConfig.__init__() got an unexpected keyword argument 'foo'" (a reviewer's
    finding): the key, as the user wrote it, and what the configuration has."""
    with pytest.raises(ConfigError, match=r"^foo is not allowed: it is not a key of this configuration \(the keys: "
                                          r"size, dtype, compile, warmup"):
        config_from_dict({"foo": 1})
    with pytest.raises(ConfigError, match=r"^run\.foo is not allowed: .*run\.repeats"):
        config_from_dict({"run": {"foo": 1}})
