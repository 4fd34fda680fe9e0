"""The embedded Airflow's DAG parsing yields the CPU: the dag-processor under standalone, and what it
forks, run at PARSING_NICE; standalone's other components keep their priority."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from baton.local.airflow import PARSING_NICE, Airflow
from baton.procfs import process_stats, tree_threads

# A stand-in for `airflow standalone`: children named like its components; the dag-processor has a
# child of its own (a parser it forked) and a second thread.
STANDALONE = textwrap.dedent("""
    import subprocess, sys, time
    py = sys.executable
    sleeper = "import sys, threading, time, subprocess; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); " \\
              "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])] if sys.argv[1] == 'dag-processor' else []; " \\
              "time.sleep(60)"
    procs = [subprocess.Popen([py, "-c", sleeper, name]) for name in ("scheduler", "dag-processor", "triggerer")]
    time.sleep(60)
""")


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def children_of(pid: int) -> dict[str, int]:
    """pid's children by their last argument."""
    out = {}
    for child, fields in process_stats():
        if int(fields[1]) == pid:
            try:
                out[Path(f"/proc/{child}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")[-1].decode()] = child
            except OSError:
                continue
    return out


def test_the_dag_processor_and_its_parsers_run_at_the_parsing_nice_and_nothing_else(tmp_path):
    standalone = subprocess.Popen([sys.executable, "-c", STANDALONE], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            kids = children_of(standalone.pid)
            parser = children_of(kids["dag-processor"]) if "dag-processor" in kids else {}
            if len(kids) == 3 and parser and len(tree_threads(kids["dag-processor"])) >= 3:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the stand-in's processes did not start: {children_of(standalone.pid)}")
        airflow = Airflow(tmp_path, 1, "127.0.0.1:1")
        airflow.proc.pid_file.write_text(str(standalone.pid))
        base = nice_of(standalone.pid)

        assert airflow.lower_parsing_priority() == [kids["dag-processor"]]

        processor_threads = tree_threads(kids["dag-processor"])
        assert len(processor_threads) >= 3  # its own two threads and its parser
        assert {nice_of(t) for t in processor_threads} == {max(base, PARSING_NICE)}
        for name in ("scheduler", "triggerer"):
            assert {nice_of(t) for t in tree_threads(kids[name])} == {base}, name
        assert nice_of(standalone.pid) == base
    finally:
        os.killpg(standalone.pid, 9)
        standalone.wait()


def test_without_a_running_standalone_nothing_is_changed(tmp_path):
    assert Airflow(tmp_path, 1, "127.0.0.1:1").lower_parsing_priority() == []
