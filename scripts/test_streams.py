"""`make test`'s integration and end-to-end tests as two pytest runs at once, so the suite fits its budget
on a 2-core machine:

- heavy: the Spark slots and the platform (tests/integration/spark_apps, tests/e2e): CPU-bound, and
  their figures (batch budgets, settle checks) are judged against a busy host already;
- light: everything else under tests/integration (the broker's protocol, the control log, Airflow's
  triggers, the launcher, TLS, the tools): about 4 minutes of mostly waiting (about a third of one core).

Run one after the other they took about 30 minutes; side by side the light stream ends inside the heavy
one's first minutes. Each run has its own pytest temporary directory (--basetemp): a second pytest on
the default one would reset the permissions of the shared `pytest-of-<user>` directory under the other
run's PostgreSQL, which runs as another user when the tests run as root (baton.local.postgres).

The heavy stream prints as it goes; the light one's output follows once it ends. Exit status: the
first failing stream's, else 0. Extra arguments go to both pytest runs (`-k x`: a stream with nothing
selected is no failure).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("test_streams")

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ["tests/integration/spark_apps", "tests/e2e"]
LIGHT = ["tests/integration", "--ignore=tests/integration/spark_apps"]


def pytest_argv(paths: list[str], basetemp: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *paths, f"--basetemp={basetemp}", *extra]


def main(extra: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tmp = Path(tempfile.mkdtemp(prefix="baton-tests-"))
    light_log = tmp / "light.log"
    try:
        with light_log.open("w") as out:
            light = subprocess.Popen(
                pytest_argv(LIGHT, tmp / "light", extra), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
            try:
                heavy_rc = subprocess.call(pytest_argv(HEAVY, tmp / "heavy", extra), cwd=ROOT)
            finally:
                if light.poll() is None:
                    log.info("waiting for the light stream (%s) to end", " ".join(LIGHT))
                light_rc = light.wait()
        log.info("--- the light stream: %s", " ".join(LIGHT))
        sys.stdout.write(light_log.read_text())
        sys.stdout.flush()
        log.info("streams: heavy exit %d, light exit %d", heavy_rc, light_rc)
        if extra:  # a selection (-k, -m) may leave one stream nothing to run: pytest's 5, not a failure
            heavy_rc, light_rc = (0 if rc == 5 else rc for rc in (heavy_rc, light_rc))
        return heavy_rc or light_rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
