"""What `make demo` shows once the platform is up: the main job, live.

It starts `click_counts` on both slots through Airflow (baton_lifecycle, as a user would from the
trigger form), feeds it click events at a modest rate, says where to look (the Baton page, the
metrics) and how to trigger a rolling upgrade, then keeps the apps' table in the terminal until
Ctrl-C. The caller stops the load and the platform.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from baton.airflow_api import AirflowClient
from baton.apps import load_app
from baton.generations import archive_unused
from baton.kafka.control_log import read_control
from baton.local.platform import DEMO_LOADGEN as LOADGEN
from baton.local.platform import Platform
from baton.local.procs import Managed
from baton.records import ControlRecord, Slot

log = logging.getLogger(__name__)

DEMO_APP = "click_counts"
DEMO_RATE = 2000  # events/s: data visibly flows, and both slots, Airflow and the broker share 2 cores
DEMO_USERS = 10_000
REFRESH_S = 3.0
LOAD_CHUNK_S = 600


class DemoFailed(RuntimeError):
    """A failure the demo knows: its message says why and what to do (shown without a traceback)."""


def what_to_do(reasons: list[str]) -> str:
    """The way out of a failed start, for the reasons its tasks gave."""
    if any("input data loss" in r for r in reasons):
        return (
            "The slots' checkpoints stand on input offsets the broker no longer has. The embedded broker "
            "keeps its topics in memory, so each restart of the platform empties them while the "
            "checkpoints stay on disk. To start over: `make reset` (it stops the platform and deletes "
            "the checkpoints and Airflow's database), then `make demo`."
        )
    return (
        "Read the reasons above; `make up` keeps the platform running so that the task logs can be read "
        "in Airflow, and `make reset` starts everything over."
    )


# How long the demo keeps the checkpoints it set aside (baton.generations.purge_expired deletes them then).
SET_ASIDE_KEEP_MS = 7 * 24 * 3600 * 1000


def set_aside_orphans(state_dir: Path, app: str, broker_kept_it: bool, now_ms: int) -> list[Path]:
    """The demo app's checkpoints, moved to the archive (with a note) when the broker holds no control
    record of the app: the embedded broker keeps its topics in memory, so after a restart of the
    platform they stand on input offsets it no longer has, and a start on them fails (input data loss).
    The demo starts the app afresh instead. A broker that kept the app (still running) keeps them."""
    if broker_kept_it:
        return []
    nobody_runs = ControlRecord(app=app, revision=0, epoch=1, active=Slot.BLUE)  # no slot: every generation
    why = "the embedded broker restarted empty: these checkpoints stand on input it no longer has"
    return archive_unused(state_dir, nobody_runs, why, now_ms + SET_ASIDE_KEEP_MS, now_ms)


class Demo:
    def __init__(self, platform: Platform, say: Callable[[str], None] = print):
        self.platform, self.say = platform, say
        self.load: subprocess.Popen | None = None
        self.topic = ""
        self.where = ""  # where to look, kept above the live table

    def start(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Start the app through Airflow and the load; returns early, having started nothing more, once
        `should_stop()` (a Ctrl-C while Airflow runs the start)."""
        a = self.platform.airflow
        client = AirflowClient(a.url, "admin", a.password())
        dags = client.wait_for_dags(timeout_s=120, should_stop=should_stop)
        if should_stop():
            return
        self.say("\nBaton's DAGs in Airflow:")
        for d in dags:
            self.say(f"  - {d['dag_id']}: {(d.get('description') or '').strip()}")
        settings = self.platform.settings
        if not settings.external_kafka:
            kept = read_control(settings.kafka_bootstrap, DEMO_APP) is not None
            if moved := set_aside_orphans(settings.state_dir, DEMO_APP, kept, int(time.time() * 1000)):
                self.say(
                    f"\nthe embedded broker keeps its topics in memory: {DEMO_APP}'s checkpoints from the last "
                    f"demo stand on input it no longer has. Moved to {moved[0].parent} (kept 7 days); "
                    "the counts start afresh."
                )
        self.say(f"\nstarting {DEMO_APP} on both slots (baton_lifecycle, as the trigger form would) ...")
        run = client.trigger("baton_lifecycle", {"app": DEMO_APP, "action": "start"})
        done = client.wait_for_run("baton_lifecycle", run["dag_run_id"], timeout_s=600, should_stop=should_stop)
        if should_stop():
            return
        if done.get("state") != "success":
            try:
                reasons = client.failure_reasons("baton_lifecycle", run["dag_run_id"])
            except Exception as exc:  # the reasons are a courtesy: the state is the fact
                reasons = [f"(the tasks' reasons could not be read: {exc})"]
            raise DemoFailed(
                "\n".join(
                    [
                        f"baton_lifecycle's start of {DEMO_APP} ended {done.get('state')}:",
                        *(f"  {r}" for r in reasons),
                        what_to_do(reasons),
                    ]
                )
            )
        self.topic = load_app(DEMO_APP).input.topic
        self.say(f"feeding {self.topic} at {DEMO_RATE:,} events/s over {DEMO_USERS:,} users (baton.tools.loadgen) ...")
        self.start_load()
        self.where = f"""
Where to look (login admin / {a.password()}):
  the Baton page:   {a.url}/plugin/baton   (slots, lag, batch time, handoffs; buttons to act)
  metrics:          {a.url}/baton/metrics  (Prometheus text; a bearer token from {a.url}/auth/token)
  in a shell:       .venv/bin/baton apps --watch
A rolling upgrade to v2, from the Baton page ("Rolling upgrade...") or the DAG's trigger form:
  baton_rolling_upgrade  {{"app": "{DEMO_APP}", "version": "v2"}}

"""
        self.say(self.where)

    @property
    def load_record(self) -> Managed:
        """The load generator's pid file and log: `make down` finds it there if the demo is killed."""
        return Managed(LOADGEN, self.platform.settings.state_dir)

    def start_load(self) -> None:
        """The load generator for LOAD_CHUNK_S (it draws its whole event sequence up front: a day's
        would take gigabytes), started again by watch() each time it ends."""
        with open(self.load_record.log_file, "ab") as out:
            self.load = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "baton.tools.loadgen",
                    "--bootstrap",
                    self.platform.settings.kafka_bootstrap,
                    "--topic",
                    self.topic,
                    "--rate",
                    str(DEMO_RATE),
                    "--keys",
                    str(DEMO_USERS),
                    "--seconds",
                    str(LOAD_CHUNK_S),
                    "--quiet",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own session: a terminal's Ctrl-C reaches the demo, which stops it (stop()).
                start_new_session=True,
            )
        self.load_record.pid_file.write_text(str(self.load.pid))

    def watch(self, should_stop: Callable[[], bool]) -> None:
        """The apps' table every REFRESH_S until should_stop()."""
        from baton.app_table import apps_table
        from baton.status_feed import StatusFeed

        feed = StatusFeed(self.platform.settings.kafka_bootstrap, status_tail=2_000)
        while not should_stop():
            if self.load is not None and self.load.poll() == 0:
                self.start_load()  # a chunk ended: the next one
            elif self.load is not None and self.load.poll() is not None:
                self.say(f"the load generator exited ({self.load.returncode}); see {self.load_record.log_file}")
                self.load = None
            try:
                feed.refresh()
                table = apps_table(feed.views())
            except Exception as exc:  # a slow broker for a moment: say so, try again
                table = f"(status not read: {exc})"
            # On a terminal the table is redrawn in place (as `watch` does); piped, it is appended.
            head = "\x1b[2J\x1b[H" + self.where if sys.stdout.isatty() else "\n"
            self.say(head + time.strftime("%H:%M:%S") + "  Ctrl-C stops everything\n" + table)
            deadline = time.monotonic() + REFRESH_S
            while time.monotonic() < deadline and not should_stop():
                time.sleep(0.2)

    def stop(self) -> None:
        if self.load is not None and self.load.poll() is None:
            self.load.terminate()
            try:
                self.load.wait(10)
            except subprocess.TimeoutExpired:
                self.load.kill()
                self.load.wait()
            self.say("load generator: stopped")
        self.load_record.pid_file.unlink(missing_ok=True)
