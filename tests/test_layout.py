"""The architecture, read from the source: config -> job -> artifacts -> analysis, with the
analysis a core and three products (report/, compare/, history/) on it. Every import is scanned,
at module level and inside functions alike."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

SOURCES = ("analysis", "profsweep", "experiments")


def modules() -> dict[str, Path]:
    found = {}
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, str]]:
    """(module, name) for every `import module` and `from module import name` in the file, the
    module resolved to one of ours where it is one (a `from package import submodule` to the
    submodule)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((sub, "") if sub in known else (node.module, a.name))
    return [(m, n) for m, n in out if m.split(".")[0] in SOURCES]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {m for m, _ in imports(path, known) if m in known and m != name} for name, path in known.items()}


def test_no_import_cycle_in_the_analysis_nor_anywhere_else():
    edges = graph()
    # the package's __init__ runs the report (analyse_folder); importing a submodule runs it first,
    # as Python does, but it imports nothing that imports it back: it is a module like the others
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert not cycles, cycles


def test_no_private_name_is_used_across_modules():
    known = modules()
    used = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if (a.name.startswith("_") and not a.name.startswith("__")
                            and node.module.split(".")[0] in SOURCES):
                        used.append(f"{name}: from {node.module} import {a.name}")
                    if f"{node.module}.{a.name}" in known:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in known:
                        aliases[a.asname or a.name] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                used.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    assert not used, used


def test_the_job_side_and_the_analysis_meet_only_in_the_contract():
    edges = graph()
    crossing = [(a, b) for a, targets in edges.items() for b in targets
                if {a.split(".")[0], b.split(".")[0]} == {"analysis", "experiments"}]
    assert not crossing, crossing
    front_doors = ("profsweep", "profsweep.cli")  # the Python API and the one command: they call both sides
    shared = [(a, b) for a, targets in edges.items() if a.startswith("profsweep") and a not in front_doors
              for b in targets if not b.startswith("profsweep")]
    assert not shared, shared  # the rest of profsweep/ is what both sides import, importing neither


def test_the_analysis_is_a_core_with_three_products_on_it():
    edges = graph()
    products = ("report", "compare", "history")
    for product in products:
        assert (ROOT / "analysis" / product / "__init__.py").is_file()
    for a, targets in edges.items():
        parts = a.split(".")
        if parts[0] != "analysis" or len(parts) < 2:
            continue
        mine = parts[1] if parts[1] in products else None
        for b in targets:
            theirs = b.split(".")[1] if b.startswith("analysis.") and b.split(".")[1] in products else None
            if mine is None and theirs is not None:  # the core uses no product; the entry points may
                assert a in ("analysis.__main__", "analysis.api"), f"the core's {a} imports {b}"
            if mine is not None and theirs is not None:
                assert mine == theirs, f"{a} imports {b}: a product uses another's engine"
