"""The health check of every registered app and slot (the baton_health DAG, every minute).

Per slot: gather what it reported (status topic), what it should be doing (control topic), how far it
may read (commit marker + fence: follower.compute_cap), the input's end and the checkpoint's size on
disk; judge with baton.health; act on a DEAD slot through the crash-loop guard (restart with backoff,
or mark it FAILED with the reason). The findings are logged as one table and returned (XCom); a FAILED
slot's reason is in the control record, where the UI and the next run see it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from airflow.sdk import BaseOperator

from baton.alerts import Alert, alerts_of, due
from baton.apps import AppDefinition, load_registry, version_path
from baton.caps import compute_cap
from baton.control_plane import SlotMoved
from baton.handoff import HandoffError, fail_over, other, stale_fence, without_fence
from baton.health import (
    Finding,
    HealthPolicy,
    RestartAction,
    Severity,
    SlotHealth,
    Verdict,
    assess,
    decide_restart,
    failover_finding,
    lease_finding,
    prune_restarts,
    restarting_in_place,
    summarize,
)
from baton.launcher import Relaunch
from baton.records import ControlRecord, Slot, SlotState
from baton_airflow.alerts import SENT_VARIABLE, configured_notifiers, send
from baton_airflow.hooks.control import BatonControlHook
from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.hooks.slot_state import BatonSlotStateHook
from baton_airflow.hooks.spark import BatonSparkHook

FAILED_PREFIX = "FAILED: "  # an action marking a slot FAILED (an alert)
LAG_VARIABLE = "baton_health_lag"  # (ts_ms, lag) samples per slot between runs: lag growth, input waiting


def alive(health: SlotHealth | None) -> bool:
    """The check found the slot running its query: healthy, or degraded (over a budget, behind)."""
    return health is not None and health.verdict in (Verdict.HEALTHY, Verdict.DEGRADED)


def came_up(health: SlotHealth) -> bool:
    """A (re)started slot is up: alive, its last status RUNNING (or RESTORING with no input waiting:
    idle since its start). Degraded counts: a restarted standby over its batch budget on a busy host
    must still be desired RUNNING again, since only such a standby may take over by itself
    (baton.leases.decide_takeover)."""
    return alive(health) and health.last is not None and health.last.state in (SlotState.RUNNING, SlotState.RESTORING)


class HealthCheckOperator(BaseOperator):
    def __init__(
        self,
        *,
        kafka_conn_id: str = BatonKafkaHook.default_conn_name,
        spark_conn_id: str = BatonSparkHook.default_conn_name,
        act: bool = True,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.kafka_conn_id, self.spark_conn_id, self.act = kafka_conn_id, spark_conn_id, act
        self.clock = time.time  # injected in unit tests

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk import Variable

        control = BatonControlHook(self.kafka_conn_id, writer=f"baton_health:{context['run_id']}")
        spark = BatonSparkHook(conn_id=self.spark_conn_id)
        lag_samples: dict[str, list[list[int]]] = json.loads(Variable.get(LAG_VARIABLE, default="{}"))
        healths, actions, failed = [], [], {}
        for app in load_registry().values():
            record = control.plane().current(app.name)
            if record is None:
                continue  # never started: nothing is desired of it
            if self.act and (lifted := self.lift_stale_fence(record, control.plane())):
                record, message = lifted
                actions.append(f"{app.name}: {message}")
            assessed = self.assess_app(app, record, control, spark, lag_samples)
            by_slot = dict(assessed)
            for slot, health in assessed:
                healths.append(health)
                if not self.act:
                    continue
                if (
                    health.verdict is Verdict.DEAD
                    and slot is record.active
                    and self.can_fail_over(record, other(slot), by_slot.get(other(slot)))
                ):
                    done = self.fail_over(app, slot, record, control, spark, health.reason)
                    actions.append(f"{app.name}/{slot.value}: {done}")
                action = self.act_on(app, slot, health, record, control, spark)
                if action:
                    actions.append(f"{app.name}/{slot.value}: {action}")
                if action.startswith(FAILED_PREFIX):
                    failed[f"{app.name}/{slot.value}"] = action.removeprefix(FAILED_PREFIX)
        Variable.set(LAG_VARIABLE, json.dumps(lag_samples))
        self.log.info("%s", summarize(healths))
        for a in actions:
            self.log.warning("action: %s", a)
        self.alert(alerts_of(healths, failed), context)
        return {
            "slots": {
                f"{h.app}/{h.slot.value}": {
                    "verdict": h.verdict.value,
                    "reason": h.reason,
                    "findings": [f"{f.rule}: {f.message}" for f in h.findings],
                }
                for h in healths
            },
            "actions": actions,
        }

    def alert(self, alerts: list[Alert], context: Any) -> None:
        """Send what is due (baton.alerts) to the deployment's notifiers (baton_airflow.alerts), after the
        actions: a misconfigured notifier fails this run with the reason, but never stops a restart."""
        from airflow.sdk import Variable

        factories = configured_notifiers()
        if not factories:
            return  # none configured: the findings are in the log table, XCom and the Baton page
        sent = json.loads(Variable.get(SENT_VARIABLE, default="{}"))
        now_ms = int(self.clock() * 1000)
        send_now, holding = due(alerts, sent, now_ms)
        delivered = {a.key for a in send(send_now, dict(context), factories)}
        # An alert a notifier failed to take is due again at the next run.
        Variable.set(
            SENT_VARIABLE,
            json.dumps({k: t for k, t in holding.items() if k in delivered or k not in {a.key for a in send_now}}),
        )
        for a in send_now:
            self.log.warning("alert%s: %s", "" if a.key in delivered else " (not sent, tried again next run)", a.text())

    def lift_stale_fence(self, record: ControlRecord, plane) -> tuple[ControlRecord, str] | None:
        """A fence past its expiry was left by a handoff whose run died: lift it, or the active's
        output stays held at F for good (baton.handoff.stale_fence says why that is safe)."""
        if record.fence is None or not stale_fence(record, int(self.clock() * 1000)):
            return None
        try:
            lifted = plane.update(record.app, without_fence(record.epoch))
        except HandoffError:  # a cutover moved the epoch meanwhile: the fence is gone with it
            return None
        return lifted, (
            f"lifted the fence {dict(record.fence)} its handoff left (expired; the run that set it "
            f"did not finish); {lifted.active.value} emits on at epoch {lifted.epoch}"
        )

    def assess_app(
        self,
        app: AppDefinition,
        record: ControlRecord,
        control: BatonControlHook,
        spark: BatonSparkHook,
        lag_samples: dict,
    ) -> list[tuple[Slot, SlotHealth]]:
        now_ms = int(self.clock() * 1000)
        policy = HealthPolicy.from_app(app)
        statuses = control.status(app.name)
        marker = control.last_commit(app)
        end = control.input_end(app)
        leases = control.leases(app.name)
        state = BatonSlotStateHook.of(spark)
        out = []
        for slot in Slot:
            spec = record.slots.get(slot)
            key = f"{app.name}/{slot.value}"
            history = [s for s in statuses if s.slot is slot][-200:]
            samples = [tuple(s) for s in lag_samples.get(key, []) if s[0] > now_ms - policy.lag_window_s * 1000]
            health = assess(
                app,
                slot,
                spec,
                history,
                end,
                state.disk_bytes(app.name, slot),
                now_ms,
                policy,
                cap=compute_cap(record, slot, marker, app.input.partitions),
                started_ms=spec.started_ms if spec and spec.started_ms else None,
                lag_history=samples,
            )
            health = self.with_newer_launch(app, slot, spec, health, spark, now_ms, policy)
            health = self.with_process_check(app, slot, spec, health, spark)
            relaunch = self.relaunch_of(app, slot, spec, spark)
            relaunched_ms = int(relaunch.at * 1000) if relaunch is not None else 0
            health = self.with_lease_check(spec, health, leases.get(slot), now_ms, policy, relaunched_ms)
            if relaunch is not None:
                health = restarting_in_place(health, relaunch.state, relaunched_ms, relaunch.code, now_ms, policy)
            if (took_over := failover_finding(record, slot, now_ms)) is not None:
                health = dataclasses.replace(health, findings=[*health.findings, took_over])
            if health.lag is not None:
                samples.append((health.ts_ms, health.lag))
            lag_samples[key] = [list(s) for s in samples]
            out.append((slot, health))
        return out

    @staticmethod
    def with_newer_launch(
        app: AppDefinition,
        slot: Slot,
        spec,
        health: SlotHealth,
        spark: BatonSparkHook,
        now_ms: int,
        policy: HealthPolicy,
    ) -> SlotHealth:
        """A STOPPED or FAILED record published before the slot's running launch began is the previous
        launch's last word, not this one's: a restart stops the old launch after its spec's start time
        and promotes the staged one right after (baton.launcher: launched_at is the promotion's time,
        on the launcher's host, where the slot runs). Until the new launch reports, it is starting."""
        last = health.last
        if (
            spec is None
            or health.verdict is not Verdict.DEAD
            or last is None
            or last.state not in (SlotState.STOPPED, SlotState.FAILED)
        ):
            return health
        launch = spark.launcher().read_record(app.name, slot)
        if launch is None or launch.launched_at * 1000 <= last.ts_ms or spark.find(app.name, slot) is None:
            return health
        return starting_since(health, int(launch.launched_at * 1000), now_ms, policy)

    @staticmethod
    def with_process_check(
        app: AppDefinition, slot: Slot, spec, health: SlotHealth, spark: BatonSparkHook
    ) -> SlotHealth:
        """A slot that should run but whose recorded launch has ended is dead now, whatever its last
        status record says (a kill -9 leaves no record): no need to wait for the silence rule."""
        if (
            spec is None
            or spec.desired not in (SlotState.STARTING, SlotState.RUNNING)
            or health.verdict is Verdict.DEAD
        ):
            return health
        launcher = spark.launcher()
        launch = launcher.read_record(app.name, slot)
        if launch is None or spark.find(app.name, slot) is not None:
            return health
        ended = launcher.exit_info(launch)
        code = ended.code if ended is not None else "unknown"
        gone = Finding(
            "process",
            Severity.CRITICAL,
            f"driver of launch {launch.launch_id[:8]} (pid {launch.pid}) has exited (code {code})",
        )
        return dataclasses.replace(health, verdict=Verdict.DEAD, findings=[gone, *health.findings])

    @staticmethod
    def relaunch_of(app: AppDefinition, slot: Slot, spec, spark: BatonSparkHook) -> Relaunch | None:
        """What the wrapper of the slot's live launch is doing about a driver that died, if anything
        (baton.driver_wrapper): a launch restarting in place is this DAG's to leave alone."""
        if spec is None or spec.desired not in (SlotState.STARTING, SlotState.RUNNING):
            return None
        launch = spark.find(app.name, slot)
        if launch is None:
            return None
        relaunch = spark.launcher().relaunch(launch)
        return relaunch if relaunch is not None and relaunch.state != "gave_up" else None

    @staticmethod
    def with_lease_check(
        spec, health: SlotHealth, lease, now_ms: int, policy: HealthPolicy, relaunched_ms: int = 0
    ) -> SlotHealth:
        """A slot whose lease expired is dead now (baton.health.lease_finding), whatever else it reports."""
        expired = lease_finding(spec, lease, now_ms, policy, relaunched_ms)
        if expired is None or health.verdict is Verdict.DEAD:
            return health
        return dataclasses.replace(health, verdict=Verdict.DEAD, findings=[expired, *health.findings])

    @staticmethod
    def last_error(
        app: AppDefinition, slot: Slot, spec, health: SlotHealth, control: BatonControlHook, spark: BatonSparkHook
    ) -> str:
        """Why the slot's last launch died, for the FAILED reason. The status was read before the
        process check, so a driver that published its error and exited in between is read again;
        one that died without a word (kill -9, a JVM crash) is described by its exit code and log."""
        if health.last is not None and health.last.error:
            return health.last.error
        since = (spec.started_ms or 0) if spec is not None else 0
        for rec in reversed(control.status(app.name, slot)):
            if rec.error and rec.ts_ms >= since:
                return rec.error
        launcher = spark.launcher()
        launch = launcher.read_record(app.name, slot)
        if launch is None:
            return ""
        ended = launcher.exit_info(launch)
        lines = [
            ln
            for ln in BatonSlotStateHook.log_tail(launch.log_path, 40).splitlines()
            if ln.strip() and not ln.startswith("[baton]")
        ]
        code = ended.code if ended is not None else "unknown"
        return (
            f"driver exited with code {code}"
            + (f": {lines[-1].strip()}" if lines else "")
            + f" (log {launch.log_path})"
        )

    @staticmethod
    def can_fail_over(record: ControlRecord, standby: Slot, health: SlotHealth | None) -> bool:
        """The standby can take over: desired RUNNING and alive (healthy or degraded, not starting)."""
        spec = record.slots.get(standby)
        return spec is not None and spec.desired is SlotState.RUNNING and alive(health)

    def fail_over(
        self,
        app: AppDefinition,
        dead: Slot,
        record: ControlRecord,
        control: BatonControlHook,
        spark: BatonSparkHook,
        health_reason: str = "",
    ) -> str:
        """The active is dead: hand over to the standby at what the dead one emitted (baton.handoff);
        the dead slot is then restarted as the standby by the usual rule."""
        spark.stop(app.name, dead, grace_s=10)  # whatever is left of it; Kafka fences a late write anyway
        marker = control.last_commit(app)
        standby = other(dead)
        try:
            ok, message = fail_over(
                control.plane(),
                app.name,
                app.input.partitions,
                dead,
                record.epoch,
                dict(marker.emitted) if marker is not None else {},
                control.status(app.name, standby, last_n=500),
                reason=f"found dead by baton_health: {health_reason}",
            )
        except HandoffError as exc:  # the standby took over by itself meanwhile (its lease watch): done
            return f"no failover by baton_health: {exc}"
        return message if ok else f"{message}; restarting {dead.value} instead"

    def act_on(
        self,
        app: AppDefinition,
        slot: Slot,
        health: SlotHealth,
        record: ControlRecord,
        control: BatonControlHook,
        spark: BatonSparkHook,
    ) -> str:
        spec = record.slots.get(slot)
        if spec is None or spec.desired not in (SlotState.STARTING, SlotState.RUNNING):
            return ""
        try:
            return self.repair(app, slot, spec, health, control, spark)
        except SlotMoved as exc:
            # A step of another run (an upgrade's abort putting the standby back, a lifecycle start)
            # moved the slot after this check read the record: the slot is that step's to finish.
            # Seen in the e2e test: a restart from the record read before an abort's put-back stopped the
            # put-back's launch and started the refused version again.
            return f"left alone: {exc}"

    def repair(
        self, app: AppDefinition, slot: Slot, spec, health: SlotHealth, control: BatonControlHook, spark: BatonSparkHook
    ) -> str:
        """act_on's moves, each only if the slot's spec is still `spec` (SlotMoved otherwise)."""
        plane = control.plane()
        if spec.desired is SlotState.STARTING and came_up(health):
            plane.move_slot(app.name, slot, SlotState.RUNNING, reason="", if_unchanged=spec)
            return "running again"
        if health.verdict is not Verdict.DEAD:
            return ""
        policy = HealthPolicy.from_app(app)
        now_ms = int(self.clock() * 1000)
        decision = decide_restart(
            spec.restarts, now_ms, policy, self.last_error(app, slot, spec, health, control, spark)
        )
        if decision.action is RestartAction.WAIT:
            return f"dead ({health.reason}); {decision.reason}"
        if decision.action is RestartAction.GIVE_UP:
            # Intent first: the harness stops on FAILED by itself if it is somehow still alive.
            plane.move_slot(app.name, slot, SlotState.FAILED, reason=decision.reason, if_unchanged=spec)
            spark.stop(app.name, slot, grace_s=30)
            return f"{FAILED_PREFIX}{decision.reason}"
        restarts = tuple(prune_restarts(spec.restarts, now_ms, policy)) + (now_ms,)
        plane.move_slot(
            app.name,
            slot,
            SlotState.STARTING,
            reason=f"restarted: {health.reason}",
            restarts=restarts,
            started_ms=now_ms,
            if_unchanged=spec,
        )
        spark.stop(app.name, slot, grace_s=10)  # whatever is left of the dead launch (a hung driver)
        # The version the slot runs (a rolling upgrade may have moved it off the registry's).
        proc = spark.ensure_started(
            str(version_path(app.name, spec.version)), slot, control.bootstrap, generation=spec.generation
        )
        return f"restarted (pid {proc.pid}; {decision.reason}): {health.reason}"


def starting_since(health: SlotHealth, launched_ms: int, now_ms: int, policy: HealthPolicy) -> SlotHealth:
    """The verdict of a slot whose running launch began at launched_ms and has not reported yet."""
    since = now_ms - launched_ms
    if since > policy.start_grace_s * 1000:
        return dataclasses.replace(
            health,
            verdict=Verdict.DEAD,
            findings=[
                Finding(
                    "liveness",
                    Severity.CRITICAL,
                    f"no status record {since / 1000:.0f} s after its launch (grace {policy.start_grace_s:g} s)",
                )
            ],
        )
    last = f" (the last record, {health.last.state.value}, is the previous launch's)" if health.last else ""
    return dataclasses.replace(
        health,
        verdict=Verdict.STARTING,
        findings=[Finding("starting", Severity.INFO, f"launched {since / 1000:.1f} s ago, no status yet{last}")],
    )
