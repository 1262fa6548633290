"""The grid of a sweep: the cartesian product of the swept overrides, in the basic sweeper's order.

One definition for the sweeper that launches the jobs and the preflight that checks them, so
job numbers and folder names are the same as with Hydra's basic sweeper. Only Hydra's public
override parser is used.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, QuotedString, RangeSweep, Transformer
from hydra.errors import HydraException


class Axis(NamedTuple):
    """One key of the grid and its values, in the order the jobs take them. (A NamedTuple: Hydra's
    plugin scan runs this module before it is in sys.modules, which a dataclass needs.)"""

    key: str                   # as Hydra prints it: `+experiment`, `workload`, `size`, `hydra/launcher`
    override: Override         # the parsed override (its type: change, add, delete)
    strings: tuple[str, ...]   # each job's override, e.g. ("size=1", "size=2")
    values: tuple[Any, ...]    # the values Hydra sets for them (quoted strings unquoted)

    @property
    def swept(self) -> bool:
        return len(self.strings) > 1


def arguments(params: Mapping[str, Any] | None, overrides: Sequence[str]) -> list[str]:
    """The sweeper's `params` (a preset's `hydra.sweeper.params`) first, then the command line."""
    return [f"{k}={v}" for k, v in (params or {}).items()] + list(overrides)


MAX_AXIS_VALUES = 100_000  # a range() with more is refused before it is expanded (10^8 values: out of memory)


def _range_length(value: Any) -> int:
    """How many values a range(start, stop, step) sweep holds (0 for any other sweep)."""
    if not isinstance(value, RangeSweep) or not value.step:
        return 0
    return max(0, math.ceil((value.stop - value.start) / value.step))


def axes(args: Sequence[str], config_loader: Any = None) -> list[Axis]:
    """The grid's axes: one per key, a later override of a key replacing the earlier one's values
    in its place (as the basic sweeper does). The config loader expands glob() over a group."""
    parser = OverridesParser.create(config_loader=config_loader)
    found: dict[str, Axis] = {}
    for override in parser.parse_overrides(list(args)):
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise HydraException(f"GridSweeper does not support sweep type : {override.value_type.name}")
            length = _range_length(override.value())
            if length > MAX_AXIS_VALUES:
                raise HydraException(f"{override.input_line} is not allowed: it sweeps {key} over {length:,} values, "
                                     f"more than the {MAX_AXIS_VALUES:,} a grid axis may hold (one job each): give a "
                                     "step, e.g. range(64,4097,64), or a list")
            raw = list(override.sweep_iterator())  # once: a shuffle() is drawn once for both lists
            strings = tuple(f"{key}={Transformer.encode(v)}" for v in raw)
            values = tuple(v.text if isinstance(v, QuotedString) else v for v in raw)
        else:
            strings, values = (f"{key}={override.get_value_element_as_str()}",), (override.value(),)
        found[key] = Axis(key, override, strings, values)
    return list(found.values())


def size(grid: Sequence[Axis]) -> int:
    count = 1
    for axis in grid:
        count *= len(axis.strings)
    return count


class Jobs(Sequence[list[str]]):
    """Every job's overrides by its index, job 0 first (the last axis varies fastest), each
    computed when asked: a grid of 100,000 jobs is held as its axes, not as 100,000 lists."""

    def __init__(self, grid: Sequence[Axis]) -> None:
        self.strings = [axis.strings for axis in grid]
        self.count = size(grid)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(f"job {index} of a grid of {self.count}")
        job = []
        for strings in reversed(self.strings):
            index, k = divmod(index, len(strings))
            job.append(strings[k])
        return job[::-1]

    def __iter__(self) -> Iterator[list[str]]:
        return (list(job) for job in itertools.product(*self.strings))


def jobs(grid: Sequence[Axis]) -> Jobs:
    """Every job's overrides, job 0 first (the last axis varies fastest)."""
    return Jobs(grid)


class Round(Sequence[list[str]]):
    """The jobs of one round: the grid points in `order` (grid indices), each job's overrides
    with `extra` after them, computed when asked."""

    def __init__(self, all_jobs: Sequence[list[str]], order: Sequence[int], extra: Sequence[str] = ()) -> None:
        self.all_jobs, self.order, self.extra = all_jobs, order, list(extra)

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.all_jobs[self.order[index]] + self.extra


def batches(all_jobs: Sequence[list[str]], batch_size: int | None) -> Iterator[list[list[str]]]:
    """The jobs in launches of `batch_size` (None or -1: all at once)."""
    n = (len(all_jobs) or 1) if batch_size in (None, -1) else batch_size
    if n <= 0:
        raise HydraException(f"max_batch_size={batch_size} is not allowed: choose null or a count > 0")
    for i in range(0, len(all_jobs), n):
        yield list(all_jobs[i:i + n])


# --- repeats: the grid again, round by round ------------------------------------------------------

AUTO_ROUNDS = 2  # run.repeats=auto: rounds over the whole grid before any point is judged precise


JUDGED = "compile"  # the flag whose pairs the report judges by the one rule: compile against eager


class Pairs:
    """The grid points that differ only in `compile` (the report's compile against eager), found by
    index arithmetic: the compile axis's two values sit `stride` jobs apart (the product of the
    later axes' lengths). No pairs where compile is not swept over two flags."""

    def __init__(self, grid: Sequence[Axis]) -> None:
        self.stride, self.eager_first = 0, True
        for i, axis in enumerate(grid):
            if axis.key.lstrip("+") != JUDGED or len(axis.values) != 2:
                continue
            if not all(isinstance(v, bool) for v in axis.values) or axis.values[0] == axis.values[1]:
                continue
            self.stride = size(grid[i + 1:])
            self.eager_first = axis.values[0] is False

    def __bool__(self) -> bool:
        return self.stride > 0

    def of(self, point: int) -> tuple[int, int] | None:
        """(eager, compiled): the pair `point` belongs to, or None."""
        if not self.stride:
            return None
        first = (point // self.stride) % 2 == 0
        other = point + self.stride if first else point - self.stride
        return (point, other) if first == self.eager_first else (other, point)


SERIES_AXIS = "size"  # the axis a series runs along: the grid points that differ only in size


class Series:
    """The grid points that differ only in `size` (the report's series, whose model and crossover
    profsweep.fit gives), found by index arithmetic as Pairs are: the size axis's values sit
    `stride` jobs apart. None where size is not swept over two values or more."""

    def __init__(self, grid: Sequence[Axis]) -> None:
        self.stride, self.length = 0, 0
        for i, axis in enumerate(grid):
            if axis.key.lstrip("+") == SERIES_AXIS and len(axis.values) >= 2:
                self.stride, self.length = size(grid[i + 1:]), len(axis.values)

    def __bool__(self) -> bool:
        return self.stride > 0

    def of(self, point: int) -> tuple[int, ...] | None:
        """The grid points of `point`'s series, smallest index first, or None."""
        if not self.stride:
            return None
        first = point - ((point // self.stride) % self.length) * self.stride
        return tuple(first + k * self.stride for k in range(self.length))


def first_rounds(repeats: Any) -> int:
    """How many rounds over the whole grid a sweep plans from the start."""
    return AUTO_ROUNDS if repeats == "auto" else int(repeats)


def round_order(round_number: int, points: Sequence[int]) -> tuple[Sequence[int], str]:
    """The order of a round over `points` (grid indices) and how it was chosen: round 1 in grid
    order, round 2 reversed, later rounds shuffled with the round's number as the seed, so that a
    burst of load or a drift hits many grid points a little instead of one entirely, and a rerun
    takes the same order. A range stays a range in the first two rounds (no list of the grid)."""
    if round_number == 1:
        return points, "grid order"
    if round_number == 2:
        return points[::-1], "reversed"
    import random

    shuffled = list(points)
    random.Random(round_number).shuffle(shuffled)
    return shuffled, f"shuffled (seed {round_number})"
