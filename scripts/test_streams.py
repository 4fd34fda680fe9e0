"""`make test`'s integration and end-to-end tests as two pytest runs at once, so the suite fits its budget
on a 2-core machine:

- integration (tests/integration): the Spark slots' runtime and apps (about 14 minutes alone), then
  the broker's protocol, the control log, Airflow's triggers, the launcher, TLS, the tools (about 4
  minutes, mostly waiting);
- e2e (tests/e2e): the whole platform (Airflow, PostgreSQL, the broker, slots) driven through the REST
  API, a browser and the `baton` CLI (about 15 minutes alone).

Neither keeps both cores busy alone (both wait on batches, triggers, leases and Airflow's scheduler
more than they compute: a Spark integration module kept 59 % of the 2 cores busy, the broker and
Airflow tests 29 %). Side by side on a fresh clone of a 2-core machine: 23 and 22.5 minutes, the
cores 86 % busy, `make test` 25 minutes in all, where one after the other it took 32. Their figures (batch budgets, settle checks) are judged against
a busy host already. Each run has its own pytest temporary directory
(--basetemp): a second pytest on the default one would reset the permissions of the shared
`pytest-of-<user>` directory under the other run's PostgreSQL, which runs as another user when the
tests run as root (baton.local.postgres).

The integration stream prints as it goes; the e2e one's output follows once it ends. Exit status: the
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
SHOWN = ["tests/integration"]  # printed as it runs
BESIDE = ["tests/e2e"]  # its output printed once it ends


def pytest_argv(paths: list[str], basetemp: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *paths, f"--basetemp={basetemp}", *extra]


def main(extra: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tmp = Path(tempfile.mkdtemp(prefix="baton-tests-"))
    beside_log = tmp / "beside.log"
    try:
        with beside_log.open("w") as out:
            beside = subprocess.Popen(
                pytest_argv(BESIDE, tmp / "beside", extra), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
            try:
                shown_rc = subprocess.call(pytest_argv(SHOWN, tmp / "shown", extra), cwd=ROOT)
            finally:
                if beside.poll() is None:
                    log.info("waiting for %s to end", " ".join(BESIDE))
                beside_rc = beside.wait()
        log.info("--- %s, run beside it:", " ".join(BESIDE))
        sys.stdout.write(beside_log.read_text())
        sys.stdout.flush()
        log.info("%s exit %d, %s exit %d", " ".join(SHOWN), shown_rc, " ".join(BESIDE), beside_rc)
        if extra:  # a selection (-k, -m) may leave one stream nothing to run: pytest's 5, not a failure
            shown_rc, beside_rc = (0 if rc == 5 else rc for rc in (shown_rc, beside_rc))
        return shown_rc or beside_rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
