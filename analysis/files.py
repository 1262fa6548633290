"""Atomic writes for the analysis outputs: a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path


class WriteError(OSError):
    """An output the analysis could not write; the message names the file and why."""

    def __str__(self) -> str:
        return str(self.strerror)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    # Named before anything is created, so an interrupt at any point can still remove it.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        if isinstance(exc, WriteError):
            raise
        raise WriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only folder refuses even to unlink what is not there
        pass


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
