"""Launching and tracking Spark apps for the control plane: a thin Airflow face on baton.launcher.

Master precedence (one, stated): hook argument > Airflow Connection `baton_spark` (extra
{"master": "..."} if given, else host/port -> spark://host:port) > BATON_SPARK_MASTER environment
> default local[2]. The connection's extra may also carry {"conf": {"spark.x": "..."}}: defaults
for every launch, under the call's own conf. The state directory (identity records, logs,
checkpoints) is the hook argument, else baton.settings (BATON_HOME).

The slot outlives the task that starts it; a retried task reattaches to the running launch
(baton.launcher.Launcher.ensure_started). To stop a slot, write its control-topic stop request
first, then call `stop`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from baton.kafka.client_config import registered_file
from baton.launcher import ExitInfo, Launcher, LaunchSpec, SlotProcess, StopResult, backend_of
from baton.records import Slot
from baton.settings import Settings
from baton_airflow.hooks.kafka import security_dir
from baton_airflow.provider_info import SPARK_CONN_TYPE, ui_field_behaviour


class BatonSparkHook(BaseHook):
    conn_name_attr = "spark_conn_id"
    default_conn_name = "baton_spark"
    conn_type = SPARK_CONN_TYPE
    hook_name = "Baton Spark"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form (Airflow < 3.2; later ones read provider_info's declaration)."""
        return ui_field_behaviour(SPARK_CONN_TYPE)

    def __init__(self, master: str | None = None, conn_id: str = default_conn_name, state_dir: Path | None = None):
        super().__init__()
        self.spark_conn_id = conn_id
        self._master_arg = master
        self._state_dir_arg = Path(state_dir) if state_dir is not None else None

    def _connection_settings(self) -> tuple[str | None, dict[str, str]]:
        """(master, default conf) from the Airflow Connection; (None, {}) if it is not defined."""
        try:
            conn = self.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            return None, {}
        extra = conn.extra_dejson or {}
        conf = extra.get("conf") or {}
        if not isinstance(conf, dict):
            raise ValueError(
                f"connection {self.spark_conn_id}: extra field 'conf' must be an object of "
                f"Spark settings, got {type(conf).__name__}"
            )
        master = extra.get("master")
        if not master and conn.host:
            host = conn.host if "://" in conn.host else f"spark://{conn.host}"
            master = f"{host}:{conn.port}" if conn.port else host
        if master:
            try:
                backend_of(master)
            except ValueError as exc:
                raise ValueError(f"connection {self.spark_conn_id}: {exc}") from None
        return master, {str(k): str(v) for k, v in conf.items()}

    def settings(self) -> tuple[str, dict[str, str]]:
        """(master, default Spark conf), resolved by the precedence above."""
        conn_master, conn_conf = self._connection_settings()
        return self._master_arg or conn_master or Settings.load().spark_master, conn_conf

    @property
    def master(self) -> str:
        return self.settings()[0]

    @property
    def state_dir(self) -> Path:
        return self._state_dir_arg or Settings.load().state_dir

    def launcher(self) -> Launcher:
        return Launcher(self.state_dir)

    def spec(
        self,
        app: str,
        slot: Slot | str,
        bootstrap: str,
        generation: int = 0,
        conf: Mapping[str, str] | None = None,
        starting_offsets: str = "earliest",
    ) -> LaunchSpec:
        master, conn_conf = self.settings()
        # The cluster's security settings, when a Kafka connection registered them here (BatonKafkaHook):
        # the slot gets the path of their private file in its environment, never the settings themselves.
        security = registered_file(bootstrap, security_dir())
        return LaunchSpec(
            app=app,
            slot=Slot(slot),
            generation=generation,
            bootstrap=bootstrap,
            state_dir=self.state_dir,
            master=master,
            conf={**conn_conf, **(conf or {})},
            starting_offsets=starting_offsets,
            client_config_file=str(security) if security else "",
        )

    def ensure_started(
        self,
        app: str,
        slot: Slot | str,
        bootstrap: str,
        generation: int = 0,
        conf: Mapping[str, str] | None = None,
        starting_offsets: str = "earliest",
    ) -> SlotProcess:
        """Start the slot or reattach to its running launch; returns its recorded identity."""
        rec = self.launcher().ensure_started(self.spec(app, slot, bootstrap, generation, conf, starting_offsets))
        self.log.info(
            "slot %s/%s: pid %s on %s (launch %s, log %s)",
            rec.app,
            rec.slot.value,
            rec.pid,
            rec.master,
            rec.launch_id,
            rec.log_path,
        )
        return rec

    def stage(
        self,
        app: str,
        slot: Slot | str,
        bootstrap: str,
        generation: int = 0,
        conf: Mapping[str, str] | None = None,
        starting_offsets: str = "earliest",
    ) -> SlotProcess | None:
        """Start the slot's next launch beside its running one, held until a later ensure_started of the
        same launch promotes it (baton.launcher.stage); None when the slot runs nothing."""
        rec = self.launcher().stage(self.spec(app, slot, bootstrap, generation, conf, starting_offsets))
        if rec is not None:
            self.log.info(
                "slot %s/%s: next launch staged, pid %s (launch %s): it starts up beside the running one",
                rec.app,
                rec.slot.value,
                rec.pid,
                rec.launch_id,
            )
        return rec

    def discard_staged(self, app: str, slot: Slot | str) -> bool:
        return self.launcher().discard_staged(app, slot)

    def find(self, app: str, slot: Slot | str) -> SlotProcess | None:
        return self.launcher().find(app, slot)

    def stop(
        self, app: str, slot: Slot | str, grace_s: float = 60.0, self_stop_s: float = 0.0, keep_staged: bool = False
    ) -> StopResult:
        """Stop the slot: wait self_stop_s for it to end by itself (write the control-topic stop
        request first), then SIGTERM, then SIGKILL after grace_s; a staged next launch goes too unless
        keep_staged."""
        return self.launcher().stop(app, slot, grace_s, self_stop_s, keep_staged=keep_staged)

    def wait_gone(self, app: str, slot: Slot | str, timeout_s: float) -> ExitInfo | None:
        return self.launcher().wait_gone(app, slot, timeout_s)

    @staticmethod
    def describe(rec: SlotProcess) -> dict[str, Any]:
        """A JSON-able summary for XCom."""
        return {
            "app": rec.app,
            "slot": rec.slot.value,
            "pid": rec.pid,
            "host": rec.host,
            "master": rec.master,
            "generation": rec.generation,
            "version": rec.version,
            "launch_id": rec.launch_id,
            "log": rec.log_path,
        }
