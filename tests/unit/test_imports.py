"""The shape of the shipped code's imports (issue 76, "Structure"), read from the source with `ast`:

- no import cycle among the modules of baton/, plugins/baton_airflow and spark_apps, counting imports
  inside functions too (they only postpone a cycle to the first call) but not those under
  `if TYPE_CHECKING:` (never run);
- nothing shipped imports baton.local, the local dev platform (only baton.local itself does);
- spark_apps holds no test fault hook: a fault a test injects lives under tests/ and reaches the
  runtime through a seam (Follower.seen_control).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Package roots: the directory each top-level package's name is resolved from (plugins/ is on
# Airflow's sys.path, so the provider is the top-level package baton_airflow).
ROOTS = {"baton": REPO, "spark_apps": REPO, "baton_airflow": REPO / "plugins"}


def modules() -> dict[str, Path]:
    """Every module of the three packages by dotted name (a package by its own name, for __init__)."""
    found = {}
    for top, root in ROOTS.items():
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, except those under `if TYPE_CHECKING:`."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _type_checking(node):
            children = node.orelse
        todo.extend(children)


def imported(name: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The modules `name` (at `path`) imports, each with the line of its first import. `from a import b`
    imports a.b if that is a module, else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known and "." in target:
                target = target.rpartition(".")[0]  # `import a.b.c` of an attribute path: its module
            if target in known and target != name:
                out.setdefault(target, node.lineno)
    return out


def import_graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:
        # Iterative, so a deep chain of imports does not hit the recursion limit.
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_the_import_graph_finds_the_packages_and_their_imports():
    graph = import_graph()
    assert len(graph) > 100
    assert "baton.records" in graph["baton.handoff"]
    # A function-level import counts (operators.topics imports baton.topics inside execute).
    assert "baton.topics" in graph["baton_airflow.operators.topics"]


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycle_among_the_shipped_modules():
    graph = import_graph()
    found = cycles(graph)
    detail = [
        " <-> ".join(c)
        + ": "
        + "; ".join(f"{m} imports {t} (line {graph[m][t]})" for m in c for t in graph[m] if t in c)
        for c in found
    ]
    assert detail == []


def test_nothing_shipped_imports_the_local_dev_platform():
    files = [
        p
        for top in ("baton", "plugins", "spark_apps", "dags")
        for p in sorted((REPO / top).rglob("*.py"))
        if not p.is_relative_to(REPO / "baton" / "local")
    ]
    assert len(files) > 100
    hits = []
    for path in files:
        for node in _imports(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.module == "baton":
                names = [f"baton.{a.name}" for a in node.names]
            hits += [
                f"{path.relative_to(REPO)}:{node.lineno} imports {n}"
                for n in names
                if n == "baton.local" or n.startswith("baton.local.")
            ]
    assert hits == []


FAULT = re.compile(r"fault", re.IGNORECASE)


def _fault_names(path: Path) -> list[str]:
    """Identifiers, and strings that are not docstrings, that name a fault ("default" is no fault)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and (body := node.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        words = []
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            words = [node.name]
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.arg):
            words = [node.arg]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words = [node.value]
        found += [
            f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')} {w!r}"
            for w in words
            if FAULT.search(re.sub("default", "", w, flags=re.IGNORECASE))
        ]
    return found


def test_the_spark_runtime_ships_no_test_fault_hook():
    files = sorted((REPO / "spark_apps").rglob("*.py"))
    assert [p for p in files if FAULT.search(p.name)] == []
    assert [hit for p in files for hit in _fault_names(p)] == []
