"""The architecture, read from the source: config -> job -> artifacts -> analysis, with the
analysis a core and three products (report/, compare/, history/) on it. Every import is scanned,
at module level and inside functions alike."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

SOURCES = ("analysis", "profsweep", "experiments", "hydra_plugins")
IMPORTERS = ("importlib.import_module", "import_module", "__import__")


def modules() -> dict[str, Path]:
    found = {}
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str]]:
    """(module, name) for every `import module` and `from module import name` in the file
    (relative ones resolved), the module resolved to one of ours where it is one (a `from package
    import submodule` to the submodule); every importlib.import_module of a constant name (its
    package= too, under any alias); and every tuple of our modules' names (imported in a loop)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    importers = set(IMPORTERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "importlib":
            importers |= {a.asname or a.name for a in node.names if a.name == "import_module"}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = _package(name, path).split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join([*base, *([module] if module else [])])
            for a in node.names:
                sub = f"{module}.{a.name}"
                out.append((sub, "") if sub in known else (module, a.name))
        elif isinstance(node, ast.Call) and _dotted(node.func) in importers:
            given = {k.arg: k.value for k in node.keywords}
            target, package = (node.args + [None, None])[:2]
            target, package = target or given.get("name"), package or given.get("package")
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                module = target.value
                if module.startswith(".") and isinstance(package, ast.Constant):
                    module = str(package.value) + module
                out.append((module, ""))
        elif isinstance(node, (ast.Tuple, ast.List)) and node.elts and all(
                isinstance(n, ast.Constant) and n.value in known for n in node.elts):
            out += [(n.value, "") for n in node.elts]
    return [(m, n) for m, n in out if m.split(".")[0] in SOURCES]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {m for m, _ in imports(name, path, known) if m in known and m != name}
            for name, path in known.items()}


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


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` of an attribute chain on a name, or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def test_no_private_name_is_used_across_modules():
    known = modules()
    used = []
    for name, path in known.items():
        for module, imported in imports(name, path, known):
            if imported.startswith("_") and not imported.startswith("__") and module != name:
                used.append(f"{name}: from {module} import {imported}")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                                if f"{node.module}.{a.name}" in known})
            elif isinstance(node, ast.Import):
                aliases.update({(a.asname or a.name): a.name for a in node.names if a.name in known})
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = _dotted(node.value)
            if owner is None:
                continue
            head, _, rest = owner.partition(".")
            module = ".".join(filter(None, [aliases.get(head, head), rest]))
            if module in known and module != name:
                used.append(f"{name}: {module}.{node.attr}")
    assert not used, used


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_job_side_and_the_analysis_meet_only_in_the_contract():
    edges = graph()
    crossing = [(a, b) for a, targets in edges.items() for b in targets
                if {a.split(".")[0], b.split(".")[0]} == {"analysis", "experiments"}]
    assert not crossing, crossing
    # nor through anything between them (profsweep's front door, the grid sweeper)
    for side, other in (("experiments", "analysis"), ("analysis", "experiments"), ("hydra_plugins", "analysis"),
                        ("hydra_plugins", "experiments")):
        for module in (m for m in edges if m.split(".")[0] == side):
            reached = sorted(m for m in reachable(edges, module) if m.split(".")[0] == other)
            assert not reached, f"{module} reaches {reached}"
    front_doors = ("profsweep", "profsweep.cli")  # the Python API and the one command: they call both sides
    shared = [(a, b) for a, targets in edges.items() if a.startswith("profsweep") and a not in front_doors
              for b in targets if not b.startswith("profsweep")]
    assert not shared, shared  # the rest of profsweep/ is what both sides import, importing neither


def test_the_analysis_is_a_core_with_three_products_on_it():
    edges = graph()
    products = ("report", "compare", "history")
    for product in products:
        assert (ROOT / "analysis" / product / "__init__.py").is_file()
    # the entry points run the products: the package (analyse_folder), the command, the Python
    # API and the Hydra hook; the rest of analysis/ is the core, which uses none of them
    entry_points = ("analysis", "analysis.__main__", "analysis.api", "analysis.callback")
    for a, targets in edges.items():
        parts = a.split(".")
        if parts[0] != "analysis" or a in entry_points:
            continue
        mine = parts[1] if parts[1] in products else None
        for b in targets:
            theirs = b.split(".")[1] if b.startswith("analysis.") and b.split(".")[1] in products else None
            if mine is None and theirs is not None:
                raise AssertionError(f"the core's {a} imports {b}")
            if mine is not None and theirs is not None:
                assert mine == theirs, f"{a} imports {b}: a product uses another's engine"
