"""What changed between two measurements of one grid point, shared by compare and history: every
op by its self time on the host and every kernel by its time on the device, per profiled step,
the median over a grid point's repeats, calls per step beside, ranked by the size of the change
(`time_diff`); and what differs between two sweeps' environments (`environment_diff`), with
whether the machine's speed probe measured the same thing on both (`same_probe`)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from analysis.trace import same_op
from profsweep import stats

ENVIRONMENT_KEYS = ("torch_version", "cuda_build", "driver_version", "gpus", "cpu_model", "cpu_count",
                    "hostname", "git_commit", "git_dirty", "command", "python_version", "platform")
WHERE_OVERRIDES = ("hydra.sweep.dir=", "hydra.run.dir=", "hydra.sweep.subdir=", "+hydra.sweep.dir=",
                   "++hydra.sweep.dir=")  # where a sweep wrote, not how it ran: left out of the command's diff


# --- the diff of ops and kernels: self time per step, calls beside ---------------------------------------
#
# An outer join by name, as HTA's TraceDiff, ranked by how much each op's time changed: per
# profiled step, each side divided by its own step count (two sweeps may profile 5 and 20 steps),
# over a grid point's repeats the median of each repeat's per-step figure. Ops are timed by their
# self time on the host, kernels by their time on the device (on the CPU the "kernels" are the
# compute ops, already among the ops: left out).


@dataclass(frozen=True)
class Use:
    """One op's (or kernel's) use in one job, per profiled step."""

    calls: float
    self_us: float  # ops: self time on the host; kernels: time on the device


def per_step(rows: Iterable[tuple[str, float, float]], steps: Any) -> dict[str, Use]:
    """(name, calls, µs) over a job's trace -> per name, per profiled step (a trace without
    `ProfilerStep#` is one step); a compiled graph under any hash is one name."""
    n = stats.number(steps) or 1
    found: dict[str, list[float]] = {}
    for name, calls, spent in rows:
        total = found.setdefault(same_op(name), [0.0, 0.0])
        total[0] += calls
        total[1] += spent
    return {name: Use(calls / n, spent / n) for name, (calls, spent) in found.items()}


DIFF_DECIMALS = {"self_us_per_step_base": 3, "self_us_per_step_new": 3, "self_us_per_step_diff": 3,  # ns
                 "self_us_per_step_ratio": 4, "calls_per_step_base": 3, "calls_per_step_new": 3}
DIFF_COLUMNS = ("rank", "name", "change", "self_us_per_step_base", "self_us_per_step_new", "self_us_per_step_diff",
                "self_us_per_step_ratio", "calls_per_step_base", "calls_per_step_new")


def time_diff(base: Sequence[dict[str, Use]], new: Sequence[dict[str, Use]]) -> list[dict[str, Any]]:
    """Per name, from each side's repeats (one dict per repeat, an absent name: not called): the
    median over the repeats of self µs and calls per step, NEW - BASE and NEW / BASE; `change`
    says appeared, vanished, slower, faster or calls (the time the same). Names whose time and
    calls are the same on both sides are left out. Ranked by the size of the change in time,
    either way: what moved the step most comes first, and BASE and NEW swapped rank alike."""

    def median(side: Sequence[dict[str, Use]], name: str, attr: str) -> float:
        return statistics.median(getattr(r[name], attr) if name in r else 0.0 for r in side) if side else 0.0

    rows = []
    for name in sorted({n for r in [*base, *new] for n in r}):
        b, n = median(base, name, "self_us"), median(new, name, "self_us")
        calls_b, calls_n = median(base, name, "calls"), median(new, name, "calls")
        if b == n and calls_b == calls_n:
            continue
        in_base, in_new = any(name in r for r in base), any(name in r for r in new)
        change = ("appeared" if not in_base else "vanished" if not in_new else
                  "slower" if n > b else "faster" if n < b else "calls")
        rows.append({"name": name, "change": change, "self_us_per_step_base": b, "self_us_per_step_new": n,
                     "self_us_per_step_diff": n - b, "self_us_per_step_ratio": n / b if b else None,
                     "calls_per_step_base": calls_b, "calls_per_step_new": calls_n})
    rows.sort(key=lambda r: (-abs(r["self_us_per_step_diff"]),
                             -abs(r["calls_per_step_new"] - r["calls_per_step_base"]), r["name"]))
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return [{k: row[k] for k in DIFF_COLUMNS} for row in rows]


def calls_changed(rows: Iterable[dict[str, Any]]) -> int:
    """How many ops (or kernels) appeared, vanished or changed calls per step."""
    return sum(1 for r in rows if r["calls_per_step_base"] != r["calls_per_step_new"])


def environment_diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, before, after) for each environment key that differs between two sweeps; values as
    environment.json holds them or as text (the history store's). The command is compared without
    the folder it wrote to: two runs of one command into two folders ran the same way."""
    shown = [(k, _comparable(k, a.get(k)), _comparable(k, b.get(k))) for k in ENVIRONMENT_KEYS]
    return [(k, x, y) for k, x, y in shown if x != y]


def _comparable(key: str, value: Any) -> str:
    if key == "command" and isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if key == "command" and isinstance(value, list):
        value = [arg for arg in value if not str(arg).startswith(WHERE_OVERRIDES)]
    return _show(value)


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else "" if value is None else str(value)


PROBE_DEPENDS_ON = ("torch_version", "cpu_model", "hostname", "cpu_count")


def same_probe(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two environments' probes measure the same thing: the same torch, CPU and host."""
    return not {k for k, _, _ in environment_diff(a, b)} & set(PROBE_DEPENDS_ON)
