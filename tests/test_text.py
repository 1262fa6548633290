"""Numbers in words: one convention for every page, plot and terminal line (analysis/text.py)."""

from __future__ import annotations

import math

from analysis.text import bytes_label, interval, nbytes, too_wide, us


def test_bytes_are_binary_in_the_text_as_on_the_plots_axes():
    assert nbytes(2 ** 28) == "256 MiB" and bytes_label(2 ** 28) == "256 MiB"
    assert nbytes(1536) == "1.5 KiB" and nbytes(512) == "512 B" and nbytes(0) == "0 B" and nbytes(None) == "?"
    assert nbytes(1.32e9) == "1.23 GiB"


def test_durations_with_and_without_their_sign():
    assert [us(v) for v in (19.04, 2030.0, 1.58e6)] == ["19 µs", "2.03 ms", "1.58 s"]
    assert [us(v, signed=True) for v in (1.57e6, -850.0, 0.0)] == ["+1.57 s", "-850 µs", "±0 µs"]
    assert us(None) == "?" and us(math.nan) == "?"


def test_one_rule_says_an_interval_is_too_wide_to_read():
    assert too_wide(1.0, 101.0) and too_wide(0.0, 2.0) and too_wide(-1.0, 2.0)
    assert not too_wide(1.0, 100.0) and not too_wide(None, 3.0) and not too_wide(math.nan, 3.0)
    row = {"x_low": 1.0, "x_high": 500.0, "repeats": 2}
    assert interval(row, "x") == " [too wide to read: 2 repeats]"
    assert interval({**row, "x_high": 3.0}, "x", us) == " [1 µs, 3 µs]"
    assert interval({**row, "repeats": 1}, "x") == ""  # one repeat has no interval over repeats
