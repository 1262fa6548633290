"""The columns of the sweep's tables, by where they come from: one registry that the
expectations, the analysis and the report read (a new metric is one line here).

- the grid: keys of a grid point (GRID_KEYS) and its settings, flattened (SETTING_PREFIXES);
- the record: what metrics.json says about the job and measured itself (RECORD_FIELDS,
  RECORD_METRICS);
- the trace: totals over the profiled window (FLAT_KEYS) and per-step statistics
  (PER_STEP_KEYS, and per training PHASES), `step_<key>_median|min|max` in summary.csv;
- derived by the analysis (DERIVED_METRICS); ops.csv's and kernels.csv's columns.
A timing metric measured over repeats also has `<metric>_low` and `<metric>_high`.
"""

from __future__ import annotations

import re

# The record's fields that must be text (analysis.tables.untrusted checks every record).
TEXT_FIELDS = ("workload", "dtype", "device", "device_requested", "status", "optimizer", "workload_target",
               "device_name", "torch_version", "cuda_version", "hostname", "config_hash", "flops_source",
               "flops_uncounted", "trace_file", "trace_sizes", "table_file", "start", "isolation", "compile_cache", "allocator", "unavailable", "ran_dtype",
               "ran_device", "variant_settings", "timed_in", "timed_error", "side_by_side_error")
# Columns of the written tables that hold text whatever their values look like: names (a job
# folder named 7, an op), a hash or a commit of digits and an `e`, the record's text fields. Every
# reader of the tables keeps them text: compare, profsweep.load, the history store.
TEXT_COLUMNS = frozenset({*TEXT_FIELDS, "job", "jobs", "name", "variant", "point", "noise_reason", "error",
                          "trace_error", "record_error", "step_name", "category", "kind", "git_commit",
                          "python_version", "kernel", "top_kernel", "step_allocated_peak_op"})
PHASES = ("forward", "backward", "optimizer")  # a training step's record_function phases
# Totals over the profiled window (units in the names).
FLAT_KEYS = (
    "window", "platform", "steps", "self_cpu_total_us", "self_device_total_us",
    "compute_us", "overhead_us", "kernels_total", "launches_total", "memcpys_total",
    "memsets_total", "occupancy_queries_total", "dead_window_us", "malformed_events",
    # memory over the last recorded step (profiler.profile_memory=true)
    "memory_step", "step_allocated_start_bytes", "step_allocated_peak_bytes", "step_allocated_peak_op",
)
# Per-step statistics (step_<key>_median/min/max in summary.csv; phases add <phase>_host_us, ...).
PER_STEP_KEYS = (
    "host_us", "body_us", "outside_us", "self_cpu_us", "compute_us", "overhead_us", "device_us", "kernels", "launches", "memcpys",
    "occupancy_queries", "aten_ops", "sync_us", "gpu_busy", "launch_lag_us", "top_kernel_us",
)
GRID_KEYS = ("workload", "variant", "size", "dtype", "compile", "warmup", "train", "optimizer", "device",
             "device_requested", "job")
# metrics.json's own measurements and the sweep analysis's derived columns (summary.csv).
RECORD_METRICS = (
    "status", "error", "device_name", "torch_version", "cuda_version", "first_call_ms", "warmup_ms",
    "flops_per_call", "bytes_per_call", "flops_source", "flops_uncounted", "memory_estimate_bytes", "memory_available_bytes",
    "peak_memory_bytes", "peak_memory_reserved_bytes", "inductor_cache_misses", "inductor_cache_hits",
    "provenance_kernels", "recompiles", "recompile_limit", "timed_us_per_step", "timed_steps", "timed_slow_steps", "timed_minor_faults_per_step",
    "side_by_side_eager_us", "side_by_side_compiled_us", "side_by_side_ratio", "side_by_side_steps", "speed_probe_us",
    "overhead_probe_us", "cache_probe_us", "speed_probe_before_us", "speed_probe_after_us", "torch_threads", "cpu_count", "other_cpus",
    "cpu_pressure", "loadavg_1m", "lock_wait_s", "measured_s", "ran_dtype", "ran_device", "warnings",
)
RECORD_FIELDS = (  # what a job's record says about itself (metrics.json), also columns
    "schema_version", "config_hash", "started_at", "finished_at", "hostname", "python_version", "git_commit",
    "git_dirty", "trace_file", "trace_sizes", "table_file", "trace_error", "record_error", "peak_memory_source",
    "isolation", "compile_cache", "warmup_iters", "job_timeout_s", "unavailable", "start", "exit_code", "stderr_tail",
    "repeat", "repeats_planned", "precision", "max_repeats", "threads", "allocator", "platform", "variant_settings",
    "timed_in", "timed_error", "side_by_side_error", "failure_is_final", "ceilings",
)
# How metrics.json flattens the config: each settings group's keys under a prefix (compiler.mode ->
# compile_mode, workload.hidden -> workload_hidden), run.* unprefixed (run.repeats -> repeats_planned).
SETTING_GROUPS = {"workload": "workload_", "profiler": "profiler_", "compiler": "compile_", "run": ""}
SETTING_PREFIXES = tuple(p for p in SETTING_GROUPS.values() if p)  # the settings groups' keys, flattened
# A measured column's unit, by its name's suffix: a number whatever its values look like.
NUMBER_SUFFIXES = ("_us", "_ms", "_s", "_bytes", "_per_s", "_ratio", "_per_call", "_per_step")
WORKLOAD_PREFIX = SETTING_GROUPS["workload"]


def flat_key(key: str) -> str:
    """The summary column of a config key as a person types it: workload.hidden -> workload_hidden,
    compiler.mode -> compile_mode, run.threads -> threads (other keys as they are)."""
    group, dot, rest = key.partition(".")
    return SETTING_GROUPS[group] + rest if dot and group in SETTING_GROUPS else key
DERIVED_METRICS = (
    "host_us_per_step", "device_us_per_step", "compute_us_per_step", "overhead_us_per_step",
    "achieved_flops_per_s", "achieved_bytes_per_s", "peak_flops_per_s", "peak_bytes_per_s",
    "fraction_of_peak_flops", "peak_source", "achieved_flops_frac", "achieved_bandwidth_frac", "arithmetic_intensity", "regime", "top_kernel", "top_kernel_calls",
    "top_kernel_median_us", "top_kernel_min_us", "top_kernel_max_us", "top_kernel_spread",
    "malformed_names", "trace_bytes", "profiler_overhead_ratio", "regime_uncertain", "work_host_ratio",
    "regime_source", "regime_processes_needed", "work_overhead_ratio", "ridge_flops_per_byte",
    "ridge_flops_per_byte_low", "ridge_flops_per_byte_high", "regime_at_ridge",
    # over the repeats of a grid point (summary.csv)
    "repeats", "repeats_failed", "jobs", "noisy", "noise_reason", "noise_load", "spread", "dispersion",
    "interval_width",
)
OP_COLUMNS = ("calls", "self_host_us", "self_device_us", "compute_calls", "category",
              "self_host_us_step_median")  # ops.csv
KERNEL_COLUMNS = ("calls", "total_us", "median_us", "min_us", "max_us", "after_occupancy_query", "tensor_cores",
                  "occupancy_pct", "registers_per_thread", "shared_memory_bytes", "block", "step_median_us")  # kernels.csv


def known_metrics() -> set[str]:
    per_step = list(PER_STEP_KEYS) + [f"{p}_{k}" for p in PHASES for k in ("host_us", "compute_us", "device_us")]
    stepped = {f"step_{k}_{stat}" for k in per_step for stat in ("median", "min", "max")}
    return set(FLAT_KEYS) | stepped | set(RECORD_METRICS) | set(RECORD_FIELDS) | set(DERIVED_METRICS) | set(GRID_KEYS)


def is_known(key: str, known: set[str]) -> bool:
    """A column summary.csv has (or may have: any setting of a settings group, any metric's
    interval `<metric>_low` / `<metric>_high`)."""
    base = re.sub(r"_(low|high)$", "", key)
    return (key in known or base in known or key.startswith(SETTING_PREFIXES)
            or key.startswith("workload."))
