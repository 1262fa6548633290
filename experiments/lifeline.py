"""A job process dies with the sweep process that started it, however that one dies.

The sweep process names itself in the job's environment (PARENT_ENV); the job asks the kernel
for SIGKILL when its parent goes (Linux prctl PR_SET_PDEATHSIG) and, since the parent may have
died before the request, checks that its parent is still the one named. A sweep killed with
kill -9, by the OOM killer or with its node therefore leaves no job profiling on after it.
Elsewhere (no prctl) nothing is set up and the job may outlive the sweep.
"""

from __future__ import annotations

import os
import signal

from profsweep.lifeline import die_with

PARENT_ENV = "PROFSWEEP_PARENT_PID"


def die_with_parent(signum: int = signal.SIGKILL) -> bool:
    """Ask for `signum` when the parent process dies; exit at once if it is already gone.

    Does nothing (returns False) without PARENT_ENV in the environment or off Linux.
    """
    expected = os.environ.get(PARENT_ENV)
    if not expected or not expected.isdigit():
        return False
    return die_with(int(expected), signum)
