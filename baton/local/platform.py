"""The embedded platform: broker, Baton's topics, PostgreSQL, Airflow standalone. up / down / status /
reset."""

from __future__ import annotations

from dataclasses import dataclass

from baton.kafka.admin import ensure_topics
from baton.local.airflow import ADMIN_USER, Airflow
from baton.local.broker import Broker
from baton.local.postgres import Postgres
from baton.local.procs import Managed
from baton.settings import Settings
from baton.topics import platform_topics

# Airflow's database in the platform's PostgreSQL server.
AIRFLOW_DATABASE = "airflow"
# The demo's load generator's pid file and log under the state dir (baton.local.demo): `down` stops a
# generator whose demo was killed.
DEMO_LOADGEN = "demo-loadgen"


def require_reachable(bootstrap: str, timeout_s: float = 15.0) -> None:
    """The cluster answers a metadata request, or a clear error that names it (not a hang)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from baton.kafka.client_config import kafka_config

    try:
        AdminClient(kafka_config(bootstrap)).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise RuntimeError(
            f"the Kafka cluster at {bootstrap} (BATON_KAFKA_BOOTSTRAP) did not answer within "
            f"{timeout_s:g} s: {exc.args[0]}; check the address, and BATON_KAFKA_CLIENT_CONFIG "
            f"if it needs TLS or SASL"
        ) from None


@dataclass(frozen=True)
class Platform:
    settings: Settings

    @property
    def broker(self) -> Broker:
        return Broker(self.settings.state_dir, self.settings.kafka_port)

    @property
    def postgres(self) -> Postgres:
        return Postgres(self.settings.state_dir, self.settings.postgres_port)

    @property
    def airflow(self) -> Airflow:
        return Airflow(
            self.settings.state_dir,
            self.settings.airflow_port,
            self.settings.kafka_bootstrap,
            database_uri=self.postgres.uri(AIRFLOW_DATABASE, driver="postgresql+psycopg2"),
        )

    def up(self, with_airflow: bool = True, say=print) -> None:
        # Validate app definitions before starting anything: a bad file must start nothing.
        topics = platform_topics()
        bootstrap = self.settings.kafka_bootstrap
        if self.settings.external_kafka:  # bring your own Kafka: nothing of ours to start
            say(f"broker: the Kafka cluster at {bootstrap} (BATON_KAFKA_BOOTSTRAP); no embedded broker")
            require_reachable(bootstrap)
        else:
            say(f"broker: starting Tansu on {self.broker.bootstrap} ...")
            self.broker.start()
            bootstrap = self.broker.bootstrap
        created = ensure_topics(bootstrap, topics)
        say(f"topics: {len(topics)} ready on {bootstrap} ({len(created)} created)")
        if with_airflow:
            say("postgres: starting Airflow's metadata database ...")
            self.postgres.start()
            self.postgres.ensure_database(AIRFLOW_DATABASE)
            say(f"airflow: starting standalone on {self.airflow.url} (about a minute) ...")
            self.airflow.start()
        say(self.status())

    def stop_slots(self, say=print) -> None:
        """Stop every app slot launched under this state dir (they outlive the tasks that started them),
        all at once: each stop waits up to its grace for a graceful end, and one slot's wait need not
        hold up the next (each slot has its own lock)."""
        from concurrent.futures import ThreadPoolExecutor

        from baton.launcher import Launcher

        launcher = Launcher(self.settings.state_dir)
        slots = [
            (r.parent.parent.name, r.parent.name) for r in sorted(self.settings.state_dir.glob("slots/*/*/driver.json"))
        ]
        if not slots:
            return
        with ThreadPoolExecutor(min(len(slots), 8)) as pool:
            results = list(pool.map(lambda s: launcher.stop(s[0], s[1], grace_s=30), slots))
        for (app, slot), result in zip(slots, results):
            if result.was_running:
                say(f"slot {app}/{slot}: stopped ({'graceful' if result.graceful else 'killed'})")

    def down(self, say=print) -> None:
        # A demo's load generator left by a demo that was killed (it runs in a session of its own, so a
        # kill of the demo does not reach it), then Airflow (its tasks may talk to the broker and start
        # slots), then the slots, then the broker.
        if Managed(DEMO_LOADGEN, self.settings.state_dir).stop(timeout_s=10):
            say("demo load generator: stopped")
        if self.airflow.stop():
            say("airflow: stopped")
        self.stop_slots(say)
        if self.broker.stop():
            say("broker: stopped")
        if self.postgres.stop():
            say("postgres: stopped")

    def status(self) -> str:
        s = self.settings
        lines = [f"state dir: {s.state_dir}"]
        b = self.broker
        if s.external_kafka:
            lines.append(f"broker:  the Kafka cluster at {s.kafka_bootstrap} (BATON_KAFKA_BOOTSTRAP), not started here")
        elif b.running():
            lines.append(f"broker:  running (pid {b.proc.pid()}), bootstrap {b.bootstrap}, healthy={b.healthy()}")
        else:
            lines.append("broker:  stopped")
        pg = self.postgres
        if pg.running():
            lines.append(
                f"postgres: running (pid {pg.proc.pid()}) on 127.0.0.1:{pg.bound_port()}, "
                f"data in {pg.data_dir}, healthy={pg.healthy()}"
            )
        else:
            lines.append("postgres: stopped")
        a = self.airflow
        if a.running():
            lines.append(f"airflow: running (pid {a.proc.pid()}), UI {a.url}, healthy={a.healthy(attempts=5)}")
            lines.append(f"         login: {ADMIN_USER} / {a.password()}  (password kept in {a.password_file})")
        else:
            lines.append("airflow: stopped")
        return "\n".join(lines)
