"""The runtime's modules import each other without a cycle, counting imports inside functions and
under TYPE_CHECKING too: a cycle hidden in a function-level import (the source and its driver reader,
the prefetcher and the source's planning, once) works only in the order the modules happen to load."""

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[4] / "spark_apps" / "runtime"
PACKAGE = "spark_apps.runtime"


def runtime_imports(source: str, modules: frozenset[str] = frozenset()) -> set[str]:
    """The spark_apps.runtime modules `source` imports, anywhere in it, by their names under the package
    ("follower" for a top-level module, "coordination.follower" in a subpackage). `from P import n` imports
    P.n if that is one of `modules` or P is the package itself, else P."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            base = node.module[len(PACKAGE) + 1 :]
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name[len(PACKAGE) + 1 :] for a in node.names if a.name.startswith(PACKAGE + "."))
    return found


def runtime_modules() -> dict[str, str]:
    """Each module under spark_apps/runtime (subpackages' too) by its name under the package: its source."""
    return {
        ".".join(p.relative_to(RUNTIME).with_suffix("").parts): p.read_text()
        for p in RUNTIME.rglob("*.py")
        if p.stem != "__init__"
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module) :] + [module]
        if module in done or module not in graph:
            return None
        path.append(module)
        for imported in sorted(graph[module]):
            if cycle := visit(imported):
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if cycle := visit(module):
            return cycle
    return None


def test_the_runtime_modules_import_each_other_without_a_cycle():
    sources = runtime_modules()
    graph = {name: runtime_imports(text, frozenset(sources)) for name, text in sources.items()}
    assert {"source.kafka_driver_reader", "source.source_plan"} <= (
        graph["source.kafka_source"] | graph["source.kafka_stream_reader"]
    )
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_through_function_level_imports_is_found():
    graph = {
        "a": runtime_imports("def f():\n    from spark_apps.runtime.b import g\n"),
        "b": runtime_imports("def g():\n    from spark_apps.runtime import a\n"),
        "c": runtime_imports("import spark_apps.runtime.a\n"),
    }
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert find_cycle(graph) == ["a", "b", "a"]
