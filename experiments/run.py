"""Profile PyTorch workloads over a grid, one job per grid point:

    python experiments/run.py -m size=64,1024,4096 compile=true,false
"""

import signal
import sys


_STOPS: list[int] = []  # the stops that came before the sweep's own handler


def _stop_before_the_sweep(signum: int, frame: object) -> None:
    _STOPS.append(signum)  # noted too: C code that imports Python modules may swallow the exception
    raise KeyboardInterrupt  # as Ctrl-C: said below, exit 130, until the sweep's own handler takes over


def _quiet_when_stopped(unraisable: "sys.UnraisableHookArgs") -> None:
    """A stop raised where Python cannot raise it (an import lock's callback) is printed as
    "Exception ignored in ..." with a traceback: the stop is noted (_STOPS) and said once below."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _STOPS:
        return
    sys.__unraisablehook__(unraisable)


# From here on a stop is said in words, however early (the imports take a second or two): a
# SIGTERM or SIGHUP before this line ends the interpreter as the signal's default does.
if __name__ == "__main__":
    sys.unraisablehook = _quiet_when_stopped
    for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(_signum, _stop_before_the_sweep)
try:
    # numpy first, from Python: torch imports it from C, which swallows a KeyboardInterrupt and
    # leaves numpy half-imported (a stop then lost, or the analysis failing on numpy.matrix)
    import numpy  # noqa: F401
    import gc
    from typing import Any

    import hydra
    from omegaconf import DictConfig

    from experiments import refusals
    from experiments.config import register_configs
    from experiments.sweep_folder import EXIT_INTERRUPTED
    from experiments.task import task
    from profsweep.terminal import guard_streams
except BaseException as _exc:  # a stop, or what a stop that C code swallowed left behind (a module half-imported)
    if __name__ != "__main__" or not (_STOPS or isinstance(_exc, KeyboardInterrupt)):
        raise
    _STOPS.append(signal.SIGINT)
if _STOPS and __name__ == "__main__":
    for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(_signum, signal.SIG_IGN)  # a second stop does not interrupt the words
    print("interrupted before the sweep started: nothing was written", flush=True)
    sys.exit(130)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Any:
    return task(cfg)


def ignore_stops() -> None:
    """Ctrl-C, SIGTERM and SIGHUP do nothing from here: the sweep has ended."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    # a reader that went away (`| head`, or `| tee` stopped by the same Ctrl-C) must not end the
    # sweep with a traceback halfway through a job: what it prints then goes nowhere
    terminal = guard_streams()
    try:
        register_configs()
        refusals.hold()  # until the sweep has started: Hydra's own refusals are rewritten in ours
        main()
    except KeyboardInterrupt:
        # a stop that landed where the sweep has no handler of its own yet (making its folder,
        # writing environment.json): said as every stop is, with the same exit status
        refusals.release()
        from profsweep.sweep_state import SWEEP

        print("interrupted before the sweep started: nothing was written" if SWEEP.folder is None else
              f"interrupted: rerun the same command into the same folder ({SWEEP.folder}) to go on", flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except SystemExit as exc:
        # Hydra refused the input before the sweep started (it exits 1): say it as we do, exit 2.
        hydra_refused = exc.code == 1 and refusals.holding()
        refusals.release(rephrase=hydra_refused)
        if hydra_refused:
            raise SystemExit(refusals.EXIT_BAD_INPUT) from None
        raise
    finally:
        refusals.release()
        failure = terminal.failure() if terminal is not None else None
        if failure is not None:
            print(f"warning: the sweep's progress could not be written to its output: {failure}", file=sys.stderr,
                  flush=True)
        # Everything is written and closed: skip the interpreter's last garbage collection over
        # pandas', matplotlib's and Hydra's objects (about 0.4 s of every sweep's end).
        gc.freeze()
        # A stop from here on finds the sweep ended: it keeps the exit status the sweep chose. (The
        # interpreter's shutdown puts the default handlers back, and SIGTERM's default would kill
        # the process with -15 after its last line: seen in 1 of 20 random stops.)
        ignore_stops()

