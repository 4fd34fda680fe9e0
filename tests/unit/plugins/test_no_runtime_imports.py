"""The Airflow side (plugins/, dags/) imports nothing from the Spark runtime (spark_apps): what both
sides need (the cap, the last commit marker, a slot's paths, checkpoint files) is in baton/. An
Airflow deployment then needs neither pyspark nor the runtime's modules to run Baton's tasks and
triggers; the runtime is started as a process where it is needed (a slot)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def runtime_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        found += [
            f"{path.relative_to(REPO)}:{node.lineno} imports {n}"
            for n in names
            if n == "spark_apps" or n.startswith("spark_apps.")
        ]
    return found


def test_no_module_of_the_airflow_side_imports_the_spark_runtime():
    files = sorted([*(REPO / "plugins").rglob("*.py"), *(REPO / "dags").rglob("*.py")])
    assert len(files) > 20  # the walk found the Airflow side
    assert [hit for f in files for hit in runtime_imports(f)] == []
