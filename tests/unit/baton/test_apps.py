"""App definitions are validated on load; a bad one names the file, the field and the problem."""

import pytest

from baton.apps import (
    APPS_DIR,
    AppDefinitionError,
    load_app,
    load_definition,
    load_registry,
    load_version,
    version_path,
)

GOOD = """name: demo
module: spark_apps.apps.click_counts
version: v1
input: {topic: clicks, partitions: 4}
output: {topic: user_counts, partitions: 4}
"""


def write(tmp_path, text, name="demo"):
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def test_shipped_definitions_load():
    apps = load_registry(APPS_DIR)
    assert apps["click_counts"].input.topic == "clicks"
    assert apps["click_counts"].dead_letter_topic == "baton.click_counts.deadletter"


def test_defaults_and_topics(tmp_path):
    app = load_definition(write(tmp_path, GOOD))
    assert app.trigger_ms == 1000 and app.standby_pace_ms == 2000
    assert (app.lease_interval_ms, app.lease_ttl_ms) == (1000, 4000)
    assert load_definition(write(tmp_path, GOOD + "standby_pace_ms: 0\n")).standby_pace_ms == 0
    assert app.standby_nice == 10 and load_definition(write(tmp_path, GOOD + "standby_nice: 0\n")).standby_nice == 0
    assert [t.name for t in app.topics()] == ["clicks", "user_counts", "baton.demo.deadletter", "baton.demo.commits"]


@pytest.mark.parametrize(
    "text, field, problem",
    [
        (GOOD.replace("partitions: 4}\noutput", "partitions: 0}\noutput"), "input.partitions", "must be > 0"),
        (GOOD.replace("partitions: 4}\noutput", "partitions: four}\noutput"), "input.partitions", "must be int"),
        (GOOD.replace("version: v1\n", ""), "version", "is required"),
        (GOOD + "trigger_ms: true\n", "trigger_ms", "must be int"),
        (GOOD + "colour: blue\n", "colour", "is not a known field"),
        (GOOD + "standby_pace_ms: -1\n", "standby_pace_ms", "must be >= 0"),
        (GOOD + "standby_nice: 20\n", "standby_nice", "from 0 to 19, got 20"),
        (GOOD + "standby_nice: -5\n", "standby_nice", "from 0 to 19, got -5"),
        (GOOD + "lease_ttl_ms: 2000\n", "lease_ttl_ms", "at least 3 x lease_interval_ms (3000)"),
        (GOOD + "lease_interval_ms: 0\n", "lease_interval_ms", "must be > 0"),
        (GOOD.replace("user_counts", "clicks"), "output.topic", "must differ"),
        (GOOD.replace("topic: clicks", "topic: 'bad topic'"), "input.topic", "not a valid Kafka topic"),
        (GOOD.replace("name: demo", "name: other"), "name", "must match the file name"),
        ("name: [unclosed", "(file)", "not valid YAML"),
        (GOOD + "state: {snapshot_every_batches: 0}\n", "state.snapshot_every_batches", "must be > 0"),
        (GOOD + "state: {snapshot_upload_interval_s: 1.5}\n", "state.snapshot_upload_interval_s", "must be int"),
        (GOOD + "state: {snapshots: 3}\n", "state.snapshots", "is not a known field"),
        (GOOD + "state: {partitions: 0}\n", "state.partitions", "must be > 0"),
        (GOOD + "state: {count_rows: 'no'}\n", "state.count_rows", "must be bool"),
        (GOOD + "state: {count_rows: 0}\n", "state.count_rows", "must be bool"),
        (GOOD + "state: {count_rows: false, max_rows: 10}\n", "state.max_rows", "needs state.count_rows"),
        (GOOD + "state: {ttl: 7d}\n", "state.ttl", "must be a mapping"),
        (GOOD + "state: {ttl: {on: event_time}}\n", "state.ttl.idle", "is required"),
        (GOOD + "state: {ttl: {idle: 7 days}}\n", "state.ttl.idle", "positive duration such as 60s"),
        (GOOD + "state: {ttl: {idle: 0s}}\n", "state.ttl.idle", "positive duration"),
        (GOOD + "state: {ttl: {idle: 7d, on: processing_time}}\n", "state.ttl.on", "at a different input position"),
        (GOOD + "state: {ttl: {idle: 7d, evicted: tombstone}}\n", "state.ttl.evicted", "not supported"),
        (GOOD + "state: {ttl: {idle: 7d, disorder: -1s}}\n", "state.ttl.disorder", "positive duration"),
        (GOOD + "state: {ttl: {idle: 7d, grace: 1s}}\n", "state.ttl.grace", "is not a known field"),
    ],
)
def test_bad_definitions_name_file_field_and_problem(tmp_path, text, field, problem):
    path = write(tmp_path, text)
    with pytest.raises(AppDefinitionError) as err:
        load_definition(path)
    assert err.value.field == field
    assert problem in err.value.problem
    assert str(path) in str(err.value)


def test_the_state_stores_snapshot_cadence_reaches_the_slots_spark_settings(tmp_path):
    from spark_apps.runtime.spark import session_conf

    default = session_conf(load_definition(write(tmp_path, GOOD)))
    assert default["spark.sql.streaming.stateStore.minDeltasForSnapshot"] == "5"
    assert default["spark.sql.streaming.stateStore.maintenanceInterval"] == "10s"
    app = load_definition(
        write(tmp_path, GOOD + "state: {snapshot_every_batches: 10, snapshot_upload_interval_s: 60}\n")
    )
    conf = session_conf(app)
    assert conf["spark.sql.streaming.stateStore.minDeltasForSnapshot"] == "10"
    assert conf["spark.sql.streaming.stateStore.maintenanceInterval"] == "60s"


def test_the_state_partitions_reach_the_slots_spark_settings_apart_from_the_input_partitions(tmp_path):
    from spark_apps.runtime.spark import session_conf

    app = load_definition(write(tmp_path, GOOD))
    assert app.input.partitions == 4 and session_conf(app)["spark.sql.shuffle.partitions"] == "1"
    app = load_definition(write(tmp_path, GOOD + "state: {partitions: 8}\n"))
    assert session_conf(app)["spark.sql.shuffle.partitions"] == "8"


def test_the_state_row_count_is_on_unless_the_app_turns_it_off_and_reaches_the_state_store(tmp_path):
    from spark_apps.runtime.spark import session_conf

    track = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
    app = load_definition(write(tmp_path, GOOD))
    assert app.state.count_rows is True and session_conf(app)[track] == "true"
    app = load_definition(write(tmp_path, GOOD + "state: {count_rows: false}\n"))
    assert app.state.count_rows is False and session_conf(app)[track] == "false"
    assert app.state.partitions == 1  # the other state settings keep their defaults


def test_a_state_ttl_is_read_in_event_time_and_brings_its_jvm_operator_to_the_slot(tmp_path):
    from spark_apps.runtime.spark import session_conf
    from spark_apps.runtime.state.idle_counts import JAR

    assert load_definition(write(tmp_path, GOOD)).state.ttl is None
    app = load_definition(write(tmp_path, GOOD + "state: {ttl: {idle: 7d, on: event_time}}\n"))
    assert (app.state.ttl.idle_ms, app.state.ttl.disorder_ms) == (7 * 86_400_000, 10_000)
    assert (
        load_definition(write(tmp_path, GOOD + "state: {ttl: {idle: 90m, disorder: 500ms}}\n")).state.ttl.disorder_ms
        == 500
    )
    assert session_conf(app)["spark.jars"] == str(JAR)  # built by make install


def test_the_state_store_is_baton_s_cached_one_where_its_jar_is_built_and_cache_keys_sizes_it(tmp_path, monkeypatch):
    from spark_apps.runtime.spark import (
        CACHE_KEYS_CONF,
        CACHED_STORE,
        ROCKSDB_STORE,
        SINGLE_PARTITION_STATE_RULE,
        session_conf,
    )
    from spark_apps.runtime.state import idle_counts

    provider = "spark.sql.streaming.stateStore.providerClass"
    app = load_definition(write(tmp_path, GOOD))
    assert app.state.cache_keys == 250_000
    jar = tmp_path / "baton-jvm.jar"
    monkeypatch.setattr(idle_counts, "JAR", jar)
    conf = session_conf(app)  # no jar built: RocksDB's own store, nothing to ship
    assert conf[provider] == ROCKSDB_STORE and "spark.jars" not in conf and "spark.sql.extensions" not in conf
    jar.write_bytes(b"PK")
    conf = session_conf(app)
    assert conf[provider] == CACHED_STORE and conf["spark.jars"] == str(jar) and conf[CACHE_KEYS_CONF] == "250000"
    assert conf["spark.sql.extensions"] == SINGLE_PARTITION_STATE_RULE  # Baton's plan rule, from the same jar
    off = load_definition(write(tmp_path, GOOD + "state: {cache_keys: 0}\n"))
    assert off.state.cache_keys == 0 and session_conf(off)[CACHE_KEYS_CONF] == "0"
    with pytest.raises(AppDefinitionError, match="state.cache_keys.*>= 0"):
        load_definition(write(tmp_path, GOOD + "state: {cache_keys: -1}\n"))
    with pytest.raises(AppDefinitionError, match="state.cache_keys.*must be int"):
        load_definition(write(tmp_path, GOOD + "state: {cache_keys: lots}\n"))


def test_one_bad_file_fails_the_whole_registry(tmp_path):
    write(tmp_path, GOOD)
    write(tmp_path, "name: broken\n", name="broken")
    with pytest.raises(AppDefinitionError, match="broken.yaml"):
        load_registry(tmp_path)


@pytest.mark.parametrize(
    "health, field, problem",
    [
        ("{max_restart: 2}", "health.max_restart", "is not a known setting"),
        ("{max_restarts: two}", "health.max_restarts", "must be a number"),
        ("{max_restarts: true}", "health.max_restarts", "must be a number"),
        ("{max_restarts: 0}", "health", "must be > 0"),
    ],
)
def test_bad_health_overrides_name_the_setting(tmp_path, health, field, problem):
    with pytest.raises(AppDefinitionError) as err:
        load_definition(write(tmp_path, GOOD + f"health: {health}\n"))
    assert err.value.field == field
    assert problem in err.value.problem


def test_health_overrides_reach_the_policy(tmp_path):
    from baton.health import HealthPolicy

    app = load_definition(write(tmp_path, GOOD + "health: {max_restarts: 2, restart_backoff_s: 1}\n"))
    policy = HealthPolicy.from_app(app)
    assert (policy.max_restarts, policy.restart_backoff_s) == (2, 1)
    assert policy.heartbeat_max_age_s == HealthPolicy().heartbeat_max_age_s


def test_load_app_by_name_from_the_registry_folder(tmp_path, monkeypatch):
    write(tmp_path, GOOD)
    monkeypatch.setenv("BATON_APPS_DIR", str(tmp_path))
    assert load_app("demo").input.topic == "clicks"
    assert set(load_registry()) == {"demo"}
    with pytest.raises(AppDefinitionError) as err:
        load_app("nope")
    assert err.value.field == "name" and "known: demo" in err.value.problem


def test_other_versions_live_under_versions_and_keep_the_topics(tmp_path, monkeypatch):
    monkeypatch.setenv("BATON_APPS_DIR", str(tmp_path))
    write(tmp_path, GOOD)
    versions = tmp_path / "versions" / "demo"
    versions.mkdir(parents=True)
    (versions / "v2.yaml").write_text(GOOD.replace("version: v1", "version: v2"))
    assert version_path("demo", "v1") == tmp_path / "demo.yaml"
    assert version_path("demo", "") == tmp_path / "demo.yaml"
    assert load_version("demo", "v2").version == "v2"
    with pytest.raises(AppDefinitionError, match=r"no version 'v9' \(known: v1, v2\)"):
        version_path("demo", "v9")
    with pytest.raises(AppDefinitionError, match="is not a version name"):
        version_path("demo", "../demo")
    (versions / "v3.yaml").write_text(GOOD.replace("version: v1", "version: v4"))
    with pytest.raises(AppDefinitionError, match="'v4' must match the file name 'v3'"):
        load_version("demo", "v3")
    (versions / "v5.yaml").write_text(
        GOOD.replace("version: v1", "version: v5").replace("topic: clicks", "topic: other")
    )
    with pytest.raises(AppDefinitionError, match="keeps its app's topics"):
        load_version("demo", "v5")


def test_shipped_versions_load():
    assert load_version("click_counts", "v2").module == "spark_apps.apps.click_counts_v2"
    assert load_version("click_counts", "v3").module == "spark_apps.apps.click_counts_v3"
