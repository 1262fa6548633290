"""Expectations: "guess first, then look". A person states what the trace should show, in the
config or on the command line, and the analysis checks every statement against every job it
applies to (expectations.csv; the report opens with the mismatches).

    expect:
      - step_kernels_median == 5
      - host_us_per_step < 200 where size <= 64
      - regime == compute-bound where size >= 1024 and compile == false
      - op aten::copy_ absent
      - kernel *gemm* present where workload.backend == math

Forms: `METRIC CMP VALUE`, `op NAME present|absent`, `kernel GLOB present|absent` (kernel names
from kernels.csv; on the CPU the compute ops stand in), each optionally followed by
`where KEY CMP VALUE [and ...]`. CMP is one of == != < <= > >=; METRIC is a column of
summary.csv; KEY a grid key (size, dtype, compile, warmup, train, device, workload,
workload.<setting>) or any metric. Values are numbers, true/false, or words (quotes optional).

Light on purpose (standard library): the sweep process checks expectations before any job runs.
"""

from __future__ import annotations

import fnmatch
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from analysis.trace import FLAT_KEYS, PER_STEP_KEYS, PHASES

EXPECTATIONS_FILE = "expectations.csv"
EXPECT_FILE = "expect.json"  # what the sweep was asked to expect, written at its start
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt,
}
GRID_KEYS = ("workload", "variant", "size", "dtype", "compile", "warmup", "train", "optimizer", "device",
             "device_requested", "job")
# metrics.json's own measurements and the sweep analysis's derived columns (summary.csv).
RECORD_METRICS = (
    "status", "error", "device_name", "torch_version", "cuda_version", "first_call_ms", "warmup_ms",
    "flops_per_call", "bytes_per_call", "flops_source", "memory_estimate_bytes", "memory_available_bytes",
    "peak_memory_bytes", "peak_memory_reserved_bytes", "inductor_cache_misses", "inductor_cache_hits",
)
RECORD_FIELDS = (  # what a job's record says about itself (metrics.json), also columns
    "schema_version", "config_hash", "started_at", "finished_at", "hostname", "python_version", "git_commit",
    "git_dirty", "trace_file", "table_file", "trace_error", "record_error", "peak_memory_source",
    "isolation", "compile_cache", "warmup_iters", "job_timeout_s", "unavailable", "exit_code", "stderr_tail",
)
SETTING_PREFIXES = ("workload_", "profiler_", "compile_")  # the settings groups' keys, flattened
DERIVED_METRICS = (
    "host_us_per_step", "device_us_per_step", "compute_us_per_step", "overhead_us_per_step",
    "achieved_flops_per_s", "achieved_bytes_per_s", "peak_flops_per_s", "peak_bytes_per_s",
    "fraction_of_peak_flops", "arithmetic_intensity", "regime", "top_kernel", "top_kernel_calls",
    "top_kernel_median_us", "top_kernel_min_us", "top_kernel_max_us", "top_kernel_spread",
    "malformed_names",
)
_CMP = r"(==|!=|<=|>=|<|>)"
_METRIC_FORM = re.compile(rf"^\s*([\w.]+)\s*{_CMP}\s*(.+?)\s*$")
_PRESENCE_FORM = re.compile(r"^\s*(op|kernel)\s+(\S+)\s+(present|absent)\s*$", re.IGNORECASE)


class ExpectationError(ValueError):
    """An expectation that cannot be checked; the message names it and what is allowed."""


def known_metrics() -> set[str]:
    per_step = list(PER_STEP_KEYS) + [f"{p}_{k}" for p in PHASES for k in ("host_us", "compute_us", "device_us")]
    stepped = {f"step_{k}_{stat}" for k in per_step for stat in ("median", "min", "max")}
    return set(FLAT_KEYS) | stepped | set(RECORD_METRICS) | set(RECORD_FIELDS) | set(DERIVED_METRICS) | set(GRID_KEYS)


def is_known(key: str, known: set[str]) -> bool:
    """A column summary.csv has (or may have: any setting of a settings group)."""
    return key in known or key.startswith(SETTING_PREFIXES) or key.startswith("workload.")


@dataclass(frozen=True)
class Condition:
    key: str  # a summary column (workload.backend -> workload_backend)
    cmp: str
    value: Any

    def holds(self, row: Mapping[str, Any]) -> bool:
        return _compare(row.get(self.key), self.cmp, self.value) is True


@dataclass(frozen=True)
class Expectation:
    text: str
    kind: str  # metric | op | kernel
    subject: str  # the metric's column, the op's name, the kernel's glob
    cmp: str  # for metrics; "present" / "absent" for ops and kernels
    value: Any
    where: tuple[Condition, ...] = ()

    def applies(self, row: Mapping[str, Any]) -> bool:
        return all(c.holds(row) for c in self.where)

    @property
    def expected(self) -> str:
        return f"{self.cmp} {_show(self.value)}" if self.kind == "metric" else self.cmp


def _column(key: str) -> str:
    return "workload_" + key[len("workload."):] if key.startswith("workload.") else key


def _value(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _show(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def parse(text: str, known: set[str] | None = None) -> Expectation:
    """One expectation; ExpectationError names what is wrong with it."""
    if not isinstance(text, str) or not text.strip():
        raise ExpectationError(f"expect: {text!r} is not an expectation: write e.g. 'step_kernels_median == 5'")
    known = known_metrics() if known is None else known
    parts = re.split(r"\s+where\s+", text.strip(), maxsplit=1)
    head, tail = parts[0], parts[1] if len(parts) > 1 else ""
    conditions = []
    for part in re.split(r"\s+and\s+", tail) if tail else []:
        m = _METRIC_FORM.match(part)
        if not m:
            raise ExpectationError(f"expect: {text!r}: the condition {part!r} is not KEY CMP VALUE "
                                   f"(CMP: {' '.join(COMPARISONS)})")
        key = m.group(1)
        if not is_known(key, known):
            raise ExpectationError(f"expect: {text!r}: unknown key {key!r} in the condition; use a grid key "
                                   f"({', '.join(GRID_KEYS[:9])}, workload.<setting>) or a column of summary.csv")
        conditions.append(Condition(_column(key), m.group(2), _value(m.group(3))))
    presence = _PRESENCE_FORM.match(head)
    if presence:
        kind, subject, verdict = presence.group(1).lower(), presence.group(2), presence.group(3).lower()
        if kind == "op" and not re.match(r"^[A-Za-z_]\w*::\w+(\.\w+)?$", subject):
            raise ExpectationError(f"expect: {text!r}: {subject!r} is not an operator name: write it as "
                                   "namespace::name, e.g. aten::copy_")
        return Expectation(text, kind, subject, verdict, None, tuple(conditions))
    m = _METRIC_FORM.match(head)
    if not m:
        raise ExpectationError(f"expect: {text!r} is not an expectation: write 'METRIC CMP VALUE', "
                               "'op NAME present|absent' or 'kernel GLOB present|absent', then optionally "
                               "'where KEY CMP VALUE [and ...]'")
    metric = m.group(1)
    if not is_known(metric, known):
        close = sorted(k for k in known if metric.split("_")[0] in k)[:6]
        raise ExpectationError(f"expect: {text!r}: unknown metric {metric!r}; metrics are the columns of "
                               f"summary.csv" + (f" (e.g. {', '.join(close)})" if close else ""))
    return Expectation(text, "metric", _column(metric), m.group(2), _value(m.group(3)), tuple(conditions))


def parse_all(texts: Iterable[str] | None) -> list[Expectation]:
    if texts is None:
        return []
    if isinstance(texts, str):
        texts = [texts]
    known = known_metrics()
    return [parse(t, known) for t in texts]


def unknown_operators(expectations: Sequence[Expectation]) -> list[str]:
    """Operators named by `op` expectations that torch does not have (imports torch, once)."""
    names = [e.subject for e in expectations if e.kind == "op"]
    if not names:
        return []
    import torch

    unknown = []
    for name in names:
        namespace, _, op = name.partition("::")
        try:
            getattr(getattr(torch.ops, namespace), op.split(".")[0])
        except (AttributeError, RuntimeError):
            unknown.append(name)
    return unknown


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _compare(measured: Any, cmp: str, expected: Any) -> bool | None:
    """None when the job has no value to compare (a device metric on the CPU)."""
    if measured is None or (isinstance(measured, float) and math.isnan(measured)):
        return None
    if isinstance(expected, bool):
        if isinstance(measured, str):
            measured = measured.strip().lower() == "true"
        return COMPARISONS[cmp](bool(measured), expected) if cmp in ("==", "!=") else None
    a, b = _number(measured), _number(expected)
    if a is not None and b is not None:
        return COMPARISONS[cmp](a, b)
    if cmp in ("==", "!="):
        return COMPARISONS[cmp](str(measured), str(expected))
    return None


def check(expectations: Sequence[Expectation], jobs: Sequence[Mapping[str, Any]],
          op_calls: Mapping[str, Mapping[str, int]], kernel_calls: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """One row per (expectation, job it applies to): what was measured and whether it holds."""
    rows = []
    for e in expectations:
        for job in jobs:
            if job.get("status") != "ok" or job.get("trace_error") or not e.applies(job):
                continue
            name = str(job["job"])
            if e.kind == "metric":
                measured = job.get(e.subject)
                verdict = _compare(measured, e.cmp, e.value)
                shown = _show(measured) if measured is not None else "no value"
            else:
                calls = op_calls.get(name, {}) if e.kind == "op" else kernel_calls.get(name, {})
                found = sum(n for k, n in calls.items() if (k == e.subject if e.kind == "op"
                                                             else fnmatch.fnmatchcase(k, e.subject)))
                verdict = (found > 0) == (e.cmp == "present")
                shown = f"{found} calls" if found else "absent"
            rows.append({"expectation": e.text, "job": name, "measured": shown, "expected": e.expected,
                         "holds": "n/a" if verdict is None else "true" if verdict else "false"})
    return rows
