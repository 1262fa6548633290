"""The report of one sweep: its conclusions in words (`conclusions`), the series' claims and the
user's expectations judged (`claims`, `expect`), its figures (`plots`) and report.html (`page`).
Reads the core's tables (analysis.tables, analysis.points); `analysis.analyse_folder` runs it."""
