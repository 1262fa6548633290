"""Many sweeps over time: which grid points changed, when, by how much, and is it real.

    python -m analysis history SWEEP... [--out DIR] [--ignore KEY ...] [--fail-on-change R] [--order given]

The sweeps (folders, or folders of them) go into the store DIR/history.duckdb (analysis/store.py),
the new ones only. They are ordered by start time (or as given), their grid points paired as
compare pairs two sweeps' (the same keys, the same --ignore: analysis/compare/engine.py), and each grid
point's series of repeats is searched for changes (analysis/history/changes.py). Across the grid, false
discoveries are controlled with Benjamini-Hochberg at 0.05 over every change's p-value (and the
best split of every series where none was found). Each change found gets what changed at its
step: the environment of the sweeps on either side (torch, driver, commit, machine ...), the
ignored settings that differ, and its ops and kernels by the change in time per step
(compare.time_diff), in words. Written: regressions.csv, trends.csv, history.html.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from analysis.history import changes
from analysis.diff import Use, environment_diff, per_step, same_probe, time_diff
from analysis.points import PAIR_KEYS, PAIR_PREFIXES, PROBE_NAMES, PYTHON_PROBES, pair_key_of, pairing_columns
from analysis.text import us
from analysis.history.page import write_page
from analysis.store import Store, StoreError, SweepFolder
from profsweep import stats
from profsweep.contract import PAIR_DEFAULTS, GridPoint, amount, only_with, pair_identity, read_plan, usable_sql
from profsweep.decide import ABOVE, BELOW, FDR, current_band, decide, percent

METRICS = ("timed_us_per_step", "host_us_per_step")  # each repeat's value: its un-profiled median step, else
# its profiled step's host self time (per series: the first every sweep of it has)
# The machine's probes of each repeat's process (experiments/job.py, analysis.points.PROBE_NAMES): a
# change of the step that a probe made too is the machine's, not the code's (compare.against_the_machine).
PROBE = "speed_probe_us"
MOMENTS = (*METRICS, *PROBE_NAMES)
METRIC_WORDS = {"timed_us_per_step": "un-profiled step", "host_us_per_step": "host self time per profiled step"}
REGRESSION_COLUMNS = ("point", "change_at", "change_at_time", "before_us", "after_us", "ratio", "ratio_low",
                      "ratio_high", "status", "p_value", "before_sweep", "sweeps_before", "sweeps_after",
                      "measured_on", "what_changed", "environment_changed", "noise", "speed_probe_ratio",
                      "overhead_probe_ratio", "cache_probe_ratio")
ENVIRONMENT_WORDS = {"torch_version": "torch", "cuda_build": "CUDA", "driver_version": "driver", "gpus": "GPUs",
                     "cpu_model": "CPU", "cpu_count": "CPUs", "hostname": "host", "git_commit": "commit",
                     "git_dirty": "uncommitted changes", "python_version": "python", "platform": "platform"}
WORD_SHARE = 0.05  # an op or kernel is named when its time per step moved by 5% of the step or more
WORDS_OPS, WORDS_KERNELS = 3, 2


@dataclass
class Point:
    """One grid point in one sweep: what its usable repeats (finished, trace read) say."""

    sweep: int  # its sweep's place in the order
    job: str  # its first job (summary.csv's `job`)
    moments: dict[str, tuple[int, float, float]]  # metric -> (repeats, mean and variance of their logs)
    noise: str | None  # why it was measured on a loaded machine, if it was
    repeats: list[dict[str, Any]] = field(default_factory=list)  # their rows, read for changed lines only
    settings: dict[str, Any] = field(default_factory=dict)  # the ignored keys' values, for changes only


@dataclass
class Line:
    """One grid point across the sweeps: the points that pair, in order, and what was found."""

    key: tuple  # (its identity's number in the store, k-th such point of a sweep)
    row: dict[str, Any]  # its grid keys and names, as the latest sweep has them
    label: str
    points: list[Point]
    metric: str | None = None
    series: changes.Series | None = None
    found: list[int] = field(default_factory=list)
    shifts: list[changes.Shift] = field(default_factory=list)  # its changes of level, judged
    smallest: float | None = None  # the smallest step its history could have found (changes.smallest)
    tested: bool = False  # whether its series could be tested at all (one process a sweep: not)

    def values(self, point: Point) -> list[float]:
        """The point's repeats' values (read for changed lines only)."""
        found = (stats.number(r.get(self.metric)) for r in point.repeats) if self.metric else ()
        return [v for v in found if v is not None and v > 0]


@dataclass
class History:
    sweeps: list[dict[str, Any]]  # the sweeps table's rows, in order
    columns: list[str]  # pairing columns
    ignored: list[str]
    lines: list[Line]
    tested: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)  # regressions.csv's rows


def order(sweeps: list[SweepFolder], given: bool) -> list[SweepFolder]:
    """By start time, those that started together (copies of one sweep) as given: the copy kept
    (Store.copies) is then the one named first, not the one whose path sorts first."""
    return list(sweeps) if given else sorted(sweeps, key=lambda s: s.started_at)


def load(store: Store, ids: Sequence[int], ignore: Sequence[str]) -> History:
    """The sweeps' grid points, paired across the sweeps into lines. The pairing is compare's
    (its columns, --ignore and defaults: a grid point's identity), computed in the store, as are
    the moments of each point's repeats: only numbers come back, one row per sweep and point."""
    c = store.con
    c.execute("CREATE OR REPLACE TEMP TABLE _chosen (sweep_id INTEGER, place INTEGER)")
    c.execute("INSERT INTO _chosen VALUES " + ", ".join(f"({i}, {n})" for n, i in enumerate(ids)))
    by_id = {r["sweep_id"]: r for r in store.rows("SELECT * FROM sweeps JOIN _chosen USING (sweep_id)")}
    sweeps = [by_id[i] for i in ids]
    have = store.columns("history")
    candidates = [k for k in have if k in PAIR_KEYS or k.startswith(PAIR_PREFIXES)]
    counts = c.execute(f"SELECT {', '.join(f'count({_q(k)})' for k in candidates)} FROM history "
                       "WHERE sweep_id IN (SELECT sweep_id FROM _chosen)").fetchone() if candidates else ()
    present = [{k: None for k, n in zip(candidates, counts) if n}]
    known = set(pairing_columns(present, ()))
    asked = [pair_key_of(k) for k in ignore]
    unknown = [k for k, a in zip(ignore, asked) if a not in known]
    if unknown:
        raise StoreError(f"--ignore {unknown[0]!r} is not a key that pairs jobs: choose from {', '.join(sorted(known))}")
    columns = pairing_columns(present, asked)
    ignored = [k for k in asked if k in known]
    _points_table(store, have, columns, ignored)
    lines: dict[tuple, Line] = {}
    for line, nth, place, job, noise, *moments in c.execute(
            f"SELECT line, nth, place, point_job, noise, {', '.join(f'n_{m}, mean_{m}, var_{m}' for m in MOMENTS)} "
            "FROM _points ORDER BY line, nth, place").fetchall():
        key = (line, nth)
        if key not in lines:
            lines[key] = Line(key, {}, "", [])
        lines[key].points.append(Point(place, job, {m: tuple(moments[3 * i: 3 * i + 3])  # type: ignore[misc]
                                                    for i, m in enumerate(MOMENTS)}, noise))
    shown = [k for k in dict.fromkeys([*columns, "variant", "workload"]) if k in have]
    latest = ", ".join(["arg_max(point_job, place)", *(f"arg_max({_q(k)}, place)" for k in shown)])
    for line, nth, job, *values in c.execute(f"SELECT line, nth, {latest} FROM _points GROUP BY line, nth").fetchall():
        row = {"job": job, **dict(zip(shown, values))}
        blank = pair_identity(row, columns)  # a setting that does not apply to the line (an eager point's
        gone = {k for k, v in zip(columns, blank) if v is None and row.get(k) is not None}  # compile_mode): left out
        lines[(line, nth)].row = {k: v for k, v in row.items() if k not in gone}
    found = sorted(lines.values(), key=lambda ln: (tuple(_order(ln.row.get(k)) for k in columns), ln.key[1]))
    said = _ignored_values(store, [k for k in ignored if k in have])
    seen: dict[str, int] = {}
    for line, label in zip(found, point_labels([ln.row for ln in found], columns)):
        label += f" ({said[line.key]})" if said.get(line.key) else ""  # what --ignore leaves out of its name
        seen[label] = seen.get(label, 0) + 1
        line.label = label + (f" #{seen[label]}" if seen[label] > 1 else "")  # a grid point twice in a sweep
    return History(sweeps, columns, ignored, found)


def _ignored_values(store: Store, ignored: list[str]) -> dict[tuple[int, int], str]:
    """Per line (line, nth), what the ignored keys were over its sweeps: `compile False`, or
    `allocator system → steady` where they changed ({} without --ignore)."""
    if not ignored:
        return {}
    names = ", ".join(f"_i{i}" for i in range(len(ignored)))
    seen: dict[tuple[int, int], list[list[Any]]] = {}
    for line, nth, *values in store.con.execute(f"SELECT line, nth, {names} FROM _points ORDER BY line, nth, place"
                                                ).fetchall():
        each = seen.setdefault((line, nth), [[] for _ in ignored])
        for held, value in zip(each, values):  # a setting that does not apply to a point (an eager
            if value is not None and (not held or held[-1] != value):  # point's compile_mode) has none
                held.append(value)

    def word(v: Any) -> str:  # a flag as compare says it (True), not as the store casts it (true)
        return str(v).capitalize() if str(v) in ("true", "false") else str(v)

    return {key: "; ".join(f"{k} {' → '.join(word(v) for v in held)}" for k, held in zip(ignored, each) if held)
            for key, each in seen.items()}


def _points_table(store: Store, have: dict[str, str], columns: list[str], ignored: list[str]) -> None:
    """_points: per chosen sweep and grid point with a usable repeat, its identity (`line`, and
    `nth` for a key twice in one sweep: k-th pairs with k-th), why it was noisy, and per metric
    the number, mean and variance of its repeats' logs."""
    def key(k: str) -> str:  # compare's pair_identity: NaN as no value, a missing key as its default
        value = f"CASE WHEN isnan({_q(k)}) THEN NULL ELSE {_q(k)} END" if have[k] in ("DOUBLE", "FLOAT") else _q(k)
        text = f"CAST({value} AS VARCHAR)"
        text = f"coalesce({text}, {_text(PAIR_DEFAULTS[k])})" if k in PAIR_DEFAULTS else text
        needed = only_with(k)
        if needed is None or needed not in have or needed not in columns:
            return text
        flag = f"lower(trim(CAST({_q(needed)} AS VARCHAR)))"  # profsweep.contract.pair_identity, in SQL
        return f"CASE WHEN {flag} IS NULL OR {flag} IN ('true', '1', '1.0', '', 'nan') THEN {text} END"

    def column(table: dict[str, str], k: str, alias: str | None = None) -> str:
        return f"{_q(k) if k in table else 'NULL'} AS {_q(alias or k)}"

    repeats = store.columns("repeats")  # a usable repeat: profsweep.contract.usable, in SQL
    usable = usable_sql(repeats)
    keys = [f"{key(k)} AS _k{i}" for i, k in enumerate(columns)] or ["'' AS _k0"]
    names = [f"_k{i}" for i in range(max(1, len(columns)))]
    raw = [column(have, k) for k in dict.fromkeys([*columns, *ignored, "variant", "workload"]) if k in have]
    noise = ("CASE WHEN TRY_CAST(noise_load AS BOOLEAN) THEN CAST(noise_reason AS VARCHAR) END"
             if {"noise_load", "noise_reason"} <= set(have) else "NULL")
    jobs = "coalesce(CAST(jobs AS VARCHAR), CAST(job AS VARCHAR))" if "jobs" in have else "CAST(job AS VARCHAR)"
    # the ignored keys' values: points alike in them pair first (see _join_across_ignored)
    alike = [f"{key(k)} AS _i{i}" for i, k in enumerate(ignored) if k in have]
    inames = [f"_i{i}" for i in range(len(alike))]
    moments = []
    for m in MOMENTS:
        v = f"TRY_CAST(o.{_q(m)} AS DOUBLE)"  # a column no job filled reads as text
        x = f"ln(CASE WHEN {v} > 0 THEN {v} END)"
        moments.append(f"count({x}) AS n_{m}, avg({x}) AS mean_{m}, coalesce(var_samp({x}), 0) AS var_{m}")
    store.con.execute(f"""CREATE OR REPLACE TEMP TABLE _points AS
        WITH p AS (
            SELECT h.sweep_id, c.place, CAST(h.job AS VARCHAR) AS point_job, {jobs} AS jobs, {noise} AS noise,
                   {', '.join(keys + alike + raw)}
            FROM history h JOIN _chosen c USING (sweep_id)),
        members AS (SELECT sweep_id, point_job, unnest(string_split(jobs, ';')) AS job FROM p),
        o AS (SELECT sweep_id, CAST(job AS VARCHAR) AS job, {', '.join(column(repeats, m) for m in MOMENTS)}
              FROM repeats WHERE sweep_id IN (SELECT sweep_id FROM _chosen) AND {usable}),
        agg AS (SELECT m.sweep_id, m.point_job, {', '.join(moments)}
                FROM members m JOIN o ON o.sweep_id = m.sweep_id AND o.job = m.job GROUP BY m.sweep_id, m.point_job)
        SELECT p.*, agg.* EXCLUDE (sweep_id, point_job),
               dense_rank() OVER (ORDER BY {', '.join(names)}) AS _grp,
               dense_rank() OVER (ORDER BY {', '.join(names + inames)}) AS _sub,
               row_number() OVER (PARTITION BY p.sweep_id, {', '.join(names + inames)}
                                  ORDER BY TRY_CAST(split_part(p.point_job, '_', 1) AS BIGINT), p.point_job) AS _k
        FROM p JOIN agg USING (sweep_id, point_job)""")
    _join_across_ignored(store, len(inames))


def _join_across_ignored(store: Store, ignored: int) -> None:
    """_points' `line` and `nth`. Points alike in every pairing key and in the ignored keys' values
    make one line (the k-th such point of each sweep pairs with the k-th: `_sub`, `_k`); lines that
    --ignore makes alike (one `_grp`) are then joined where no sweep has both, the two whose
    ignored values are apart in the fewest keys first, then in their order:
    `--ignore allocator` joins the sweeps run with `system` to those run with `steady`, while
    `--ignore compile` over sweeps that measured both keeps eager with eager and compiled with
    compiled, as compare pairs them (alike first, then apart in one key, ...). `nth` numbers a
    group's lines."""
    import pandas as pd

    units: dict[tuple[int, int, int], set[int]] = {}
    values: dict[int, tuple] = {}  # _sub -> the ignored keys' values
    extra = "".join(f", _i{i}" for i in range(ignored))
    for grp, sub, k, sweep, *alike in store.con.execute(f"SELECT _grp, _sub, _k, sweep_id{extra} FROM _points").fetchall():
        units.setdefault((grp, sub, k), set()).add(sweep)
        values[sub] = tuple(alike)
    by_group: dict[int, list[tuple[int, int]]] = {}
    for grp, sub, k in sorted(units):
        by_group.setdefault(grp, []).append((sub, k))
    rows, lines = [], 0
    for grp, members in by_group.items():
        # each unit its own line, then the closest two lines no sweep has both of joined, again and
        # again: the closest by how many ignored keys their values are apart in (two lines as far
        # apart as their farthest units: an eager line joined across the allocator is still two keys
        # from a compiled point on the other allocator), then by order
        line_of = list(range(len(members)))
        sweeps = [set(units[(grp, *m)]) for m in members]

        def apart(a: int, b: int) -> int:
            return max(sum(x != y for x, y in zip(values[members[i][0]], values[members[j][0]]))
                       for i, own in enumerate(line_of) if own == a for j, other in enumerate(line_of) if other == b)

        while True:
            roots = sorted(set(line_of))
            closest = min(((apart(a, b), a, b) for n, a in enumerate(roots) for b in roots[n + 1:]
                           if sweeps[a].isdisjoint(sweeps[b])), default=None)
            if closest is None:
                break
            _, a, b = closest
            sweeps[a] |= sweeps[b]
            line_of = [a if x == b else x for x in line_of]
        numbered: dict[int, tuple[int, int]] = {}  # a joined line -> (line, nth), in the order of its first unit
        for (sub, k), own in zip(members, line_of):
            if own not in numbered:
                lines += 1
                numbered[own] = (lines, len(numbered) + 1)
            rows.append({"_grp": grp, "_sub": sub, "_k": k, "line": numbered[own][0], "nth": numbered[own][1]})
    store.con.register("_lines", pd.DataFrame(rows, columns=["_grp", "_sub", "_k", "line", "nth"]).astype("int64"))
    store.con.execute("""CREATE OR REPLACE TEMP TABLE _points AS
        SELECT p.*, l.line, l.nth FROM _points p JOIN _lines l USING (_grp, _sub, _k)""")
    store.con.unregister("_lines")


def fill(store: Store, history: History, lines: Sequence[Line]) -> None:
    """Read the repeats (and the ignored settings) of the lines' points: what their plots, links
    and op diffs need."""
    if not lines:
        return
    have = store.columns("repeats")
    names = ["job", "steps", "platform", "trace_file", *METRICS]
    picked = ", ".join(f"r.{_q(k)}" if k in have else f"NULL AS {_q(k)}" for k in names)
    usable = usable_sql(have, "r")
    wanted = " OR ".join(f"(line = {ln.key[0]} AND nth = {ln.key[1]})" for ln in lines)
    settings = ", ".join(_q(k) for k in history.ignored)
    by_point = {(ln.key, p.sweep): p for ln in lines for p in ln.points}
    for row in store.rows(f"""
            WITH m AS (SELECT line, nth, place, sweep_id, unnest(string_split(jobs, ';')) AS job FROM _points
                       WHERE {wanted})
            SELECT m.line, m.nth, m.place, {picked} FROM m JOIN repeats r ON r.sweep_id = m.sweep_id
                AND CAST(r.job AS VARCHAR) = m.job WHERE {usable} ORDER BY m.place, r.job"""):
        by_point[((row.pop("line"), row.pop("nth")), row.pop("place"))].repeats.append(row)
    if settings:
        for row in store.rows(f"SELECT line, nth, place, {settings} FROM _points WHERE {wanted}"):
            by_point[((row.pop("line"), row.pop("nth")), row.pop("place"))].settings = row


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _text(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def point_labels(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    """`matmul_add size=64 bf16 cold eager` (a GridPoint's label), plus key=value for
    every other pairing key whose values differ between the lines."""
    shown = {"workload", "size", "dtype", "warmup", "compile", "train", "optimizer", "device"}
    varying = [c for c in columns if c not in shown and not c.startswith("workload_")
               and len({repr(_plain(r.get(c))) for r in rows}) > 1]
    without = [k for k in ("warmup", "compile") if k not in columns]
    return [" ".join([GridPoint({k: _plain(v) for k, v in r.items()}).label(without),
                      *(f"{c}={_plain(r.get(c))}" for c in varying if _plain(r.get(c)) is not None)]) for r in rows]


def _order(v: Any) -> tuple:
    """A sort key for a grid key's value of any kind (None first, then numbers, then text)."""
    v = _plain(v)
    if v is None:
        return (0, 0.0, "")
    if isinstance(v, (int, float)):  # and bool
        return (1, float(v), "")
    return (2, 0.0, str(v))


def _plain(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


# --- finding the changes ----------------------------------------------------------------------------


def analyse(history: History, fdr: float = FDR) -> None:
    """Per line its metric, series and changes; false discoveries controlled across the lines."""
    judged = []
    for line in history.lines:
        line.metric = next((m for m in METRICS if all(p.moments[m][0] for p in line.points)), None)
        if line.metric is not None and len(line.points) > 1:
            line.series = changes.from_moments([p.moments[line.metric] for p in line.points])
            judged.append(line)
    found, history.tested, tested = judge_each([line.series for line in judged], fdr)
    pools = changes.pooled_scatter([line.series for line in judged])
    for line, shifts, pool, able in zip(judged, found, pools, tested):
        line.tested = able
        line.shifts = changes.after_unconfirmed([_checked(line, s, history.sweeps) for s in shifts])
        line.found = [s.at for s in shifts]
        line.series = changes.with_pool(line.series, pool)
        line.smallest = changes.smallest(line.series)


def _checked(line: Line, shift: changes.Shift, sweeps: Sequence[dict[str, Any]]) -> changes.Shift:
    """A change is confirmed only as compare would call it (one rule, profsweep.decide): its
    interval past the band, also relative to each of the machine's probes that moved with it
    (compare.against_the_machine), and none of the sweeps it rests on (the last before it and the
    changes.CONFIRM from it on) measured on a loaded machine."""
    rests_on = _rests_on(line, shift)
    outcome = decide(shift.ratio, shift.low, shift.high).outcome
    relative = {outcome}
    for probe in PROBE_NAMES:
        machine = probe_shift(line, shift, sweeps, probe)
        if machine is not None and shift.low is not None and shift.high is not None:
            relative.add(decide(shift.ratio / machine, shift.low / machine, shift.high / machine).outcome)
    if shift.confirmed and (outcome not in (ABOVE, BELOW) or relative != {outcome} or any(p.noise for p in rests_on)):
        return replace(shift, confirmed=False)
    return shift


def _rests_on(line: Line, shift: changes.Shift) -> list[Point]:
    """The sweeps a change's confirmation rests on: the last before it and the changes.CONFIRM from it on."""
    return line.points[max(0, shift.at - 1): shift.at + changes.CONFIRM]


def probe_shift(line: Line, shift: changes.Shift, sweeps: Sequence[dict[str, Any]], probe: str = PROBE
                ) -> float | None:
    """How much longer the machine's probe (`probe`: analysis.points.PROBE_NAMES) took from the
    change on than before it, over the sweeps the change was judged on (each sweep's geometric mean
    of its repeats' probes, each sweep once), where it moved past the band; None where it did not,
    where a side's sweeps have no probe, or where the probe itself changed with the shift (another
    torch, CPU or host: analysis.diff.PROBE_DEPENDS_ON; another Python for the probes that time
    Python calls, PYTHON_PROBES), so that its change is part of the shift's."""
    def level(points: Sequence[Point]) -> float | None:
        found = [p.moments[probe][1] for p in points if p.moments.get(probe, (0,))[0]]
        return sum(found) / len(found) if found else None

    sides = (line.points[shift.start: shift.at], line.points[shift.at: shift.end])
    first = sweeps[line.points[shift.start].sweep]
    python = first.get("python_version")
    if not all(same_probe(first, sweeps[p.sweep]) and (probe not in PYTHON_PROBES
                                                      or sweeps[p.sweep].get("python_version") == python)
               for side in sides for p in side):
        return None
    before, after = level(sides[0]), level(sides[1])
    if before is None or after is None or abs(after - before) <= math.log(1 + current_band()) or abs(after - before) > 700:
        return None
    return math.exp(after - before)


def judge(many: Sequence[changes.Series], fdr: float = FDR) -> tuple[list[list[changes.Shift]], int]:
    """The changes of each series that are discoveries of Benjamini-Hochberg at `fdr` over every
    change's p-value and, for a series without one, its best split's; and how many were tested."""
    found, tested, _ = judge_each(many, fdr)
    return found, tested


def judge_each(many: Sequence[changes.Series], fdr: float = FDR
               ) -> tuple[list[list[changes.Shift]], int, list[bool]]:
    """`judge`, and for each series whether it could be tested at all (a p-value: no series of
    one process a sweep has one)."""
    tests: list[tuple[int, int | None, float | None]] = []  # (series, change or None, p)
    many = [changes.with_pool(s, pool) for s, pool in zip(many, changes.pooled_scatter(many))]
    for n, s in enumerate(many):
        found, first = changes.find(s)
        tests += [(n, at, p) for at, p in found] if found else [(n, None, first)]
    discovered = stats.benjamini_hochberg([p for _, _, p in tests], fdr)
    kept: dict[int, dict[int, float | None]] = {}
    for (n, at, p), yes in zip(tests, discovered):
        if at is not None and yes:
            kept.setdefault(n, {})[at] = p
    out = []
    for n, s in enumerate(many):
        at = sorted(kept.get(n, {}))
        out.append(changes.after_unconfirmed(changes.shifts(s, at, [kept[n][a] for a in at])))
    each = [False] * len(many)
    for n, _, p in tests:
        each[n] = each[n] or p is not None
    return out, sum(1 for _, _, p in tests if p is not None), each


# --- what changed at a step ---------------------------------------------------------------------------


def describe_changes(store: Store, history: History) -> None:
    """regressions.csv's rows: each change with what changed at its step, in words."""
    rows = []
    fill(store, history, [line for line in history.lines if line.shifts])
    for line in history.lines:
        for shift in line.shifts:
            before, after = line.points[shift.at - 1], line.points[shift.at]
            sweep_b, sweep_a = history.sweeps[before.sweep], history.sweeps[after.sweep]
            env = environment_diff(sweep_b, sweep_a)
            settings = [(c, _plain(before.settings.get(c)), _plain(after.settings.get(c))) for c in history.ignored
                        if repr(_plain(before.settings.get(c))) != repr(_plain(after.settings.get(c)))]
            ops = op_diff(store, sweep_b["sweep_id"], before, sweep_a["sweep_id"], after)
            said = change_words(env, settings, ops, shift.before)
            # every sweep the confirmation rests on that was measured loaded (the veto in _checked)
            noise = [f"{'before' if p is before else 'after' if p is after else 'confirming'} "
                     f"({history.sweeps[p.sweep]['name']}): {p.noise}" for p in _rests_on(line, shift) if p.noise]
            moved = {probe: probe_shift(line, shift, history.sweeps, probe) for probe in PROBE_NAMES}
            machine = "; ".join(f"{_probe_words(probe)} took {ratio:.2f}x as long from this sweep on (relative to "
                                f"it the step is {shift.ratio / ratio:.3g}x)" for probe, ratio in moved.items()
                                if ratio is not None)
            rows.append({
                **{k: _plain(line.row.get(k)) for k in history.columns}, "point": line.label,
                "change_at": sweep_a["folder"], "change_at_time": sweep_a["started_at"],
                "before_us": shift.before, "after_us": shift.after, "ratio": shift.ratio,
                "ratio_low": shift.low, "ratio_high": shift.high, "status": shift.status, "p_value": shift.p_value,
                "before_sweep": sweep_b["folder"], "sweeps_before": shift.at - shift.start,
                "sweeps_after": shift.end - shift.at, "measured_on": line.metric, "what_changed": said,
                "environment_changed": "; ".join(f"{k}: {a} -> {b}" for k, a, b in env),
                "noise": "; ".join([*noise, *(["measured on a loaded machine"] if noise else []),
                                    *([machine] if machine else [])]),
                **{f"{probe.removesuffix('_us')}_ratio": ratio for probe, ratio in moved.items()},
                "_loaded": bool(noise),
                "_line": line, "_shift": shift, "_ops": ops, "_environment": env, "_settings": settings,
            })
    order = {"regression": 0, "improvement": 1, "unconfirmed": 2}
    rows.sort(key=lambda r: (order[r["status"]], -abs(math.log(r["ratio"])), r["point"]))
    history.changes = rows


def op_diff(store: Store, id_b: int, before: Point, id_a: int, after: Point) -> dict[str, list[dict[str, Any]]]:
    """The point's ops by self host time and kernels by device time per step, across the step."""
    from analysis.trace import is_op

    def uses(sweep: int, point: Point, table: str) -> list[dict[str, Use]]:
        have = store.columns(table)
        if "job" not in have or "name" not in have:
            return []
        jobs = [str(r["job"]) for r in point.repeats]
        timed = "self_host_us" if table == "ops" else "total_us"
        cols = ", ".join(f"{_q(c)}" if c in have else f"NULL AS {_q(c)}" for c in ("job", "name", "calls", timed,
                                                                                     "category"))
        found = store.rows(f"SELECT {cols} FROM {table} WHERE sweep_id = ? AND job IN "
                           f"({', '.join('?' for _ in jobs)})", [sweep, *jobs])
        by_job: dict[str, list[tuple[str, float, float]]] = {}
        for r in found:
            if table == "ops" and not is_op(r):
                continue
            by_job.setdefault(str(r["job"]), []).append((str(r["name"]), stats.number(r["calls"]) or 0.0,
                                                         stats.number(r[timed]) or 0.0))
        out = []
        for rep in point.repeats:
            if table == "kernels" and rep.get("platform") == "cpu":  # the CPU's kernels are its compute ops
                continue
            out.append(per_step(by_job.get(str(rep["job"]), []), rep.get("steps")))
        return out

    return {what: time_diff(uses(id_b, before, table), uses(id_a, after, table))
            for what, table in (("ops", "ops"), ("kernels", "kernels"))}


def change_words(env: list[tuple[str, str, str]], settings: list[tuple[str, Any, Any]],
                 ops: dict[str, list[dict[str, Any]]], level_us: float) -> str:
    """`torch 2.12.0 → 2.13.0: aten::addmm +40%, a new aten::copy_`."""

    def short(key: str, value: str, other: str) -> str:
        if key == "git_commit":  # as git abbreviates: 10 characters, more where the two share them
            n = next((n for n in range(10, len(value) + 1) if value[:n] != other[:n]), len(value))
            return value[:n]
        return value if len(value) <= 40 else value[:37] + "..."

    where = [f"{ENVIRONMENT_WORDS[k]} {short(k, a, b) or '?'} → {short(k, b, a) or '?'}" for k, a, b in env
             if k in ENVIRONMENT_WORDS]
    where += [f"{pair_key_of(c)} {a} → {b}" for c, a, b in settings]
    what = []
    for kind, most in (("ops", WORDS_OPS), ("kernels", WORDS_KERNELS)):
        rows = ops.get(kind) or []
        big = [r for r in rows if abs(r["self_us_per_step_diff"]) >= WORD_SHARE * level_us][:most]
        what += [_op_words(r) for r in (big or rows[:1] if kind == "ops" else big)]
    head = "; ".join(where) if where else "the same environment"
    return f"{head}: {', '.join(what)}" if what else f"{head}: no op or kernel changed its time per step"


def signed_us(value: float) -> str:
    return ("+" if value > 0 else "-" if value < 0 else "±") + us(abs(value))


def _op_words(r: dict[str, Any]) -> str:
    name = r["name"] if len(r["name"]) <= 60 else r["name"][:57] + "..."
    calls = (f" ({r['calls_per_step_base']:g} → {r['calls_per_step_new']:g} calls per step)"
             if r["calls_per_step_base"] != r["calls_per_step_new"] else "")
    if r["change"] == "appeared":
        return f"a new {name} ({us(r['self_us_per_step_new'])} per step)"
    if r["change"] == "vanished":
        return f"{name} gone ({signed_us(r['self_us_per_step_diff'])} per step)"
    if r["change"] == "calls":
        return f"{name}{calls}"
    ratio = r["self_us_per_step_ratio"]
    return f"{name} {ratio - 1:+.0%}{calls}" if ratio is not None else f"{name}{calls}"


# --- outputs -------------------------------------------------------------------------------------------


def trends(history: History) -> list[dict[str, Any]]:
    """trends.csv: per line and sweep, the level (geometric mean of the repeats) with its 95%
    interval from the repeats, the fitted level and where a change starts."""
    rows = []
    quantile: dict[int, float] = {}  # Student's t by degrees of freedom, computed once each
    for line in history.lines:
        if line.series is None:
            continue
        fitted = _fitted(line)
        starts = {s.at: s.status for s in line.shifts}
        segment = 0
        for i, p in enumerate(line.points):
            segment += i in starts
            y, s2, r = line.series.y[i], line.series.s2[i], p.moments[line.metric][0]
            if r > 1 and r - 1 not in quantile:
                quantile[r - 1] = stats.t_quantile(0.975, r - 1)
            half = quantile[r - 1] * math.sqrt(s2) if r > 1 else 0.0
            sweep = history.sweeps[p.sweep]
            rows.append({"point": line.label, "sweep": sweep["name"], "folder": sweep["folder"],
                         "started_at": sweep["started_at"], "order": p.sweep, "measured_on": line.metric,
                         "repeats": r, "level_us": math.exp(y), "low_us": math.exp(y - half),
                         "high_us": math.exp(y + half), "fitted_us": fitted[i], "segment": segment,
                         "change": starts.get(i, ""), "smallest_change": line.smallest})
    return rows


def _fitted(line: Line) -> list[float]:
    assert line.series is not None
    bounds = [0, *line.found, line.series.n]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        out += [math.exp(float(line.series.y[a:b].mean()))] * (b - a)
    return out


def write(history: History, out: Path) -> list[Path]:
    """regressions.csv, trends.csv and history.html in `out`, each atomically; the old page goes
    first, so that a stop while these are written never leaves it beside newer tables (a page of
    2 sweeps over a gate's CSVs of 5)."""
    import pandas as pd

    from analysis.files import atomic_write_text

    (out / "history.html").unlink(missing_ok=True)

    columns = [*history.columns, *REGRESSION_COLUMNS]
    frame = pd.DataFrame([{k: r.get(k) for k in columns} for r in history.changes], columns=columns)
    atomic_write_text(out / "regressions.csv", frame.to_csv(index=False))
    data = pd.DataFrame(trends(history), columns=[
        "point", "sweep", "folder", "started_at", "order", "measured_on", "repeats", "level_us", "low_us", "high_us",
        "fitted_us", "segment", "change", "smallest_change"])
    atomic_write_text(out / "trends.csv", data.to_csv(index=False))
    page = write_page(history, data, out)
    return [out / "regressions.csv", out / "trends.csv", page]


def lines_for_terminal(history: History, fdr: float = FDR) -> list[str]:
    measured = [ln for ln in history.lines if ln.series is not None]
    once = sum(1 for ln in history.lines if len(ln.points) < 2)
    s = history.sweeps
    times = sorted((t for t in (sw["started_at"] for sw in s) if t is not None), key=str)
    given = [sw["started_at"] for sw in s] != [sw["started_at"] for sw in sorted(s, key=lambda sw: str(sw["started_at"]))]
    span = f"from {_when(times[0])} to {_when(times[-1])}" if times else "of unknown start"
    out = [f"history: {amount(len(s), 'sweep')} {span}{', in the order given' if given else ''}, "
           f"{amount(len(history.lines), 'grid point')} paired by {', '.join(history.columns)}"
           + (f" (ignoring {', '.join(history.ignored)})" if history.ignored else "")
           + (f"; {once} measured in one sweep only" if once else "")]
    if not measured:  # nothing measured in two sweeps: what failed says why
        return out + failures(history)
    on = sorted({METRIC_WORDS[ln.metric] for ln in measured if ln.metric})
    out.append(f"  changes of at least {percent(current_band())} in the {' / '.join(on)}, false discoveries "
               f"controlled: Benjamini-Hochberg at {fdr:g} over {history.tested} tests")
    for r in history.changes:
        low = f"{r['ratio_low']:.2f}" if r["ratio_low"] is not None else "?"
        high = f"{r['ratio_high']:.2f}" if r["ratio_high"] is not None else "?"
        line = r["_line"]
        where = f"sweep {line.points[r['_shift'].at].sweep + 1} of {len(s)}"
        out.append(f"  {r['status']:<12} {r['point']} at {r['change_at']} ({where}, {_when(r['change_at_time'])}): "
                   f"{r['ratio']:.2f}x [{low}, {high}], {us(r['before_us'])} -> {us(r['after_us'])}; "
                   f"{r['what_changed']}{_noise_tag(r)}")
    out += failures(history)
    untested = [ln for ln in measured if not ln.tested]
    if untested:
        out.append(f"  not testable at {amount(len(untested), 'grid point')}: one process a sweep says nothing of "
                   "the variation between processes (run.repeats=3 or more)")
    quiet = len(measured) - len(untested) - len({id(r["_line"]) for r in history.changes})
    if quiet:
        out.append("  no change at the other grid point" if quiet == 1 and history.changes else
                   f"  no change at {'the other ' if history.changes else ''}{amount(quiet, 'grid point')}")
    elif history.changes:
        out.append("  a change at every grid point" + (" tested" if untested else ""))
    smallest = sorted(ln.smallest for ln in measured if ln.smallest is not None)
    if smallest:
        bound = lambda x: f"{x:.2f}x" if x <= FINDABLE else f"more than {FINDABLE:g}x"  # noqa: E731
        processes = min((p.moments.get(ln.metric, (0,))[0] for ln in measured for p in ln.points), default=0)
        more = "run.repeats=3 or more" if processes < 3 else "more processes (run.repeats), or a quieter machine"
        few = (f"; past {FINDABLE:g}x, so few sweeps and processes find no step: more sweeps, {more}"
               if smallest[-1] > FINDABLE else "")
        out.append(f"  the smallest step these histories could have found, halfway through them: {bound(smallest[0])}"
                   + (f" to {bound(smallest[-1])} by grid point (smallest_change in trends.csv{few})"
                      if len(smallest) > 1 and bound(smallest[0]) != bound(smallest[-1])
                      else f" (smallest_change in trends.csv{few})"))
    return out


FINDABLE = 10.0  # a smallest findable step past this is said as "more than 10x": no step a history looks for


def _noise_tag(row: dict[str, Any]) -> str:
    """What the terminal adds to a change whose `noise` says something: a side measured on a loaded
    machine, or only the machine's speed probe moving with it (the change stands relative to it)."""
    if row.get("_loaded"):
        return " [measured on a loaded machine: see noise in regressions.csv]"
    for probe in PROBE_NAMES:
        ratio = row.get(f"{probe.removesuffix('_us')}_ratio")
        if ratio is not None:
            return f" [{_probe_words(probe)} took {ratio:.2f}x as long with it: see regressions.csv]"
    return ""


def _probe_words(probe: str) -> str:
    """`the machine's cache probe`: a probe's name without what it times."""
    return PROBE_NAMES[probe].split(" (")[0]


def failures(history: History) -> list[str]:
    """The sweeps with failed jobs, and the grid points measured before that the newest sweep
    has no usable repeat of (failed there, or left out of its grid)."""
    out = [line for sw in history.sweeps if (line := _jobs_lost(sw))]
    gone = newest_missing(history)
    if gone:
        out.append(f"  not measured in the newest sweep ({history.sweeps[-1]['name']}), measured before: "
                   + ", ".join(ln.label for ln in gone[:6]) + (f" and {len(gone) - 6} more" if len(gone) > 6 else ""))
    return out


def _jobs_lost(sweep: dict[str, Any]) -> str:
    """What a sweep lost: its failed jobs, and the jobs its sweep.json planned that never ran (a
    sweep stopped early); '' where none."""
    failed, ran = int(sweep.get("jobs_failed") or 0), int(sweep.get("jobs") or 0)
    unrun, planned = unrun_jobs(sweep)
    said = ([f"{failed} of {amount(ran, 'job')} failed"] if failed else []) + (
        [f"{unrun} of the {planned} planned never ran (stopped early)"] if unrun else [])
    return f"  in {sweep['name']}: {'; '.join(said)}" if said else ""


def unrun_jobs(sweep: dict[str, Any]) -> tuple[int, int | None]:
    """(how many jobs its sweep.json planned never ran, how many it planned): (0, ...) for a whole sweep."""
    ran = int(sweep.get("jobs") or 0)
    planned = read_plan(Path(str(sweep.get("folder") or ""))).get("jobs") if sweep.get("folder") else None
    if not isinstance(planned, int) or isinstance(planned, bool):
        return 0, None
    return max(0, planned - ran), planned


def broken(history: History) -> bool:
    """The newest sweep is not whole (planned jobs never ran: stopped early, its grid points judged
    on fewer processes or not at all), or lost grid points measured before (their jobs failed):
    the first regression a gate sees, as compare's gate fails a NEW that is not a whole sweep."""
    if not history.sweeps:
        return False
    newest = history.sweeps[-1]
    return bool(unrun_jobs(newest)[0] or (newest.get("jobs_failed") and newest_missing(history)))


def newest_missing(history: History) -> list[Line]:
    last = len(history.sweeps) - 1
    return [ln for ln in history.lines if ln.points and max(p.sweep for p in ln.points) < last]


def _when(t: Any) -> str:
    return t.strftime("%Y-%m-%d %H:%M") if hasattr(t, "strftime") else str(t)

