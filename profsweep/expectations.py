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

The grammar lives here, in the package both sides import: the sweep process checks every
expectation before any job runs (standard library only), and the analysis (analysis/report/expect.py)
judges them against the sweep's tables.
"""

from __future__ import annotations

import fnmatch
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from profsweep.columns import (  # noqa: F401  (the columns an expectation may name)
    DERIVED_METRICS, GRID_KEYS, KERNEL_COLUMNS, NUMBER_SUFFIXES, OP_COLUMNS, RECORD_FIELDS, RECORD_METRICS,
    SETTING_PREFIXES, TEXT_COLUMNS, is_known, known_metrics,
)
from profsweep.contract import SERIES_KEYS, SUMMARY_FILE

EXPECTATIONS_FILE = "expectations.csv"
EXPECT_FILE = "expect.json"  # what the sweep was asked to expect, written at its start
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt,
}
RELATIVE = ("smallest", "largest")  # condition values resolved per series
REGIMES = ("overhead-bound", "compute-bound", "memory-bound")
WORD_KEYS = frozenset({"regime", "workload", "dtype", "device", "optimizer"})  # text whatever the grid
_WORD = re.compile(r"^[\w.:+\-*/@#%~]+$")  # an unquoted value: one token, no comparison or quote
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


@dataclass(frozen=True)
class Condition:
    key: str  # a summary column (workload.backend -> workload_backend)
    cmp: str
    value: Any

    def holds(self, row: Mapping[str, Any], extremes: Mapping[tuple, Any] | None = None) -> bool:
        if self.cmp == "in":
            return any(compare_values(row.get(self.key), "==", v) is True for v in self.value)
        value = self.value
        if value in RELATIVE:
            value = (extremes or {}).get((self.key, value, series_of(row)))
            if value is None:
                return False
        return compare_values(row.get(self.key), self.cmp, value) is True


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
        return f"{self.cmp} {show_value(self.value)}" + (" per step" if self.kind != "metric" and not self.column else "")

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


def _value(text: str, value: str) -> Any:
    """One VALUE of expectation `text`: a number (finite), true/false, none, or a word; a value
    with spaces or symbols in it must be quoted (`host_us_per_step == 5 5`, `=== 5`, `16 and` are
    refused, not read as words)."""
    value = value.strip()
    if value[:1] in ("'", '"'):
        if len(value) >= 2 and value[-1] == value[0]:
            return value[1:-1]
        raise ExpectationError(f"expect: {text!r}: the quote in {value!r} is never closed")
    if not value or not _WORD.match(value):
        raise ExpectationError(f"expect: {text!r}: {value!r} is not one value: give a number, true/false or a "
                               "word (quote a value with spaces or symbols in it), and join conditions with 'and'")
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        return value
    if not math.isfinite(number):
        raise ExpectationError(f"expect: {text!r}: {value!r} is not a finite number")
    return number


# columns that hold numbers whatever the sweep: size, and measurements by their unit's or statistic's
# suffix (a setting's name is the user's: its suffix says nothing)
MEASURED_SUFFIXES = (*NUMBER_SUFFIXES, "_median", "_min", "_max", "_frac", "_low", "_high")


def _comparable(text: str, keys: Sequence[str], cmp: str, value: Any, relative: bool = False) -> None:
    """Refuse what can never be judged: an order (< <= > >=) against a word or on a text column,
    a regime that is none of the three, a series' end (smallest, largest) outside a condition."""
    ordering = cmp in ("<", "<=", ">", ">=")
    if ordering and (value is None or isinstance(value, (str, bool))) and not (relative and value in RELATIVE):
        raise ExpectationError(f"expect: {text!r}: {cmp} needs a number, not {show_value(value)!r}")
    text_keys = [k for k in keys if k in TEXT_COLUMNS or k in WORD_KEYS]
    numbers = [k for k in keys if k == "size" or (k.endswith(MEASURED_SUFFIXES) and not k.startswith(SETTING_PREFIXES))]
    if cmp in ("==", "!=") and isinstance(value, str) and value not in RELATIVE and number_of(value) is None and numbers:
        raise ExpectationError(f"expect: {text!r}: {numbers[0]} is a number, which {value!r} never equals: "
                               "give a number")
    if ordering and text_keys:
        raise ExpectationError(f"expect: {text!r}: {text_keys[0]} is text: compare it with == or !=")
    if "regime" in keys and cmp in ("==", "!=") and value not in REGIMES:
        raise ExpectationError(f"expect: {text!r}: {show_value(value)!r} is not a regime: use one of {', '.join(REGIMES)}")
    if not relative and isinstance(value, str) and value in RELATIVE:
        raise ExpectationError(f"expect: {text!r}: {value} names a series' end, which only a condition can use: "
                               f"write e.g. 'regime == overhead-bound where size == {value}'")


def show_value(value: Any) -> str:
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
        values = tuple(_value(text, v) for v in within.group(2).split(",") if v.strip())
        if not values:
            raise ExpectationError(f"expect: {text!r}: {part!r} names no value: write e.g. '{key} in 64,1024'")
        for value in values:
            _comparable(text, (_column(key),), "==", value, relative=True)
        return Condition(_column(key), "in", values)
    value = _value(text, m.group(3))
    _comparable(text, (_column(key),), m.group(2), value, relative=True)
    return Condition(_column(key), m.group(2), value)


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
        value = _value(text, value)
        numeric = column is None or column not in TEXT_COLUMNS
        counted = column is None and isinstance(value, bool)  # calls per step: a count, never true/false
        if counted or numeric and not isinstance(value, (int, float)) and not (column is not None and value in columns):
            raise ExpectationError(f"expect: {text!r}: {column or 'calls per step'} is a number: compare it with a "
                                   f"number{'' if column is None else f', true/false or another column of {kind}s.csv'}, "
                                   f"not {show_value(value)!r}")
        if not numeric:
            _comparable(text, (column,), cmp, value)
        return Expectation(text, kind, subject, cmp, value, conditions, column)
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
    value = _value(text, m.group(3))
    _comparable(text, terms, m.group(2), value)
    return Expectation(text, "metric", " + ".join(terms), m.group(2), value, conditions, terms=terms)


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


def number_of(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def compare_values(measured: Any, cmp: str, expected: Any) -> bool | None:
    """None when the job has no value to compare (a device metric on the CPU)."""
    if measured is None or (isinstance(measured, float) and math.isnan(measured)):
        return None
    if isinstance(expected, bool):
        if isinstance(measured, str):
            measured = measured.strip().lower() == "true"
        return COMPARISONS[cmp](bool(measured), expected) if cmp in ("==", "!=") else None
    a, b = number_of(measured), number_of(expected)
    if a is not None and b is not None:
        return COMPARISONS[cmp](a, b)
    if cmp in ("==", "!="):
        return COMPARISONS[cmp](str(measured), str(expected))
    return None


def series_of(row: Mapping[str, Any]) -> tuple:
    return tuple(show_value(row.get(k)) for k in SERIES_KEYS)
