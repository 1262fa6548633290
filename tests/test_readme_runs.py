"""Every command of the README runs, as written, in a fresh copy of the project: the files git
tracks (and new ones it does not ignore), with this checkout's .venv linked in, nothing else. The
commands run in an order where each finds what it reads (the sweeps first, the nightly recipe
twice, as on two nights); what each must leave is checked. Two are not run here: `make test` (this
is it) and the SLURM command (no cluster: test_docs composes it)."""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_docs import README, commands

pytestmark = pytest.mark.slow

NOT_RUN = {"make test": "this is the test command", "hydra/launcher=slurm": "needs a SLURM cluster"}


def python_block(text: str) -> str:
    """The README's Python example: the indented block that starts with `import profsweep`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "import profsweep")
    block = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block)


def fresh_copy(target: Path) -> Path:
    """The project as a fresh clone has it (plus what is not committed yet), .venv linked in. The
    files keep their times, so make finds .venv set up for this pyproject.toml, as it is; where it
    would set .venv up again (the venv was not made by make, or for another torch), the test is
    skipped: make would reinstall into this checkout's .venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True)
    if listed.returncode != 0:
        pytest.skip(f"git cannot list the project's files here: {listed.stderr.decode().strip()[:200]}")
    listed = listed.stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    (target / ".venv").symlink_to(ROOT / ".venv")
    installed = ROOT / ".venv" / ".installed"
    if installed.exists():  # a checkout's pyproject.toml edited after its set-up must not reinstall here
        stamp = installed.stat().st_mtime - 1
        os.utime(target / "pyproject.toml", (stamp, stamp))
    spec = re.search(r"^TORCH_SPEC \?= (.+)$", (target / "Makefile").read_text(), re.M)
    made = ROOT / ".venv" / ".torch-spec"
    if not (installed.exists() and made.exists() and spec and made.read_text().strip() == spec.group(1).strip()
            and installed.stat().st_mtime >= made.stat().st_mtime):
        pytest.skip(".venv was not set up by `make` for this torch: `make sweep` would set it up again")
    return target


def is_sweep(command: str) -> bool:
    return "experiments/run.py" in command or command.startswith(("make sweep", ".venv/bin/profsweep run"))


def order(command: str) -> int:
    """Sweeps first (the others read them), the nightly ones last of them (compare reads the last
    two), then the rest in the README's order."""
    return 2 if not is_sweep(command) else 1 if "outputs/nightly" in command else 0


def environment(home: Path) -> dict[str, str]:
    """The copy's own code first (.venv's editable install points at this checkout), no browser."""
    return {**os.environ, "PYTHONPATH": str(home), "BROWSER": "true"}


def run(command: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=environment(cwd))


def test_every_readme_command_runs_as_written_in_a_fresh_copy(tmp_path):
    text = README.read_text()
    found = commands(text)
    to_run = sorted((c for c in found if not any(k in c for k in NOT_RUN)), key=order)
    assert len(found) - len(to_run) == len(NOT_RUN), found  # each command not run is one named above
    home = fresh_copy(tmp_path / "profsweep")
    outputs = home / "outputs"
    done: dict[str, str] = {}
    for command in to_run:
        if command.startswith(".venv/bin/python -m analysis serve"):
            done[command] = serve(command, home)
            continue
        times = 2 if "outputs/nightly" in command and is_sweep(command) else 1
        for _ in range(times):  # the nightly recipe, as on two nights
            result = run(command, home)
            said = result.stdout + result.stderr
            allowed = (0, 1) if "--fail-if-slower" in command or "--fail-on-change" in command else (0,)
            assert result.returncode in allowed, f"{command}\n{said[-3000:]}"
            assert "Traceback" not in said, f"{command}\n{said[-3000:]}"
            if is_sweep(command):
                ran = re.search(r"done: (\d+) jobs? \((\d+) ok, 0 failed\)", said)
                assert ran and ran.group(1) == ran.group(2) and "not run again" not in said, f"{command}\n{said[-3000:]}"
                assert (outputs / "latest" / "report.html").is_file()
            done[command] = said

    nightly = sorted(p for p in (outputs / "nightly").iterdir() if (p / "multirun.yaml").is_file())
    assert len(nightly) == 2 and (outputs / "previous").resolve() == nightly[0].resolve()
    assert (outputs / "latest").resolve() == nightly[1].resolve()
    compared = next(s for c, s in done.items() if " compare " in c)
    assert re.search(r"^compare: 2 pairs \(", compared, re.M), compared  # size=64,1024, each with a verdict
    assert (nightly[1] / "compare" / "compare.csv").is_file(), compared
    history = next(s for c, s in done.items() if " history " in c)
    assert "history: 2 sweeps from" in history, history
    page = re.search(r"(\S+history\.html)$", history, re.M)
    assert page and (home / page.group(1)).is_file(), history
    traced = next(s for c, s in done.items() if " trace " in c)
    assert traced.startswith("trace: ") and "Self CPU total" in traced, traced

    script = python_block(text) + "\nprint('ROWS', len(sweep.summary), len(sweep.compare('outputs/previous').table))\n"
    result = subprocess.run([str(home / ".venv" / "bin" / "python"), "-c", script], cwd=home, capture_output=True,
                            text=True, timeout=300, env=environment(home))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = re.search(r"ROWS (\d+) (\d+)", result.stdout)
    assert rows and int(rows.group(1)) == 2 and int(rows.group(2)) == 2, result.stdout  # size=64,1024 each


def serve(command: str, home: Path) -> str:
    """Start the server as written, fetch the page it names, stop it with Ctrl-C (SIGINT)."""
    server = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=home, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=environment(home),
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal has it
    # (a test run in the background, `make test &`, starts with Ctrl-C ignored, and its children inherit that)
    try:
        ready, _, _ = select.select([server.stdout], [], [], 120)
        line = server.stdout.readline() if ready else ""
        url = re.search(r"http://127\.0\.0\.1:\d+/\S+", line)
        assert url, f"no URL from the server within 120 s: {line!r}"
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
        with direct.open(url.group(0), timeout=30) as page:
            assert page.status == 200 and b"<html" in page.read(4096).lower()
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()  # never left serving after the test
            server.wait()
            raise AssertionError("the server did not stop on Ctrl-C (SIGINT) within 30 s") from None
    return line
