"""stdout and stderr that never raise: a sweep or a command whose reader went away (`| head`,
`| tee` stopped by the same Ctrl-C) or whose output cannot be written (`> /dev/full`) goes on
to its end and its own exit code, never a BrokenPipeError's traceback halfway through.

Both sides use it (experiments/run.py, analysis/__main__.py): it holds no knowledge of either.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any


class Terminal(io.TextIOBase):
    """sys.stdout or sys.stderr that never raises: a reader gone (`compare ... | head -n 1`) or a
    full disk (`> /dev/full`) must not end the command before its gate is decided, nor turn the
    gate's exit code into a traceback's 1 or a broken pipe's 0. The first error is kept (`error`)
    and what is written after it goes nowhere; the stream's descriptor then points at /dev/null,
    so the interpreter's own last flush finds somewhere to write."""

    def __init__(self, stream: Any):
        super().__init__()
        self.stream = stream
        self.error: Exception | None = None  # an OSError, or ValueError: a stream closed under it

    def write(self, text: str) -> int:
        if self.error is None:
            try:
                self.stream.write(text)
            except (OSError, ValueError) as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.error is None:
            try:
                self.stream.flush()
            except (OSError, ValueError) as exc:
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        self.error = exc
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            return
        try:
            os.dup2(null, self.stream.fileno())
        except (OSError, ValueError, AttributeError):  # a stream without a descriptor (a test's capture)
            pass
        finally:
            os.close(null)

    def failure(self) -> str | None:
        """Why writing failed, in words, once all is flushed; None where it did not, or where the
        reader went away (a broken pipe: not the writer's failure)."""
        self.flush()
        if self.error is None or isinstance(self.error, BrokenPipeError):
            return None
        return str(getattr(self.error, "strerror", None) or self.error)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except (OSError, ValueError, AttributeError):
            return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


def guard_streams() -> Terminal | None:
    """Put sys.stdout and sys.stderr behind `Terminal`; returns stdout's (its `error` says
    whether writing it failed). Already guarded: the ones in place. A stream that is None (the
    descriptor was closed when Python started: `>&-`) stays None, which print() writes nowhere."""
    if sys.stdout is not None and not isinstance(sys.stdout, Terminal):
        sys.stdout = Terminal(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, Terminal):
        sys.stderr = Terminal(sys.stderr)
    return sys.stdout if isinstance(sys.stdout, Terminal) else None
