"""The runtime's modules import each other without a cycle, counting imports inside functions and
under TYPE_CHECKING too: a cycle hidden in a function-level import (the source and its driver reader,
the prefetcher and the source's planning, once) works only in the order the modules happen to load."""

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[4] / "spark_apps" / "runtime"
PACKAGE = "spark_apps.runtime"


def runtime_imports(source: str) -> set[str]:
    """The spark_apps.runtime modules `source` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            found.add(node.module[len(PACKAGE) + 1:])
        elif isinstance(node, ast.Import):
            found.update(a.name[len(PACKAGE) + 1:] for a in node.names if a.name.startswith(PACKAGE + "."))
    return {name.split(".")[0] for name in found}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
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
    graph = {p.stem: runtime_imports(p.read_text()) for p in RUNTIME.glob("*.py") if p.stem != "__init__"}
    assert {"kafka_driver_reader", "source_plan"} <= graph["kafka_source"] | graph["kafka_stream_reader"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_through_function_level_imports_is_found():
    graph = {"a": runtime_imports("def f():\n    from spark_apps.runtime.b import g\n"),
             "b": runtime_imports("def g():\n    from spark_apps.runtime import a\n"),
             "c": runtime_imports("import spark_apps.runtime.a\n")}
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert find_cycle(graph) == ["a", "b", "a"]
