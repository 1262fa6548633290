"""Memory over the step (profiler.profile_memory=true): the allocator's total over the last recorded
step from the trace's `[memory]` events, its peak and the op that reached it, checked against a
hand count of what the workload allocates."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.trace import analyse_trace
from tests.conftest import job_dirs, run_cli


def _event(ts: float, nbytes: int, total: int, device_type: int = 0, tid: int = 1) -> dict:
    return {"ph": "i", "name": "[memory]", "cat": "cpu_instant_event", "s": "t", "ts": ts, "pid": 1, "tid": tid,
            "args": {"Bytes": nbytes, "Total Allocated": total, "Total Reserved": 0, "Device Type": device_type,
                     "Device Id": -1, "Addr": 1}}


def _op(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {}}


def test_the_peak_of_the_last_step_and_the_op_that_reached_it_by_hand(tmp_path):
    events = [
        _op("ProfilerStep#1", 0, 100, "user_annotation"), _op("aten::ones", 10, 5), _event(11, 1000, 1000),
        _op("ProfilerStep#2", 100, 100, "user_annotation"),
        _op("aten::empty", 110, 5), _event(111, 4000, 5000),  # 1000 left from step 1, then +4000
        _op("aten::cat", 130, 20), _op("aten::empty", 131, 2), _event(132, 8000, 13000),  # the peak: 13000
        _event(160, -4000, 9000),
        _event(170, 512, 9512, device_type=1),  # another device's: not the CPU's timeline
        _event(300, 1, 9001),  # after the last step
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    m = analyse_trace(path)
    assert m["memory_step"] == "ProfilerStep#2"
    assert (m["step_allocated_start_bytes"], m["step_allocated_peak_bytes"]) == (1000, 13000)
    assert m["step_allocated_peak_op"] == "aten::empty"  # the innermost op around the allocation, inside aten::cat
    assert m["memory_timeline"] == [(0.0, 1000), (pytest.approx(11.0), 5000), (pytest.approx(32.0), 13000),
                                    (pytest.approx(60.0), 9000), (pytest.approx(100.0), 9000)]


def test_a_trace_without_memory_events_has_no_timeline(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [_op("ProfilerStep#1", 0, 100, "user_annotation"),
                                                _op("aten::mm", 10, 5)]}))
    m = analyse_trace(path)
    assert m["step_allocated_peak_bytes"] is None and m["memory_timeline"] == []


FACTORY = '''
import torch


def make(*, size, dtype, device):
    """Allocates a and b (size KiB each, float32), then their concatenation (2 size KiB): a peak
    of 4 size KiB above the step's start, reached by aten::cat."""
    def step(a0):
        a = torch.ones(size * 256, dtype=torch.float32)
        b = a * 2
        c = torch.cat([a, b])
        del a, b
        return c.sum()
    return step, (torch.zeros(1),)
'''


@pytest.mark.slow
def test_a_profile_memory_sweep_draws_memory_over_the_step_as_counted_by_hand(tmp_path, sweep_dir):
    (tmp_path / "memwork.py").write_text(FACTORY)
    done = run_cli("-m", "workload=custom", "workload._target_=memwork:make", "size=64,256",
                   "profiler.profile_memory=true", "run.ceilings=off", f"hydra.sweep.dir={sweep_dir}",
                   env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    summary = pd.read_csv(sweep_dir / "summary.csv").sort_values("size")
    for _, row in summary.iterrows():
        grew = row["step_allocated_peak_bytes"] - row["step_allocated_start_bytes"]
        assert abs(grew - 4 * row["size"] * 1024) <= 64, row  # a few bytes of scalars at most
        assert row["step_allocated_peak_op"] == "aten::cat"
    timeline = pd.read_csv(sweep_dir / "memory_timeline.csv")
    assert set(timeline["job"]) == {d.name for d in job_dirs(sweep_dir)}
    assert (sweep_dir / "plots" / "memory_timeline.png").is_file()
