"""A child process that dies with its parent, however the parent dies (kill -9, the OOM killer):
Linux's prctl PR_SET_PDEATHSIG, and a check that the parent did not die before the request. A
sweep's jobs (experiments.lifeline) and the analysis's drawing processes use it. Elsewhere (no
prctl) nothing is set up and the child may outlive its parent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with(parent: int, signum: int = signal.SIGKILL) -> bool:
    """Ask for `signum` when this process's parent dies; exit at once where the parent is no
    longer `parent` (it died before the request). False, and nothing done, off Linux or where the
    kernel refuses."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request: follow it now
        os._exit(128 + signum)
    return True
