"""Hydra's sweeper for profsweep: the basic sweeper's grid, launched so that the first job of any
grid starts at once.

The basic sweeper composes every job of a batch to check it before launching any (about 0.08 s a
job: a minute for a grid of 1,000). Here the sweep's preflight (experiments.task.SweepCallback)
has checked every key's values before this runs, so with Hydra's basic launcher the jobs are
launched one at a time, each composed just before it runs, and launching stops as soon as the
sweep was interrupted or the disk filled. Launchers that send jobs elsewhere (joblib, submitit)
get batches of max_batch_size (all jobs by default), checked first, as the basic sweeper does.

The sweeper shares the sweep's state with the jobs through profsweep.sweep_state (whether the
sweep was stopped; what to do once the last job is launched) and imports nothing of the job side.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.errors import HydraException
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hydra_plugins.profsweep_grid import grid
from profsweep.contract import FINAL, first_line
from profsweep.sweep_state import SWEEP

log = logging.getLogger(__name__)

# Hydra's own launcher (conf/hydra/launcher/basic.yaml), known by its class name: importing it, or
# naming its module, would be reaching into Hydra's private package.
BASIC_LAUNCHER = "BasicLauncher"
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class GridSweeper(Sweeper):
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.hydra_context: Optional[HydraContext] = None
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config,
        )

    def sweep(self, arguments: List[str]) -> Any:
        """Launch the grid. Returns nothing: the jobs' records are on disk, where the analysis
        reads them, and a sweep of 100,000 jobs holds no list of 100,000 results."""
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        axes = grid.axes(grid.arguments(self.params, arguments), self.hydra_context.config_loader)
        jobs = grid.jobs(axes)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        target = str(self.config.hydra.launcher.get("_target_"))
        run = self.config.get("run") or {}
        repeats = Repeats(run.get("repeats", 1), run.get("precision", 0.025), run.get("max_repeats", 10), sweep_dir,
                          grid.Pairs(axes), grid.Series(axes))
        self.left = len(jobs) * repeats.count
        self.stopped_waiting = 0  # jobs a stop caught while they waited for their device: not started either
        try:
            self._launch(jobs, target, repeats)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM anywhere between two jobs
            SWEEP.stop()
            self._not_started(self.left)
        finally:
            # the jobs are done: what the job side registered runs now (it stops the fork server:
            # no template, and no thread watching it, for the analysis)
            SWEEP.launching_ended()
        return []

    def _not_started(self, left: int) -> None:
        not_started(left + self.stopped_waiting)

    def _launch(self, jobs: Sequence[List[str]], target: str, repeats: "Repeats") -> None:
        """The grid round by round (run.repeats), each round in its own order; job numbers count
        the jobs launched, so folder names are the same on a rerun."""
        assert self.launcher is not None
        one_by_one = target.rsplit(".", 1)[-1] == BASIC_LAUNCHER
        launched = 0
        round_number = 0
        while True:
            round_number += 1
            points = repeats.points(round_number, len(jobs))
            if not points:
                repeats.record_end(launched)
                return
            order, how = grid.round_order(round_number, points)
            repeats.record_round(round_number, how, order, len(jobs), launched)
            tagged = grid.Round(jobs, order, [f"run.repeat={round_number}"] if repeats.many else [])
            done = 0
            for batch in grid.batches(tagged, 1 if one_by_one else self.max_batch_size):
                self.left = len(tagged) - done + repeats.later(round_number, len(jobs))
                if SWEEP.stopped:
                    self._not_started(self.left)
                    return
                if not one_by_one:  # composed again elsewhere: catch a composition error here first
                    self.validate_batch_is_legal(batch)
                try:
                    with progress_from_disk(target, repeats.sweep_dir, launched, len(batch)):
                        results = self.launcher.launch(batch, initial_job_idx=launched)
                except OSError as exc:
                    if exc.errno not in DISK_FULL:
                        raise
                    disk_full(exc)  # Hydra's own files of the next job (.hydra/*.yaml) did not fit
                    self._not_started(len(tagged) - done + repeats.later(round_number, len(jobs)))
                    return
                except (OmegaConfBaseException, HydraException) as exc:  # composing a job: never a traceback
                    if not SWEEP.stopped:  # (a stop that landed in the composition is a stop, said as one)
                        SWEEP.stop(compose_error=f"job {launched + 1} ({' '.join(batch[0])}) could not be "
                                                 f"composed: {first_line(exc)}")
                    self._not_started(len(tagged) - done + repeats.later(round_number, len(jobs)))
                    return
                for g, result in zip(order[done:done + len(batch)], results):
                    self.stopped_waiting += result.return_value is None and SWEEP.stopped
                    repeats.add(g, result.return_value)  # re-raises a job's exception, as the basic sweeper does
                done += len(batch)
                launched += len(batch)
                self.left = len(tagged) - done + repeats.later(round_number, len(jobs))


def progress_from_disk(target: str, sweep_dir: Path, first: int, count: int) -> Any:
    """Launchers whose jobs print into files of their own (submitit: .submitit/*/...log) get a
    progress line per job here, from its record on disk; others print their own."""
    import contextlib

    if "submitit" not in target:
        return contextlib.nullcontext()
    from profsweep.progress import reported_from_disk

    return reported_from_disk(sweep_dir, range(first, first + count))


class Repeats:
    """How many times each grid point is measured: a fixed number of rounds over the grid, or
    (auto) two rounds and then more, up to max_repeats, for the points whose interval is still
    wider than the precision, for those whose compile against eager the one rule
    (profsweep.decide) leaves inconclusive where more processes would decide it, and for the
    series whose model (profsweep.fit) fits but whose crossover is not located within
    CROSSOVER_SPAN, or whose regime at a size is undecided, where more processes would locate or
    decide it. Each round is recorded in sweep.json, with why its points were added."""

    def __init__(self, repeats: Any, precision: float, max_repeats: int, sweep_dir: Path,
                 pairs: grid.Pairs | None = None, series: grid.Series | None = None) -> None:
        self.auto = repeats == "auto"
        self.pairs, self.series = pairs, series
        self.why: Dict[str, List[int]] = {}  # auto: the last round's points by why they were added
        self.count = grid.first_rounds(repeats)
        self.precision, self.max_repeats, self.sweep_dir = float(precision), int(max_repeats), sweep_dir
        self.many = self.auto or self.count > 1
        self.planned = 0

        self.samples: Dict[int, List[Any]] = {}  # auto: each grid point's ok jobs' timed samples
        self.work: Dict[int, Dict[str, Any]] = {}  # auto: each grid point's size and work (its first ok record's)
        self.rounds: Dict[int, Dict[int, List[float]]] = {}  # auto: each grid point's ok samples by round (run.repeat)
        # auto: each grid point's ok jobs' steps eager and compiled timed in turn (a compiled job's
        # side_by_side_*_us; None where a job has none)
        self.side: Dict[int, List[Any]] = {}
        # grid points whose job failed for a reason no other process can change (the record's
        # failure_is_final: a factory's return value, a refused setting), with that error: their
        # later repeats are not run (none where there are none: one round)
        self.settled: Dict[int, str] = {}

    def add(self, point: int, record: Any) -> None:
        """A job's record (auto repeats keep what they judge precision by; the rest is on disk)."""
        if self.many and isinstance(record, dict) and record.get("status") == "failed" and record.get(FINAL) is True:
            self.settled.setdefault(point, str(record.get("error")))
        if not self.auto:
            return
        from profsweep.contract import timed_samples

        ok = isinstance(record, dict) and record.get("status") == "ok"
        samples = timed_samples(record) if ok else None
        self.samples.setdefault(point, []).append(samples)
        if samples and isinstance(record.get("repeat"), int):
            self.rounds.setdefault(point, {})[record["repeat"]] = samples
        from profsweep.contract import side_pair, usable

        if ok and usable(record):  # as the report keeps a process (its trace read too)
            found = side_pair(record)
            self.side.setdefault(point, []).append(([found[0]], [found[1]]) if found else None)
        if ok and point not in self.work:
            self.work[point] = {k: record.get(k) for k in ("size", "flops_per_call", "bytes_per_call")}

    def points(self, round_number: int, count: int) -> Sequence[int]:
        """The grid points of a round: all of them in the planned rounds, then (auto) those whose
        interval is still wider than the precision; never those whose failure was final."""
        if round_number <= self.count:
            return [g for g in range(count) if g not in self.settled] if self.settled else range(count)
        if not self.auto or round_number > self.max_repeats:
            return []
        from profsweep.stats import estimate

        wide, undecided = [], []
        needed: Dict[tuple, Optional[int]] = {}  # each pair's verdict, judged once for both its points
        for g in range(count):
            ok = self._ok(g)
            if not ok:
                continue  # a point that fails fails again: no more rounds for it
            width = estimate(ok).width
            if len(ok) < grid.AUTO_ROUNDS or width is None or width > self.precision:
                wide.append(g)
            elif self._undecided(g, len(ok), needed):
                undecided.append(g)
        unlocated = self._unlocated(count, set(wide + undecided))
        chosen = set(wide + undecided + unlocated)
        # a compile pair's two points run in the same rounds, so that the report can pair them by round
        partners = sorted({other for g in chosen for other in (self.pairs.of(g) if self.pairs else None) or ()
                           if other not in chosen and other not in self.settled and self._ok(other)})
        self.why = {k: v for k, v in (("interval wider than the precision", wide),
                                      ("compile against eager undecided", undecided),
                                      ("the series' crossover or regime undecided", unlocated),
                                      ("its compile pair's other point runs in this round", partners)) if v}
        return sorted(chosen | set(partners))

    def _ok(self, point: int) -> List[Any]:
        return [samples for samples in self.samples.get(point, []) if samples is not None]

    def _undecided(self, point: int, have: int, needed: Dict[tuple, Optional[int]]) -> bool:
        """Whether `point`'s compile against eager is inconclusive by the one rule and more of its
        processes (up to max_repeats) would decide it at the spread observed, as the report judges
        it (each compiled process's steps timed in turn, else the un-profiled steps' ratio over the
        processes of the two grid points); `needed` keeps
        each pair's processes a side (None: decided, or no more would) for its other point."""
        pair = self.pairs.of(point) if self.pairs else None
        if pair is None or any(g in self.settled for g in pair):
            return False
        if pair not in needed:
            needed[pair] = self._processes_needed(*pair)
        n = needed[pair]
        return n is not None and have < n <= self.max_repeats

    def _processes_needed(self, eager_point: int, compiled_point: int) -> Optional[int]:
        """The processes a side that would decide the pair's inconclusive ratio (None: decided, or
        fewer than two processes a side so far)."""
        from profsweep.decide import decide_test
        from profsweep.stats import paired_ratio_test, pairs_by_round, ratio_test

        eager, compiled = self._ok(eager_point), self._ok(compiled_point)
        side = self.side.get(compiled_point, [])
        if len(side) >= 2 and all(side):  # each compiled process its own pair: the eager point's own count aside
            d = decide_test(paired_ratio_test(side), len(side))
            return None if d.decided else d.processes_needed
        if min(len(eager), len(compiled)) < 2:
            return None

        # as the report judges it (analysis.report.conclusions.compile_change): each compiled
        # process's steps eager and compiled timed in turn where every one of them has both; else
        # the processes in pairs by round where both were measured in the same rounds (points()
        # runs a pair's two points in the same rounds), else unpaired; a process without a round
        # (a record without run.repeat) leaves them unpaired
        by_round = [self.rounds.get(g, {}) for g in (eager_point, compiled_point)]
        paired = pairs_by_round(*by_round) if len(by_round[0]) == len(eager) and len(by_round[1]) == len(compiled) \
            else None
        if paired:
            d = decide_test(paired_ratio_test(paired), len(paired))
        else:
            d = decide_test(ratio_test(eager, compiled), min(len(eager), len(compiled)))
        return None if d.decided else d.processes_needed

    def _unlocated(self, count: int, chosen: set[int]) -> List[int]:
        """The grid points (not in `chosen`) of each series whose model fits and whose crossover
        is not located, or whose regime at a size is undecided, where more processes (up to
        max_repeats) would locate or decide it at the spread observed: the report's fit
        (profsweep.fit), over FLOPs where every point counted them, else the bytes moved (the
        report also takes the bytes where the roofline calls the series memory-bound)."""
        if not self.series:
            return []
        out: List[int] = []
        seen: set[tuple[int, ...]] = set()
        for g in range(count):
            members = self.series.of(g)
            if members is None or members in seen:
                continue
            seen.add(members)
            if any(m in self.settled for m in members):
                continue
            needs = self._to_locate([m for m in members if self._ok(m) and m in self.work])
            if needs:
                out += [m for m in members if m not in chosen and self._ok(m)]
        return out

    def _to_locate(self, members: List[int]) -> List[int]:
        """The processes a grid point that would locate the series' crossover or decide a size's
        regime, each above what its points have and at most max_repeats ([]: none would, or the
        model does not fit)."""
        from profsweep.fit import fit_series
        from profsweep.stats import estimate, number

        if len(members) < 2:
            return []
        kind = "flops" if all((number(self.work[m].get("flops_per_call")) or 0) > 0 for m in members) else "bytes"
        work = [number(self.work[m].get(f"{kind}_per_call")) for m in members]
        sizes = [number(self.work[m].get("size")) for m in members]
        if any(w is None or w <= 0 for w in work) or any(s is None for s in sizes):
            return []
        found = [estimate(self._ok(m)) for m in members]
        try:
            fit = fit_series(sizes, work, [e.value for e in found], [e.low for e in found], [e.high for e in found],
                             [e.repeats for e in found], kind=kind)  # type: ignore[arg-type]
        except (ArithmeticError, ValueError):  # numbers no fit can take: the report says so, the sweep goes on
            return []
        if fit is None or not fit.fits:
            return []
        have = min(e.repeats for e in found if e.value is not None)  # the points the fit used
        needs = [fit.crossover_processes_needed, *(d.processes_needed for d in fit.ratios if not d.decided)]
        return [n for n in needs if n is not None and have < n <= self.max_repeats]

    def later(self, round_number: int, points: int) -> int:
        """Jobs of the rounds planned after this one (not started when the sweep stops)."""
        return max(0, self.count - round_number) * (points - len(self.settled))

    def record_end(self, launched: int) -> None:
        """sweep.json once no round is left: the jobs planned are those launched (the grid points
        whose failure was final ran no later repeats), and those points (`not_run`)."""
        if self.settled:
            self._update(jobs=launched)

    def _update(self, round_number: int | None = None, round_entry: Dict[str, Any] | None = None,
                **fields: Any) -> None:
        """sweep.json with `fields` (and a round's entry) set, and the grid points not run."""
        from profsweep.contract import PLAN_FILE, read_plan, write_json

        path = self.sweep_dir / PLAN_FILE
        plan = read_plan(self.sweep_dir)
        plan.update(fields)
        if round_entry is not None:
            plan["rounds"] = [r for r in plan.get("rounds") or [] if r.get("round") != round_number] + [round_entry]
        if self.settled:  # said once by the tally: later repeats of these grid points were not run
            plan["not_run"] = [{"point": g, "error": e} for g, e in sorted(self.settled.items())]
        write_json(path, plan)

    def record_round(self, round_number: int, how: str, order: Sequence[int], points: int, launched: int) -> None:
        """sweep.json: the jobs planned so far (progress lines and the tally read it) and each
        round's order."""
        self._update(round_number=round_number, round_entry={
            "round": round_number, "order": how, "jobs": len(order),
            **({"points": list(order)} if how.startswith("shuffled") or len(order) < points else {}),
            **({"why": self.why} if self.why and round_number > self.count else {})},
            jobs=launched + len(order) + self.later(round_number, points), grid_points=points,
            repeats="auto" if self.auto else self.count)


def not_started(left: int) -> None:
    print(f"not started: {left} job{'s' if left != 1 else ''} ({SWEEP.why()})", flush=True)


def disk_full(exc: OSError) -> None:
    """Hydra could not write the next job's own files: the sweep stops as for a job's full disk."""
    SWEEP.stop(disk_error=f"disk full: {exc.filename or 'a file of the next job'}: {exc.strerror or exc}")
