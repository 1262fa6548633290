"""Expectations: "guess first, then look". A person states what the trace should show, in the
config or on the command line, and the analysis checks every statement against every job it
applies to (expectations.csv; the report opens with the mismatches).

    expect:
      - step_kernels_median == 5
      - host_us_per_step < 200 where size <= 64
      - regime == compute-bound where size >= 1024 and compile == false
      - op aten::copy_ absent
      - kernel *gemm* present where workload.backend == math

Forms: `METRIC CMP VALUE` (METRIC a column of summary.csv, or a sum `A + B`),
`op NAME present|absent`, `kernel GLOB present|absent` (kernel names from kernels.csv; on the CPU
the compute ops stand in), `op NAME CMP N` / `kernel GLOB CMP N` (calls per profiled step, of the
kernels matching GLOB summed), `op NAME COLUMN CMP VALUE` / `kernel GLOB COLUMN CMP VALUE` (every
matching op or kernel: COLUMN of ops.csv / kernels.csv; VALUE may name another column, e.g.
`kernel *gemm* after_occupancy_query == calls`), each optionally followed by
`where KEY CMP VALUE [and ...]`. CMP is one of == != < <= > >=; a condition may also be
`KEY in A,B,C`, and its VALUE `smallest` / `largest` (of the job's series over KEY: the jobs
that differ from it only in KEY). KEY is a grid key (size, dtype, compile, warmup, train, device,
workload, workload.<setting>) or any metric. Values are numbers, true/false, or words (quotes
optional). NAME is an operator (`aten::copy_`) or a runtime call (`cuLaunchKernelEx`).

Claims (the article's statements, as data in the presets) are entries of the same list:

    claim PART: WHAT THE ARTICLE SAYS | article: ITS NUMBER | where: CONDITIONS
      | check: EXPECTATION | check if run: EXPECTATION | cuda only | needs: WHY N/A

one string (a YAML `>-` block folds it onto one line). Every `check` must apply to a job of the
sweep (else the claim is n/a, `needs` saying why); a `check if run` is checked where it applies;
`where` is added to every check; `cuda only` checks only jobs with device time and says so on a
CPU run. The claim holds when every check holds on every job it applies to (claims.csv).

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
from profsweep.contract import SERIES_KEYS, SUMMARY_FILE

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
    "timed_us_per_step", "timed_steps", "timed_slow_steps", "torch_threads", "cpu_count", "other_cpus",
    "cpu_pressure", "loadavg_1m", "lock_wait_s", "measured_s",
)
RECORD_FIELDS = (  # what a job's record says about itself (metrics.json), also columns
    "schema_version", "config_hash", "started_at", "finished_at", "hostname", "python_version", "git_commit",
    "git_dirty", "trace_file", "table_file", "trace_error", "record_error", "peak_memory_source",
    "isolation", "compile_cache", "warmup_iters", "job_timeout_s", "unavailable", "start", "exit_code", "stderr_tail",
    "repeat", "repeats_planned", "precision", "max_repeats", "threads", "platform",
)
SETTING_PREFIXES = ("workload_", "profiler_", "compile_")  # the settings groups' keys, flattened
DERIVED_METRICS = (
    "host_us_per_step", "device_us_per_step", "compute_us_per_step", "overhead_us_per_step",
    "achieved_flops_per_s", "achieved_bytes_per_s", "peak_flops_per_s", "peak_bytes_per_s",
    "fraction_of_peak_flops", "arithmetic_intensity", "regime", "top_kernel", "top_kernel_calls",
    "top_kernel_median_us", "top_kernel_min_us", "top_kernel_max_us", "top_kernel_spread",
    "malformed_names", "trace_bytes", "profiler_overhead_ratio", "regime_uncertain", "work_host_ratio",
    # over the repeats of a grid point (summary.csv)
    "repeats", "repeats_failed", "jobs", "noisy", "noise_reason", "noise_load", "spread", "dispersion",
    "interval_width",
)
OP_COLUMNS = ("calls", "self_host_us", "self_device_us", "compute_calls")  # ops.csv
KERNEL_COLUMNS = ("calls", "total_us", "median_us", "min_us", "max_us", "after_occupancy_query", "tensor_cores",
                  "occupancy_pct", "registers_per_thread", "shared_memory_bytes", "block")  # kernels.csv
RELATIVE = ("smallest", "largest")  # condition values resolved per series
CUDA_ONLY = "CUDA only: needs the CUDA kernels' trace"
_CMP = r"(==|!=|<=|>=|<|>)"
_METRIC_FORM = re.compile(rf"^\s*([\w.]+(?:\s*\+\s*[\w.]+)*)\s*{_CMP}\s*(.+?)\s*$")
_IN_FORM = re.compile(r"^\s*([\w.]+)\s+in\s+(.+?)\s*$")
_PRESENCE_FORM = re.compile(r"^\s*(op|kernel)\s+(\S+)\s+(present|absent)\s*$", re.IGNORECASE)
_COUNT_FORM = re.compile(rf"^\s*(op|kernel)\s+(\S+)\s+(?:([A-Za-z_]\w*)\s+)?{_CMP}\s*(.+?)\s*$", re.IGNORECASE)
_OPERATOR = re.compile(r"^[A-Za-z_]\w*::\w+(\.\w+)?$")
_RUNTIME_CALL = re.compile(r"^(cuda|cu|hip|mtia)[A-Z]\w*$")  # cudaLaunchKernel, cuLaunchKernelEx, ...
_CLAIM_HEAD = re.compile(r"^\s*claim\s+(\S+?):\s*(.+?)\s*$", re.IGNORECASE)


class ExpectationError(ValueError):
    """An expectation that cannot be checked; the message names it and what is allowed."""


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


@dataclass(frozen=True)
class Condition:
    key: str  # a summary column (workload.backend -> workload_backend)
    cmp: str
    value: Any

    def holds(self, row: Mapping[str, Any], extremes: Mapping[tuple, Any] | None = None) -> bool:
        if self.cmp == "in":
            return any(_compare(row.get(self.key), "==", v) is True for v in self.value)
        value = self.value
        if value in RELATIVE:
            value = (extremes or {}).get((self.key, value, _series(row)))
            if value is None:
                return False
        return _compare(row.get(self.key), self.cmp, value) is True


@dataclass(frozen=True)
class Expectation:
    text: str
    kind: str  # metric | op | kernel
    subject: str  # the metric's column, the op's name, the kernel's glob
    cmp: str  # for metrics; "present" / "absent" for ops and kernels
    value: Any
    where: tuple[Condition, ...] = ()
    column: str | None = None  # op/kernel: a column of ops.csv/kernels.csv; None: calls per step
    terms: tuple[str, ...] = ()  # metric: the columns summed (one for a plain metric)

    def applies(self, row: Mapping[str, Any], extremes: Mapping[tuple, Any] | None = None) -> bool:
        return all(c.holds(row, extremes) for c in self.where)

    @property
    def expected(self) -> str:
        if self.cmp in ("present", "absent"):
            return self.cmp
        return f"{self.cmp} {_show(self.value)}" + (" per step" if self.kind != "metric" and not self.column else "")

    @property
    def label(self) -> str:
        """What it measures, in short: `regime`, `op aten::mm`, `kernel *gemm* tensor_cores`."""
        if self.kind == "metric":
            return " + ".join(self.terms) or self.subject
        return " ".join(x for x in (self.kind, self.subject, self.column) if x)


@dataclass(frozen=True)
class ClaimSpec:
    """One of the article's claims as data: what it says, its number, the checks that test it."""

    text: str
    part: str
    claim: str
    article: str
    checks: tuple[Expectation, ...]
    required: tuple[bool, ...]  # False: `check if run`
    cuda_only: bool = False
    needs: str = ""


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


def _condition(text: str, part: str, known: set[str]) -> Condition:
    m = _METRIC_FORM.match(part)
    within = None if m else _IN_FORM.match(part)
    if not m and not within:
        raise ExpectationError(f"expect: {text!r}: the condition {part!r} is not KEY CMP VALUE "
                               f"(CMP: {' '.join(COMPARISONS)}) or KEY in A,B,...")
    key = (m or within).group(1)
    if not is_known(key, known):
        raise ExpectationError(f"expect: {text!r}: unknown key {key!r} in the condition; use a grid key "
                               f"({', '.join(GRID_KEYS[:9])}, workload.<setting>) or a column of summary.csv")
    if within:
        return Condition(_column(key), "in", tuple(_value(v) for v in within.group(2).split(",") if v.strip()))
    return Condition(_column(key), m.group(2), _value(m.group(3)))


def _op_name(text: str, subject: str) -> None:
    if not (_OPERATOR.match(subject) or _RUNTIME_CALL.match(subject)):
        raise ExpectationError(f"expect: {text!r}: {subject!r} is not an operator name: write it as "
                               "namespace::name, e.g. aten::copy_ (or a runtime call, e.g. cuLaunchKernelEx)")


def parse(text: str, known: set[str] | None = None) -> Expectation:
    """One expectation; ExpectationError names what is wrong with it."""
    if not isinstance(text, str) or not text.strip():
        raise ExpectationError(f"expect: {text!r} is not an expectation: write e.g. 'step_kernels_median == 5'")
    known = known_metrics() if known is None else known
    parts = re.split(r"\s+where\s+", text.strip(), maxsplit=1)
    head, tail = parts[0], parts[1] if len(parts) > 1 else ""
    conditions = tuple(_condition(text, part, known) for part in (re.split(r"\s+and\s+", tail) if tail else []))
    presence = _PRESENCE_FORM.match(head)
    if presence:
        kind, subject, verdict = presence.group(1).lower(), presence.group(2), presence.group(3).lower()
        if kind == "op":
            _op_name(text, subject)
        return Expectation(text, kind, subject, verdict, None, conditions)
    counted = _COUNT_FORM.match(head)
    if counted:
        kind, subject, column, cmp, value = counted.groups()
        kind = kind.lower()
        if kind == "op":
            _op_name(text, subject)
        columns = OP_COLUMNS if kind == "op" else KERNEL_COLUMNS
        if column is not None and column not in columns:
            raise ExpectationError(f"expect: {text!r}: {column!r} is not a column of {kind}s.csv; "
                                   f"use one of {', '.join(columns)}")
        return Expectation(text, kind, subject, cmp, _value(value), conditions, column)
    m = _METRIC_FORM.match(head)
    if not m:
        raise ExpectationError(f"expect: {text!r} is not an expectation: write 'METRIC CMP VALUE', "
                               "'op NAME present|absent' or 'kernel GLOB present|absent', then optionally "
                               "'where KEY CMP VALUE [and ...]'")
    terms = tuple(t.strip() for t in m.group(1).split("+"))
    for metric in terms:
        if not is_known(metric, known):
            close = sorted(k for k in known if metric.split("_")[0] in k)[:6]
            raise ExpectationError(f"expect: {text!r}: unknown metric {metric!r}; metrics are the columns of "
                                   f"{SUMMARY_FILE}" + (f" (e.g. {', '.join(close)})" if close else ""))
    terms = tuple(_column(t) for t in terms)
    return Expectation(text, "metric", " + ".join(terms), m.group(2), _value(m.group(3)), conditions, terms=terms)


def is_claim(text: Any) -> bool:
    return isinstance(text, str) and bool(_CLAIM_HEAD.match(text.split(" | ", 1)[0]))


def parse_claim(text: str, known: set[str] | None = None) -> ClaimSpec:
    """`claim PART: TEXT | article: ... | where: ... | check: ... | check if run: ... | cuda only | needs: ...`"""
    known = known_metrics() if known is None else known
    fields = [f.strip() for f in " ".join(text.split()).split(" | ")]
    head = _CLAIM_HEAD.match(fields[0])
    if not head:
        raise ExpectationError(f"expect: {text!r} is not a claim: start it with 'claim PART: what it says'")
    article, where, needs, cuda_only, checks = "", "", "", False, []
    for f in fields[1:]:
        name, _, value = f.partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "cuda only" and not value:
            cuda_only = True
        elif name in ("article", "where", "needs") and value:
            article, where, needs = (value if name == n else old for n, old in
                                     (("article", article), ("where", where), ("needs", needs)))
        elif name in ("check", "check if run") and value:
            checks.append((value, name == "check"))
        else:
            raise ExpectationError(f"expect: claim {head.group(2)!r}: {f!r} is not a field of a claim; use "
                                   "article:, where:, check:, check if run:, cuda only, needs:")
    if not checks:
        raise ExpectationError(f"expect: claim {head.group(2)!r} has no 'check: EXPECTATION'")
    parsed = []
    for check_text, _ in checks:
        full = check_text if not where else (f"{check_text} and {where}" if re.search(r"\s+where\s+", check_text)
                                             else f"{check_text} where {where}")
        parsed.append(parse(full, known))
    return ClaimSpec(text, head.group(1), head.group(2), article, tuple(parsed), tuple(r for _, r in checks),
                     cuda_only, needs)


def parse_all(texts: Iterable[str] | None) -> list[Expectation]:
    """The expectations of `expect` (its claims are checked too, and left to parse_claims)."""
    if texts is None:
        return []
    if isinstance(texts, str):
        texts = [texts]
    known = known_metrics()
    out = []
    for t in texts:
        if is_claim(t):
            parse_claim(t, known)
        else:
            out.append(parse(t, known))
    return out


def parse_claims(texts: Iterable[str] | None) -> list[ClaimSpec]:
    """The claims among `expect`'s entries, in their order."""
    if texts is None:
        return []
    known = known_metrics()
    return [parse_claim(t, known) for t in ([texts] if isinstance(texts, str) else texts) if is_claim(t)]


def unknown_operators(expectations: Sequence[Expectation]) -> list[str]:
    """Operators named by `op` expectations that torch does not have (imports torch, once)."""
    names = [e.subject for e in expectations if e.kind == "op" and not _RUNTIME_CALL.match(e.subject)]
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


INCONCLUSIVE = "inconclusive"


def interval_of(row: Mapping[str, Any], terms: Sequence[str]) -> tuple[float, float] | None:
    """The 95% interval of a metric (or a sum of metrics) of a summary row, where it has one
    (`<metric>_low`, `<metric>_high`: the timing metrics measured over repeats)."""
    lows = [_number(row.get(f"{t}_low")) for t in terms]
    highs = [_number(row.get(f"{t}_high")) for t in terms]
    if None in lows or None in highs:
        return None
    return sum(lows), sum(highs)  # type: ignore[arg-type]


def compare_interval(low: float, high: float, cmp: str, expected: Any) -> bool | str | None:
    """A comparison of an interval with a number: True when the whole interval satisfies it,
    False when none of it does, INCONCLUSIVE when the interval straddles the number. Equality
    is checked on the value, not the interval (None: not for this comparison)."""
    value = _number(expected)
    if value is None or cmp not in ("<", "<=", ">", ">="):
        return None
    whole, none_ = (high, low) if cmp in ("<", "<=") else (low, high)
    if COMPARISONS[cmp](whole, value):
        return True
    if not COMPARISONS[cmp](none_, value):
        return False
    return INCONCLUSIVE


def separated(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Two intervals that do not overlap."""
    return a[1] < b[0] or b[1] < a[0]


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


def _series(row: Mapping[str, Any]) -> tuple:
    return tuple(_show(row.get(k)) for k in SERIES_KEYS)


def _extremes(expectations: Sequence[Expectation], jobs: Sequence[Mapping[str, Any]]) -> dict[tuple, Any]:
    """(key, smallest|largest, series) -> the value, for the conditions that name one."""
    keys = {c.key for e in expectations for c in e.where if c.value in RELATIVE}
    found: dict[tuple, list[float]] = {}
    for job in jobs:
        if job.get("status") != "ok" or job.get("trace_error"):
            continue
        for key in keys:
            number = _number(job.get(key))
            if number is not None:
                found.setdefault((key, _series(job)), []).append(number)
    out = {}
    for (key, series), values in found.items():
        out[(key, "smallest", series)], out[(key, "largest", series)] = min(values), max(values)
    return out


def _calls(entry: Any) -> int:
    return int(entry["calls"]) if isinstance(entry, Mapping) else int(entry)


def _per_step(found: int, job: Mapping[str, Any]) -> float | None:
    steps = _number(job.get("steps"))
    return found / steps if steps else None


def _attribute(e: Expectation, matched: Mapping[str, Any]) -> tuple[bool | None, str]:
    """Every matching op or kernel against the expectation: (verdict, what was measured)."""
    if not matched:
        return False, "none"
    verdicts, seen = [], []
    columns = OP_COLUMNS if e.kind == "op" else KERNEL_COLUMNS
    for name, entry in matched.items():
        row = entry if isinstance(entry, Mapping) else {"calls": entry}
        measured = row.get(e.column)
        expected = row.get(e.value) if isinstance(e.value, str) and e.value in columns else e.value
        verdicts.append(_compare(measured, e.cmp, expected))
        shown = _show(measured) if measured is not None else "no value"
        seen.append(shown if expected is e.value else f"{shown}/{_show(expected)}")
    verdict = False if False in verdicts else None if None in verdicts else True
    return verdict, f"{', '.join(seen)} in {len(matched)} {e.kind}{'s' if len(matched) > 1 else ''}"


def check(expectations: Sequence[Expectation], jobs: Sequence[Mapping[str, Any]],
          op_calls: Mapping[str, Mapping[str, Any]], kernel_calls: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (expectation, job it applies to): what was measured and whether it holds.
    op_calls / kernel_calls: job -> name -> its calls, or its row of ops.csv / kernels.csv (which
    the COLUMN forms need)."""
    rows = []
    extremes = _extremes(expectations, jobs)
    for e in expectations:
        for job in jobs:
            if job.get("status") != "ok" or job.get("trace_error") or not e.applies(job, extremes):
                continue
            name = str(job["job"])
            if e.kind == "metric":
                values = [job.get(t) for t in e.terms] if len(e.terms) > 1 else [job.get(e.subject)]
                numbers = [_number(v) for v in values]
                measured = values[0] if len(values) == 1 else (sum(numbers) if None not in numbers else None)
                verdict = _compare(measured, e.cmp, e.value)
                shown = _show(measured) if measured is not None else "no value"
                interval = interval_of(job, e.terms or (e.subject,)) if measured is not None else None
                if e.terms == ("regime",) and verdict is not None and job.get("regime_uncertain") in (True, "True"):
                    verdict = INCONCLUSIVE  # work / host may be either side of 1
                    shown += " (uncertain: the interval of work / host holds 1)"
                if interval is not None:
                    # measured over repeats: it holds only when its whole interval does
                    verdict = compare_interval(*interval, e.cmp, e.value) if e.cmp not in ("==", "!=") else verdict
                    shown = f"{_show(measured)} [{interval[0]:.4g}, {interval[1]:.4g}]"
            else:
                calls = op_calls.get(name, {}) if e.kind == "op" else kernel_calls.get(name, {})
                matched = {k: v for k, v in calls.items() if (k == e.subject if e.kind == "op"
                                                               else fnmatch.fnmatchcase(k, e.subject))}
                found = sum(_calls(v) for v in matched.values())
                if e.cmp in ("present", "absent"):
                    verdict = (found > 0) == (e.cmp == "present")
                    shown = f"{found} calls" if found else "absent"
                elif e.column is None:
                    per_step = _per_step(found, job)
                    verdict = _compare(per_step, e.cmp, e.value)
                    shown = f"{per_step:g} per step" if per_step is not None else "no value"
                else:
                    verdict, shown = _attribute(e, matched)
            rows.append({"expectation": e.text, "job": name, "measured": shown, "expected": e.expected,
                         "holds": "n/a" if verdict is None else verdict if verdict == INCONCLUSIVE
                         else "true" if verdict else "false"})
    return rows


def _on_device(job: Mapping[str, Any]) -> bool:
    return _number(job.get("device_us_per_step")) is not None


def _summary(label: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """`regime: overhead-bound (4 jobs)`; the jobs named where a value does not hold."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        groups.setdefault((r["measured"], r["holds"]), []).append(r["job"])
    order = sorted(groups.items(), key=lambda kv: (kv[0][1] != "false", -len(kv[1])))
    said = []
    for (measured, holds), names in order:
        count = f"{len(names)} job{'s' if len(names) > 1 else ''}"
        named = holds != "true" or len(names) == 1  # the jobs named where it does not hold
        said.append(f"{measured} ({count}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                    if named else f"{measured} ({count})")
    return f"{label}: {'; '.join(said)}"


def judge(claim: ClaimSpec, jobs: Sequence[Mapping[str, Any]], op_calls: Mapping[str, Mapping[str, Any]],
          kernel_calls: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """A claim against the sweep's jobs: {measured, holds (true|false|n/a), jobs}."""
    ok = [j for j in jobs if j.get("status") == "ok" and not j.get("trace_error")]
    extremes = _extremes(claim.checks, ok)
    on_device = [j for j in ok if _on_device(j)]
    pool = on_device if claim.cuda_only else ok
    for e, required in zip(claim.checks, claim.required):
        if required and not any(e.applies(j, extremes) for j in pool):
            cpu_only = claim.cuda_only and (not on_device or any(e.applies(j, extremes) for j in ok))
            return {"measured": CUDA_ONLY if cpu_only else claim.needs or f"no job for '{e.text}'",
                    "holds": "n/a", "jobs": ""}
    said, verdicts, names = [], [], []
    for e, required in zip(claim.checks, claim.required):
        rows = check([e], pool, op_calls, kernel_calls)
        if not rows:
            continue
        said.append(_summary(e.label, rows))
        holds = {r["holds"] for r in rows}
        verdicts.append("false" if "false" in holds else INCONCLUSIVE if INCONCLUSIVE in holds
                        else "true" if "true" in holds else "n/a" if required else "true")
        names += [r["job"] for r in rows if r["job"] not in names]
    holds = ("false" if "false" in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts
             else "n/a" if "n/a" in verdicts or not verdicts else "true")
    return {"measured": "; ".join(said), "holds": holds, "jobs": ", ".join(names)}
