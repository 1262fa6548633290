"""Many sweeps over time: ingested into the store (analysis.store), each grid point's line judged
for changes (`changes`, `engine`), and written as regressions.csv, trends.csv and history.html
(`page`, `plots`). `python -m analysis history`."""
