"""The README is the front door: short, and every command in it is one the project takes. Each
`experiments/run.py` command composes (Hydra's `--cfg job`: every key and value accepted, nothing
run); each `python -m analysis` or `profsweep` subcommand exists (its `--help`); the docs site
builds (`make test` runs `mkdocs build --strict`)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"


def commands(text: str) -> list[str]:
    """The shell commands of the indented code blocks (continuation lines joined)."""
    found, current = [], ""
    for line in text.splitlines():
        if not line.startswith("    ") or line.strip().startswith(("#", "-", "analysis:", "conclusions", "import ",
                                                                    "sweep", "3 of", "in two")):
            continue
        part = line.strip().split("  #")[0].rstrip()
        current = f"{current} {part.rstrip(chr(92)).strip()}".strip() if current else part.rstrip(chr(92)).strip()
        if not part.endswith("\\"):
            found.append(current)
            current = ""
    return [c for c in found if c.startswith((".venv/bin/python", ".venv/bin/profsweep", "make ", "profsweep "))]


def test_the_readme_fits_on_a_page():
    assert len(README.read_text().splitlines()) <= 200


RUN_COMMANDS = [c for c in commands(README.read_text()) if "experiments/run.py" in c]
ANALYSIS_COMMANDS = [c for c in commands(README.read_text()) if "-m analysis" in c or c.startswith("profsweep ")]


def test_the_readme_has_the_commands_it_should():
    assert len(RUN_COMMANDS) >= 3 and len(ANALYSIS_COMMANDS) >= 3
    assert any(c.startswith("make sweep") for c in commands(README.read_text()))


@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_each_run_command_of_the_readme_composes(command):
    """Its first grid point, composed by Hydra and printed (--cfg job goes without -m)."""
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, text=True,
                           check=True).stdout.split("\0")[:-1]  # as the shell splits it, $(date ...) expanded
    args = [a for a in words[1:] if a != "-m"]  # after .venv/bin/python
    first = [a.split("=", 1)[0] + "=" + a.split("=", 1)[1].split(",")[0] if "=" in a else a for a in args]
    done = subprocess.run([sys.executable, *first, "--cfg", "job"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "size:" in done.stdout


@pytest.mark.parametrize("command", ANALYSIS_COMMANDS)
def test_each_analysis_command_of_the_readme_exists(command):
    words = shlex.split(command)
    sub = words[words.index("analysis") + 1] if "analysis" in words else words[1]
    exe = [sys.executable, "-m", "analysis"] if "analysis" in words else [sys.executable, "-m", "profsweep.cli"]
    done = subprocess.run([*exe, sub, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage:" in done.stdout


def test_every_docs_page_is_in_the_site_and_every_readme_link_resolves():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert pages and all(page in nav for page in pages), [p for p in pages if p not in nav]
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_the_docs_home_page_is_the_readme():
    """The site's quick start (docs/index.md) is the README, its links made relative to docs/: the
    commands test_readme_runs runs are the docs' too."""
    assert (ROOT / "docs" / "index.md").read_text() == README.read_text().replace("](docs/", "](")
