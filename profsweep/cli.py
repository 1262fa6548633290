"""`profsweep`: one command for everything profsweep does.

    profsweep run -m size=64,1024 compile=true,false   a sweep (what `python experiments/run.py` does)
    profsweep analyse FOLDER                           (re)write a sweep's tables, plots and report
    profsweep compare BASE NEW                         two sweeps, grid point by grid point
    profsweep history SWEEP...                         many sweeps over time, and the nightly gate
    profsweep serve FOLDER                             a report on localhost, with Perfetto buttons
    profsweep sql DB "QUERY"                           ask the history store
    profsweep trace FILE|JOB                           the metrics of one Chrome trace, or a job's
    profsweep calibrate --device cpu --dtype bf16      this machine's measured ceilings

`run` hands its arguments to Hydra unchanged (overrides, -m, --cfg job, --help); the others are
`python -m analysis ...`'s, under this name. `python experiments/run.py -m ...` keeps working.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

COMMANDS = {
    "run": "run a sweep, or one grid point without -m (Hydra overrides as python experiments/run.py takes them)",
    "analyse": "(re)write a sweep's summary.csv, plots and report.html",
    "compare": "compare two sweeps grid point by grid point (or two traces op by op)",
    "history": "many sweeps over time: the store, the changes found, the nightly gate",
    "serve": "serve a report or comparison on 127.0.0.1, with Perfetto buttons",
    "sql": "ask the history store anything (DuckDB's SQL, read-only)",
    "trace": "the metrics of one Chrome trace (.json or .json.gz), or of a job's traces (its folder)",
    "calibrate": "measure this machine's matmul FLOP/s and memory bandwidth (the roofline's ceilings)",
}
EXAMPLES = """examples:
  profsweep run -m size=64,1024,4096 compile=true,false
  profsweep analyse outputs/latest
  profsweep compare outputs/previous outputs/latest --fail-if-slower 1.10
  profsweep <command> --help      (profsweep run --help: Hydra's; profsweep run --cfg job: every key)"""


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: profsweep <command> [arguments]", "", "Sweep PyTorch code over a grid with torch.profiler, "
             "and turn the traces into tables, plots and a report.", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, what in COMMANDS.items()]
    return "\n".join([*lines, "", EXAMPLES])


def run_script() -> Path:
    """experiments/run.py of this installation (Hydra finds conf/ beside it)."""
    import experiments

    return Path(experiments.__file__).resolve().parent / "run.py"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "analyze":
        command = "analyse"
    if command not in COMMANDS:
        print(f"error: profsweep {command!r} is not a command: choose one of {', '.join(COMMANDS)}\n\n{usage()}",
              file=sys.stderr)
        return 2
    if command == "run":
        script = run_script()
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, str(script), *rest])  # Hydra's own process, signals and exit code
    from analysis import __main__ as commands

    commands.PROG = "profsweep"
    if command == "analyse":
        commands.ANALYSE = " analyse"
        return commands.stoppable(rest)
    return commands.stoppable([command, *rest])


if __name__ == "__main__":
    sys.exit(main())
