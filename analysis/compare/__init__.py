"""Two sweeps (or runs, or traces) compared: each side read from the tables its analysis wrote
(`tables`), grid points paired and judged with the one decision rule (`engine`), and the pairs
written as compare.csv, ops_diff.csv and compare.html (`page`). `python -m analysis compare`."""
