"""The app registry: one YAML file per app under include/apps/, validated on load.

A bad definition is an AppDefinitionError naming the file, the field and the problem; nothing
that loads a registry with a bad file starts anything.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from baton.health_policy import HealthPolicy
from baton.kafka.admin import TopicSpec
from baton.settings import default_apps_dir

APPS_DIR = default_apps_dir()
VERSIONS = "versions"  # include/apps/versions/<name>/<version>.yaml: an app's other versions
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class AppDefinitionError(ValueError):
    def __init__(self, path: Path | str, field_name: str, problem: str):
        super().__init__(f"{path}: field '{field_name}': {problem}")
        self.path, self.field, self.problem = str(path), field_name, problem


@dataclass(frozen=True)
class TopicRef:
    topic: str
    partitions: int


@dataclass(frozen=True)
class StateTtl:
    """`state.ttl`: a key not seen for `idle_ms` of event time leaves the state; its next event starts
    afresh (spark_apps.runtime.state.idle_counts). Event time, never processing time: every slot, every
    reprocess and every restart then count the same events, whenever each drops the key's state."""

    idle_ms: int
    # How far an event may arrive behind the newest event time and still be counted (the watermark's
    # delay): a key's state is dropped once the watermark passes its last event + idle.
    disorder_ms: int = 10_000
    on: str = "event_time"
    evicted: str = "nothing"  # what downstream sees when a key's life ends (nothing: the last count stays)


DURATION_RE = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
DURATION_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: Any, path: Path, name: str) -> int:
    """ "500ms", "60s", "5m", "2h", "7d" -> milliseconds (> 0)."""
    m = DURATION_RE.match(value) if isinstance(value, str) else None
    if m is None or int(m.group(1)) <= 0:
        raise AppDefinitionError(path, name, f"must be a positive duration such as 60s, 5m, 2h or 7d, got {value!r}")
    return int(m.group(1)) * DURATION_UNIT_MS[m.group(2)]


def _ttl(raw: Any, path: Path) -> StateTtl | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise AppDefinitionError(
            path, "state.ttl", f"must be a mapping such as {{idle: 7d, on: event_time}}, got {raw!r}"
        )
    # YAML 1.1 reads a bare `on` key as the boolean true.
    raw = {("on" if k is True else k): v for k, v in raw.items()}
    unknown = sorted(str(k) for k in set(raw) - {"idle", "disorder", "on", "evicted"})
    if unknown:
        raise AppDefinitionError(
            path, f"state.ttl.{unknown[0]}", "is not a known field (known: disorder, evicted, idle, on)"
        )
    if "idle" not in raw:
        raise AppDefinitionError(path, "state.ttl.idle", "is required (how long a key may go unseen, e.g. 7d)")
    on = raw.get("on", "event_time")
    if on != "event_time":
        raise AppDefinitionError(
            path,
            "state.ttl.on",
            f"must be event_time, got {on!r}: a processing-time TTL drops a key "
            "at a different input position on each slot, so their states and digests would differ",
        )
    evicted = raw.get("evicted", "nothing")
    if evicted != "nothing":
        raise AppDefinitionError(
            path,
            "state.ttl.evicted",
            f"must be nothing, got {evicted!r} (a tombstone on eviction is "
            "not supported: slots drop a key's state at different input positions)",
        )
    return StateTtl(
        idle_ms=parse_duration_ms(raw["idle"], path, "state.ttl.idle"),
        disorder_ms=parse_duration_ms(raw.get("disorder", "10s"), path, "state.ttl.disorder"),
    )


@dataclass(frozen=True)
class StateSettings:
    # Rows and bytes the app's state may hold before the health DAG flags it (seed: RocksDB budgets).
    max_rows: int = 5_000_000
    max_bytes: int = 2 * 1024**3
    # Minimum batches Spark keeps.
    min_batches_to_retain: int = 20
    # The state store's snapshot cadence (RocksDB with changelog checkpointing): a snapshot every
    # this many batches, uploaded by a maintenance task every this many seconds; a restart loads the
    # last uploaded snapshot and replays the batches after it. Restart speed against steady CPU:
    # measured at 20,085 events/s, 5 batches and 10 s (these defaults) cost the active slot ~0.05
    # cores more than Spark's 10 batches and 60 s, and its restart after 30 s of that load took
    # 10.7 s instead of 16.3 s to a first batch (1M keys; bench/restart.py), because with Spark's
    # defaults no snapshot had been uploaded yet and every changelog was replayed.
    snapshot_every_batches: int = 5
    snapshot_upload_interval_s: int = 10
    # State partitions (Spark's shuffle partitions) of a new checkpoint; one running already keeps the
    # number it started with (Spark restores it from the checkpoint). Each is a task, a RocksDB store
    # and its files in every batch: on a slot of two cores at the seed's rate one partition cost the
    # active and its standby ~10 % less CPU than four, at the same batch time (bench/HISTORY.md).
    # Raise it for a slot with more cores or a state too large for one task to restore quickly.
    partitions: int = 1
    # Whether the state store counts its rows (the status's state_rows, the health DAG's max_rows, the
    # row count a restarted slot's restore check compares). RocksDB counts by looking every written key
    # up before writing it: at the seed's rate that lookup cost the active and its standby ~14 % of their
    # CPU (0.66-0.67 against 0.77-0.78 cores; bench/HISTORY.md). Without the count a slot reports
    # no state rows (max_bytes still applies) and a stop digests its state for the restore check.
    count_rows: bool = True
    # Keys whose rows of the last committed batch the state store also keeps in the slot's heap, per state
    # partition, so a batch's lookups of keys it has seen do not call into RocksDB (jvm/src/baton/state:
    # Baton's store, RocksDB's with that cache; ~200 bytes of heap a key). At the seed's rate it cut the
    # active's and its standby's task CPU a batch by ~23 % and both slots' CPU by ~7 % (bench/HISTORY.md).
    # 0: off.
    cache_keys: int = 250_000
    ttl: StateTtl | None = None


@dataclass(frozen=True)
class AppDefinition:
    name: str
    module: str
    version: str
    input: TopicRef
    output: TopicRef
    trigger_ms: int = 1000
    max_records_per_trigger: int = 500_000
    batch_ms_budget: int = 2000
    max_lag_records: int = 200_000
    # How often a hot standby's source may move up to what the active emitted (follow mode): a standby
    # running fewer, larger batches costs less of the machine the active runs on. A fence or a role
    # change reaches it at once. 0: after every batch of the active.
    standby_pace_ms: int = 2000
    # Added to a slot's nice value while it is the standby (spark_apps.runtime.coordination.priority): the active's
    # batches get the CPU first on a busy host, the standby catches up with what is left. 0: equal.
    standby_nice: int = 10
    # What a slot does when its checkpoint's positions are not in the input any more (a topic recreated,
    # a broker reset, retention): "fail" stops it with the reason (the way out: a reprocess into a new
    # generation); "earliest" resumes at the earliest available offsets, keeping the state and skipping
    # what was lost (spark_apps.runtime.source.input_check).
    on_data_loss: str = "fail"
    # Liveness (baton.leases): every running slot renews a lease this often; the standby takes over once
    # the active's has not been renewed for lease_ttl_ms (the same host: at once when its process is gone).
    lease_interval_ms: int = 1000
    lease_ttl_ms: int = 4000
    # Keep a spare driver per slot with Spark up (baton.driver_wrapper): a dead driver's restart skips the
    # interpreter, JVM and Spark session start (about 10 s of 20 at the seed's rate), for ~0.5 GB per slot.
    spare_driver: bool = True
    state: StateSettings = field(default_factory=StateSettings)
    # Overrides of baton.health_policy.HealthPolicy for this app (e.g. max_restarts, restart_window_s).
    health: dict[str, float] = field(default_factory=dict)
    path: str = ""

    @property
    def dead_letter_topic(self) -> str:
        return f"baton.{self.name}.deadletter"

    @property
    def commits_topic(self) -> str:
        return f"baton.{self.name}.commits"

    def topics(self) -> list[TopicSpec]:
        """Every topic this app needs, with its partition count."""
        return [
            TopicSpec(self.input.topic, self.input.partitions),
            TopicSpec(self.output.topic, self.output.partitions),
            TopicSpec(self.dead_letter_topic, 1),
            TopicSpec(self.commits_topic, 1),
        ]


def _get(
    d: dict[str, Any], key: str, typ: type | tuple[type, ...], path: Path, prefix: str = "", default: Any = ...
) -> Any:
    name = f"{prefix}{key}"
    if key not in d:
        if default is ...:
            raise AppDefinitionError(path, name, "is required")
        return default
    value = d[key]
    if isinstance(value, bool) and typ is int or not isinstance(value, typ):
        want = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise AppDefinitionError(path, name, f"must be {want}, got {type(value).__name__} {value!r}")
    return value


def _positive(value: int, path: Path, name: str) -> int:
    if value <= 0:
        raise AppDefinitionError(path, name, f"must be > 0, got {value}")
    return value


def _not_negative(value: int, path: Path, name: str) -> int:
    if value < 0:
        raise AppDefinitionError(path, name, f"must be >= 0, got {value}")
    return value


def _state(raw: dict[str, Any], path: Path) -> StateSettings:
    """The `state:` section: every field a positive int but `ttl` (_ttl), `count_rows` (a boolean) and
    `cache_keys` (0 or more), no unknown ones."""
    known = [f.name for f in fields(StateSettings)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise AppDefinitionError(path, f"state.{unknown[0]}", f"is not a known field (known: {', '.join(known)})")
    count_rows = _get(raw, "count_rows", bool, path, "state.", StateSettings.count_rows)
    if "max_rows" in raw and not count_rows:
        raise AppDefinitionError(
            path,
            "state.max_rows",
            "needs state.count_rows: a state store that keeps no row "
            "count has no rows to budget (state.max_bytes budgets its size)",
        )
    cache_keys = _not_negative(
        _get(raw, "cache_keys", int, path, "state.", StateSettings.cache_keys), path, "state.cache_keys"
    )
    return StateSettings(
        ttl=_ttl(raw.get("ttl"), path),
        count_rows=count_rows,
        cache_keys=cache_keys,
        **{
            name: _positive(_get(raw, name, int, path, "state.", getattr(StateSettings, name)), path, f"state.{name}")
            for name in known
            if name not in ("ttl", "count_rows", "cache_keys")
        },
    )


def _topic(d: dict[str, Any], key: str, path: Path) -> TopicRef:
    section = _get(d, key, dict, path)
    topic = _get(section, "topic", str, path, f"{key}.")
    if not TOPIC_RE.match(topic):
        raise AppDefinitionError(path, f"{key}.topic", f"{topic!r} is not a valid Kafka topic name")
    partitions = _positive(_get(section, "partitions", int, path, f"{key}."), path, f"{key}.partitions")
    return TopicRef(topic, partitions)


KNOWN_FIELDS = {
    "name",
    "module",
    "version",
    "input",
    "output",
    "trigger_ms",
    "max_records_per_trigger",
    "batch_ms_budget",
    "max_lag_records",
    "standby_pace_ms",
    "standby_nice",
    "on_data_loss",
    "lease_interval_ms",
    "lease_ttl_ms",
    "spare_driver",
    "state",
    "health",
}
ON_DATA_LOSS = ("fail", "earliest")


def _on_data_loss(data: dict[str, Any], path: Path) -> str:
    value = _get(data, "on_data_loss", str, path, default="fail")
    if value not in ON_DATA_LOSS:
        raise AppDefinitionError(path, "on_data_loss", f"must be one of {', '.join(ON_DATA_LOSS)}, got {value!r}")
    return value


def _standby_nice(data: dict[str, Any], path: Path) -> int:
    value = _get(data, "standby_nice", int, path, default=10)
    if not 0 <= value <= 19:
        raise AppDefinitionError(path, "standby_nice", f"must be a nice increment from 0 to 19, got {value}")
    return value


def _health(data: dict[str, Any], path: Path) -> dict[str, float]:
    """The `health` section: HealthPolicy overrides, checked by building the policy once."""
    section = _get(data, "health", dict, path, default={})
    known = {f.name for f in fields(HealthPolicy)}
    for key, value in section.items():
        if key not in known:
            raise AppDefinitionError(
                path, f"health.{key}", f"is not a known setting (known: {', '.join(sorted(known))})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AppDefinitionError(path, f"health.{key}", f"must be a number, got {type(value).__name__} {value!r}")
    try:
        HealthPolicy(**section)
    except ValueError as exc:
        raise AppDefinitionError(path, "health", str(exc)) from None
    return dict(section)


def parse_definition(data: Any, path: Path) -> AppDefinition:
    if not isinstance(data, dict):
        raise AppDefinitionError(path, "(top level)", "must be a mapping")
    unknown = sorted(set(data) - KNOWN_FIELDS)
    if unknown:
        raise AppDefinitionError(path, unknown[0], f"is not a known field (known: {', '.join(sorted(KNOWN_FIELDS))})")
    name = _get(data, "name", str, path)
    if not NAME_RE.match(name):
        raise AppDefinitionError(path, "name", f"{name!r} must match {NAME_RE.pattern}")
    module = _get(data, "module", str, path)
    if not re.match(r"^[A-Za-z_][\w.]*$", module):
        raise AppDefinitionError(path, "module", f"{module!r} is not a Python module path")
    state = _state(_get(data, "state", dict, path, default={}), path)
    app = AppDefinition(
        name=name,
        module=module,
        version=str(_get(data, "version", (str, int), path)),
        input=_topic(data, "input", path),
        output=_topic(data, "output", path),
        trigger_ms=_positive(_get(data, "trigger_ms", int, path, default=1000), path, "trigger_ms"),
        max_records_per_trigger=_positive(
            _get(data, "max_records_per_trigger", int, path, default=500_000), path, "max_records_per_trigger"
        ),
        batch_ms_budget=_positive(_get(data, "batch_ms_budget", int, path, default=2000), path, "batch_ms_budget"),
        max_lag_records=_positive(_get(data, "max_lag_records", int, path, default=200_000), path, "max_lag_records"),
        standby_pace_ms=_not_negative(_get(data, "standby_pace_ms", int, path, default=2000), path, "standby_pace_ms"),
        standby_nice=_standby_nice(data, path),
        on_data_loss=_on_data_loss(data, path),
        lease_interval_ms=_positive(
            _get(data, "lease_interval_ms", int, path, default=1000), path, "lease_interval_ms"
        ),
        lease_ttl_ms=_positive(_get(data, "lease_ttl_ms", int, path, default=4000), path, "lease_ttl_ms"),
        spare_driver=_get(data, "spare_driver", bool, path, default=True),
        state=state,
        health=_health(data, path),
        path=str(path),
    )
    if app.lease_ttl_ms < 3 * app.lease_interval_ms:
        # The standby judges expiry by its own renewals since the active's last: fewer than three
        # intervals and one late renewal (a busy host) would read as a death.
        raise AppDefinitionError(
            path,
            "lease_ttl_ms",
            f"must be at least 3 x lease_interval_ms ({3 * app.lease_interval_ms}), got {app.lease_ttl_ms}",
        )
    if app.input.topic == app.output.topic:
        raise AppDefinitionError(path, "output.topic", "must differ from input.topic")
    return app


def load_definition(path: Path) -> AppDefinition:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise AppDefinitionError(path, "(file)", f"is not valid YAML: {exc}") from None
    app = parse_definition(data, path)
    if path.parent.name == app.name and path.parent.parent.name == VERSIONS:  # versions/<name>/<version>.yaml
        if app.version != path.stem:
            raise AppDefinitionError(path, "version", f"{app.version!r} must match the file name {path.stem!r}")
    elif app.name != path.stem:
        raise AppDefinitionError(path, "name", f"{app.name!r} must match the file name {path.stem!r}")
    return app


def apps_dir() -> Path:
    """The registry folder: BATON_APPS_DIR when set (another deployment, tests), else include/apps in a
    checkout, $AIRFLOW_HOME/baton/apps when installed (baton.settings.default_apps_dir)."""
    return Path(os.environ.get("BATON_APPS_DIR") or APPS_DIR)


def definition_path(app: str) -> Path:
    """An app's definition file from its registry name, or a path to a .yaml file as given."""
    return Path(app).resolve() if app.endswith(".yaml") else apps_dir() / f"{app}.yaml"


def load_app(app: str) -> AppDefinition:
    """One app by registry name (or path); an unknown name is an AppDefinitionError listing the known ones."""
    path = definition_path(app)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in apps_dir().glob("*.yaml"))) or "none"
        raise AppDefinitionError(path, "name", f"no app {app!r} is registered (known: {known})")
    return load_definition(path)


def version_path(app: str, version: str) -> Path:
    """Where version `version` of registered app `app` is defined: the registry file if it is that
    version, else versions/<app>/<version>.yaml (other versions of an app, e.g. the next one a
    rolling upgrade moves to)."""
    current = load_app(app)
    if version in ("", current.version):
        return definition_path(app)
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", version):
        raise AppDefinitionError(apps_dir() / VERSIONS / app, "version", f"{version!r} is not a version name")
    path = apps_dir() / VERSIONS / current.name / f"{version}.yaml"
    if not path.exists():
        known = sorted({current.version, *(p.stem for p in path.parent.glob("*.yaml"))})
        raise AppDefinitionError(path, "version", f"{app} has no version {version!r} (known: {', '.join(known)})")
    return path


def load_version(app: str, version: str) -> AppDefinition:
    """Version `version` of registered app `app` (see version_path); it must keep the app's topics."""
    current, path = load_app(app), version_path(app, version)
    other = load_definition(path)
    for what in ("input", "output"):
        if getattr(other, what) != getattr(current, what):
            raise AppDefinitionError(
                path,
                what,
                f"{getattr(other, what)} differs from {getattr(current, what)} "
                "in the registry: a new version keeps its app's topics",
            )
    return other


def load_registry(folder: Path | None = None) -> dict[str, AppDefinition]:
    """Every app under the registry folder; any bad file fails the whole load (nothing half-registered)."""
    folder = apps_dir() if folder is None else folder
    return {app.name: app for app in (load_definition(p) for p in sorted(folder.glob("*.yaml")))}
