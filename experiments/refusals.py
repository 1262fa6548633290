"""Every refusal in one form: `error: KEY=VALUE is not allowed: WHY`, exit 2, nothing written.

Hydra refuses some input itself, before any of profsweep's checks run (an override it cannot
parse or merge, an unknown option of a config group, a key the configuration does not have): it
prints its own text with a hint about HYDRA_FULL_ERROR and exits 1. The entry point holds the
process's stderr until the sweep has started (`hold()` ... `release()`), and when Hydra refuses in
that time, rewrites its text into profsweep's form and exits 2. With HYDRA_FULL_ERROR=1 Hydra's
own text and traceback are left as they are.
"""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator, NoReturn

EXIT_BAD_INPUT = 2
_FULL_ERROR_HINT = re.compile(r"\n?Set the environment variable HYDRA_FULL_ERROR=1[^\n]*\n?")


class _Held(io.TextIOBase):
    """stderr, held back until released: then everything held is written and the rest passes."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.held: list[str] | None = []

    def write(self, text: str) -> int:
        if self.held is None:
            return self.stream.write(text)
        self.held.append(text)
        return len(text)

    def flush(self) -> None:
        if self.held is None:
            self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")

    def release(self) -> str:
        text = "".join(self.held or [])
        self.held = None
        return text


_HELD: list[_Held] = []
CONF = Path(__file__).resolve().parents[1] / "conf"  # the config groups: conf/<group>/<option>.yaml


def refuse(message: str) -> NoReturn:
    """Refuse the input before any job starts: `error: MESSAGE` on stderr, exit 2. (Hydra turns an
    exception raised in a callback into a warning, so a refusal is a SystemExit, said first.)"""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_BAD_INPUT)


def hold() -> None:
    """Hold this process's stderr (the entry point, before Hydra starts)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1" or _HELD:
        return
    held = _Held(sys.stderr)
    _HELD.append(held)
    sys.stderr = held  # type: ignore[assignment]


def holding() -> bool:
    return bool(_HELD)


def release(rephrase: bool = False) -> None:
    """Write what was held (rewritten into profsweep's form when `rephrase`: Hydra refused) and let
    stderr pass from now on."""
    if not _HELD:
        return
    held = _HELD.pop()
    text = held.release()
    sys.stderr = held.stream
    if rephrase and text.strip():
        text = in_our_words(text)
    if text:
        held.stream.write(text)
        held.stream.flush()


def in_our_words(text: str) -> str:
    """Hydra's refusal text as `error: KEY=VALUE is not allowed: WHY` (or `error: ...` with its
    own first line where no rule knows it), without the HYDRA_FULL_ERROR hint."""
    text = _FULL_ERROR_HINT.sub("\n", text).split("\nConfig search path:")[0].strip()
    if text.startswith("error: "):  # already ours
        return text + "\n"
    merge = re.search(r"Error merging override (.+?)(?: \(in the job [^)]*\))?\n(.+?)\n\s+full_key: (\S+)", text)
    if merge:
        hint = ("; expect is a list of quoted expectations, e.g. 'expect=[\"timed_us_per_step < 100\"]'"
                if merge.group(3) == "expect" else "")
        return f"error: {merge.group(1)} is not allowed: {merge.group(2).strip()} (key {merge.group(3)}){hint}\n"
    missing = re.search(r"Could not find '([^'/]+)/([^']*)'", text)  # workload=nope, workload= (empty)
    if missing:
        group, value = missing.groups()
        options = re.findall(r"^\t(\S+)$", text.split(f"Available options in '{group}':", 1)[-1], re.MULTILINE)
        choices = f"choose one of {', '.join(options)}" if options else f"no such option of {group}"
        return f"error: {group}={value} is not allowed: {choices}\n"
    unknown = re.search(r"Could not override '([^']+)'\.\nTo append to your config use \+(\S+)", text)
    if unknown:
        key, override = unknown.groups()
        from experiments.config import known_keys

        return f"error: {override} is not allowed: {key} is not a key of this configuration ({known_keys(key)})\n"
    lexer = re.search(r"(?:LexerNoViableAltException|Error parsing override)[:']? ?'?([^\n']*)'?", text)
    if lexer:
        bad = lexer.group(1).strip()
        example = ("'expect=[\"timed_us_per_step < 100\"]'" if bad.startswith(("expect=", "+expect="))
                   else "'key=\"value\"'")
        return (f"error: {bad} is not allowed: it is not a valid override (quote a value with "
                f"spaces or characters outside ASCII, e.g. {example}; "
                "https://hydra.cc/docs/advanced/override_grammar/basic)\n")
    if re.search(r"^mismatched input|^extraneous input|^no viable alternative", text):  # size=16, size=a=b
        bad = _unparsable(sys.argv[1:])
        if bad is not None:
            return (f"error: {bad} is not allowed: it is not a valid override ({text.splitlines()[0].strip()}; "
                    "https://hydra.cc/docs/advanced/override_grammar/basic)\n")
    if re.search(r"Config group override must be a string or a list", text):  # workload=null, workload=16
        found = _group_not_a_name(sys.argv[1:])
        if found is not None:
            arg, key, options = found
            return f"error: {arg} is not allowed: {key} takes one of {', '.join(options)}\n"
    if text.startswith("Traceback"):  # Hydra's own error with its stack: its last line says it
        return f"error: {text.strip().splitlines()[-1]}\n"
    first, _, rest = text.partition("\n")
    return f"error: {first.strip()}" + (("\n" + rest.rstrip()) if rest.strip() else "") + "\n"


def _overrides(args: list[str]) -> Iterator[tuple[str, Any]]:
    """Each command-line override (`key=value`) with Hydra's parse of it alone, None where its
    grammar refuses it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            yield arg, parser.parse_overrides([arg])[0]
        except OverrideParseException:
            yield arg, None


def _unparsable(args: list[str]) -> str | None:
    """The first command-line override Hydra's parser refuses, or None."""
    return next((arg for arg, override in _overrides(args) if override is None), None)


def _group_not_a_name(args: list[str]) -> tuple[str, str, list[str]] | None:
    """The first override of a config group (conf/<group>/) one of whose values is not a name
    (null, a number): the override, the group and its options; None if none is."""
    from hydra.errors import HydraException

    for arg, override in _overrides(args):
        if override is None:
            continue
        key = override.get_key_element().lstrip("+~")
        if not (CONF / key).is_dir():
            continue
        try:
            values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
        except HydraException:  # glob() over a group needs the config loader: its values are names
            continue
        if any(not isinstance(v, str) for v in values):
            return arg, key, sorted(f.stem for f in (CONF / key).glob("*.yaml"))
    return None
