"""Atomic writes for the analysis outputs (the contract's), each failure a WriteError naming the
file."""

from __future__ import annotations

from pathlib import Path

from profsweep import contract


class WriteError(OSError):
    """An output the analysis could not write; the message names the file and why."""

    def __str__(self) -> str:
        return str(self.strerror)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    try:
        contract.atomic_write_bytes(path, data)
    except OSError as exc:
        if isinstance(exc, WriteError):
            raise
        raise WriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
