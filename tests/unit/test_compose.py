"""Static checks of the production-shaped stack (docker-compose.yaml, docker/*.Dockerfile).

No Docker engine is needed: these tests read the files and check the wiring that would otherwise
only fail at `docker compose up` time (pinned images, healthchecks, ports, volumes, mounts,
dependencies, Kafka KRaft settings, Spark master URL, the locked pyspark in the Spark image).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path, PurePosixPath

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
REQUIREMENTS = ROOT / "requirements.txt"
SPARK_DOCKERFILE = ROOT / "docker" / "spark.Dockerfile"
AIRFLOW_DOCKERFILE = ROOT / "docker" / "airflow.Dockerfile"

AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
SPARK_WORKERS = {"spark-worker-1", "spark-worker-2"}


# ------------------------------------------------------------------------------------ helpers


@pytest.fixture(scope="module")
def compose() -> dict:
    with COMPOSE_FILE.open() as f:
        data = yaml.safe_load(f)  # SafeLoader resolves anchors and `<<` merge keys
    assert isinstance(data, dict), "docker-compose.yaml must be a mapping"
    return data


@pytest.fixture(scope="module")
def services(compose) -> dict:
    svcs = compose.get("services")
    assert isinstance(svcs, dict) and svcs, "no services defined"
    return svcs


def env_of(service: dict) -> dict[str, str]:
    """A service's environment as a dict of strings (map or KEY=VAL list form)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        out = {}
        for item in env:
            key, _, value = item.partition("=")
            out[key] = value
        return out
    return {k: "" if v is None else str(v) for k, v in env.items()}


def depends_on(service: dict) -> dict[str, str]:
    """depends_on as {target: condition}; the short list form means service_started."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {d: "service_started" for d in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def one_shot_services(services: dict) -> set[str]:
    """Services others wait to *complete* (service_completed_successfully)."""
    return {
        target
        for svc in services.values()
        for target, cond in depends_on(svc).items()
        if cond == "service_completed_successfully"
    }


def parse_volume(entry) -> tuple[str | None, str, str]:
    """(source, target, type) of a service volume entry, short or long syntax."""
    if isinstance(entry, dict):
        return entry.get("source"), entry["target"], entry["type"]
    parts = entry.split(":")
    if len(parts) == 1:
        return None, parts[0], "volume"  # anonymous volume
    source, target = parts[0], parts[1]
    kind = "bind" if source.startswith((".", "/", "~", "$")) else "volume"
    return source, target, kind


def host_ports(entry) -> list[tuple[str, int, str]]:
    """(host_ip, host_port, protocol) for each host port a `ports` entry publishes."""
    if isinstance(entry, dict):
        published = entry.get("published")
        if published is None:
            return []
        return [(entry.get("host_ip", "0.0.0.0"), int(published), entry.get("protocol", "tcp"))]
    spec = str(entry)
    spec, _, proto = spec.partition("/")
    proto = proto or "tcp"
    parts = spec.rsplit(":", 2)
    if len(parts) == 1:
        return []  # container port only: the host port is random, nothing to clash
    if len(parts) == 2:
        ip, host = "0.0.0.0", parts[0]
    else:
        ip, host = parts[0] or "0.0.0.0", parts[1]
    if "-" in host:
        lo, hi = (int(p) for p in host.split("-"))
        return [(ip, p, proto) for p in range(lo, hi + 1)]
    return [(ip, int(host), proto)]


def image_is_pinned(image: str) -> bool:
    """True for `name:tag` with a real tag (not `latest`) or a digest; False for untagged."""
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return False
    tag = last.split(":", 1)[1]
    return bool(tag) and tag != "latest" and "$" not in tag


def dockerfile_bases(path: Path) -> list[str]:
    """Base images of every FROM line, excluding references to earlier build stages."""
    stages: set[str] = set()
    bases = []
    for line in path.read_text().splitlines():
        m = re.match(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if not m:
            continue
        image, stage = m.group(1), m.group(2)
        if image not in stages:
            bases.append(image)
        if stage:
            stages.add(stage)
    return bases


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def build_dockerfile(service: dict) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return (ROOT / build / "Dockerfile").resolve()
    context = ROOT / build.get("context", ".")
    return (context / build.get("dockerfile", "Dockerfile")).resolve()


# ------------------------------------------------------------------------------------ tests


def test_compose_parses_and_has_the_expected_services(services):
    expected = {"kafka", "postgres", "spark-master"} | SPARK_WORKERS | AIRFLOW_SERVICES
    assert expected <= set(services), f"missing services: {sorted(expected - set(services))}"


def test_airflow_services_share_the_x_airflow_common_anchor(compose, services):
    common = compose.get("x-airflow-common")
    assert isinstance(common, dict), "x-airflow-common block is missing"
    assert "&airflow-common" in COMPOSE_FILE.read_text()
    common_env = env_of(common)
    for name in AIRFLOW_SERVICES:
        svc = services[name]
        assert svc.get("build") == common["build"], name
        assert svc.get("image") == common["image"], name
        env = env_of(svc)
        for key, value in common_env.items():
            assert env.get(key) == value, f"{name}: {key} differs from x-airflow-common"
        for vol in common["volumes"]:
            assert vol in svc.get("volumes", []), f"{name}: missing common volume {vol}"


def test_every_service_has_a_pinned_image_or_a_build(services):
    for name, svc in services.items():
        image = svc.get("image")
        if svc.get("build") is not None:
            path = build_dockerfile(svc)
            assert path is not None and path.is_file(), f"{name}: Dockerfile {path} not found"
            if image is not None:
                assert image_is_pinned(image), f"{name}: built image name {image!r} has no tag"
        else:
            assert image, f"{name}: neither image nor build"
            assert image_is_pinned(image), f"{name}: image {image!r} is not pinned to a tag"


def test_dockerfiles_exist_and_their_base_images_are_pinned(services):
    dockerfiles = {build_dockerfile(s) for s in services.values()} - {None}
    assert dockerfiles == {SPARK_DOCKERFILE.resolve(), AIRFLOW_DOCKERFILE.resolve()}
    for path in dockerfiles:
        assert path.is_file(), path
        bases = dockerfile_bases(path)
        assert bases, f"{path.name}: no FROM line"
        for base in bases:
            assert image_is_pinned(base), f"{path.name}: base image {base!r} is not pinned"


def test_every_long_running_service_has_a_healthcheck(services):
    one_shot = one_shot_services(services)
    assert one_shot == {"airflow-init"}
    assert str(services["airflow-init"].get("restart", "no")) == "no"
    assert "healthcheck" not in services["airflow-init"]
    for name, svc in services.items():
        if name in one_shot:
            continue
        hc = svc.get("healthcheck")
        assert isinstance(hc, dict), f"{name}: no healthcheck"
        assert not hc.get("disable"), f"{name}: healthcheck disabled"
        test = hc.get("test")
        assert test and test != ["NONE"], f"{name}: empty healthcheck"
        if isinstance(test, list):
            assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, f"{name}: bad test {test}"
        assert svc.get("restart") in ("unless-stopped", "always", "on-failure"), name


def test_airflow_healthchecks_probe_the_right_component(services):
    def cmd(name):
        test = services[name]["healthcheck"]["test"]
        return " ".join(test) if isinstance(test, list) else test

    assert "http://localhost:8080/api/v2/monitor/health" in cmd("airflow-api-server")
    sched = cmd("airflow-scheduler")
    if "8974" in sched:  # scheduler's own health server must then be enabled
        assert env_of(services["airflow-scheduler"])["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "true"
    else:
        assert "--job-type SchedulerJob" in sched
    assert "--job-type TriggererJob" in cmd("airflow-triggerer")
    assert "--job-type DagProcessorJob" in cmd("airflow-dag-processor")
    assert "pg_isready" in cmd("postgres")
    assert "kafka-broker-api-versions.sh" in cmd("kafka") or "kafka-topics.sh" in cmd("kafka")
    assert ":8080" in cmd("spark-master")
    for worker in SPARK_WORKERS:
        assert ":8081" in cmd(worker)


def test_host_ports_are_unique(services):
    seen: dict[tuple[int, str], str] = {}
    count = 0
    for name, svc in services.items():
        for entry in svc.get("ports", []):
            for _ip, port, proto in host_ports(entry):
                key = (port, proto)
                assert key not in seen, f"host port {port}/{proto}: {seen.get(key)} and {name}"
                seen[key] = name
                count += 1
    # Kafka for host clients, the Airflow UI/API, the Spark master and both worker UIs.
    assert count >= 5
    assert seen[(9092, "tcp")] == "kafka"
    assert seen[(8080, "tcp")] == "airflow-api-server"


def test_named_volumes_are_declared_and_bind_sources_exist(compose, services):
    declared = set((compose.get("volumes") or {}).keys())
    used = set()
    for name, svc in services.items():
        for entry in svc.get("volumes", []):
            source, target, kind = parse_volume(entry)
            assert target.startswith("/"), f"{name}: relative target {target}"
            if kind == "volume":
                assert source is not None, f"{name}: anonymous volume at {target}"
                assert source in declared, f"{name}: volume {source!r} not declared at top level"
                used.add(source)
            elif kind == "bind":
                assert (ROOT / source).exists(), f"{name}: bind source {source} does not exist"
    assert used == declared, f"declared but unused volumes: {sorted(declared - used)}"
    # Stateful services keep their data on named volumes.
    for svc, target in [("kafka", "/var/lib/kafka/data"), ("postgres", "/var/lib/postgresql/data")]:
        kinds = {parse_volume(v)[1]: parse_volume(v)[2] for v in services[svc].get("volumes", [])}
        assert kinds.get(target) == "volume", f"{svc}: {target} is not on a named volume"


def test_named_volume_mount_points_are_created_in_built_images(services):
    """A fresh named volume copies the image directory's owner: the non-root users of the built
    images can only write to it if the Dockerfile created that directory for them."""
    for name, svc in services.items():
        dockerfile = build_dockerfile(svc)
        if dockerfile is None:
            continue
        text = dockerfile.read_text()
        for entry in svc.get("volumes", []):
            _source, target, kind = parse_volume(entry)
            if kind != "volume" or target == "/opt/airflow/logs":  # logs/ ships in the base image
                continue
            assert re.search(rf"mkdir -p[^\n]*\s{re.escape(target)}(\s|$)", text), (
                f"{name}: {dockerfile.name} does not create {target}"
            )


@pytest.mark.parametrize("service", sorted(AIRFLOW_SERVICES))
def test_airflow_mounts_match_dags_and_plugins_folders(services, service):
    svc = services[service]
    env = env_of(svc)
    binds = {}
    for entry in svc.get("volumes", []):
        source, target, kind = parse_volume(entry)
        if kind == "bind":
            binds[target] = source
    for setting, repo_dir in [
        ("AIRFLOW__CORE__DAGS_FOLDER", "dags"),
        ("AIRFLOW__CORE__PLUGINS_FOLDER", "plugins"),
    ]:
        folder = env.get(setting)
        assert folder, f"{service}: {setting} not set"
        assert folder in binds, f"{service}: nothing mounted at {setting}={folder}"
        host = (ROOT / binds[folder]).resolve()
        assert host == (ROOT / repo_dir).resolve(), f"{service}: {folder} <- {binds[folder]}"
        assert host.is_dir(), f"{host} is not a directory in the repo"
    # The rest of the repo layout the DAGs and plugins use, mirrored under /opt/airflow.
    for repo_dir in ("include", "spark_apps"):
        target = f"/opt/airflow/{repo_dir}"
        assert target in binds, f"{service}: {repo_dir}/ not mounted at {target}"
        assert (ROOT / binds[target]).resolve() == (ROOT / repo_dir).resolve()
        assert (ROOT / repo_dir).is_dir()


def test_airflow_core_settings(services):
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert env["AIRFLOW__CORE__PARALLELISM"] == "4", name
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false", name
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"], name
        conn = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert re.match(r"^postgresql(\+psycopg2)?://[^@]+@postgres(:5432)?/", conn), conn
        url = env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
        m = re.match(r"^http://([^:/]+):(\d+)/execution/$", url)
        assert m and m.group(1) == "airflow-api-server" and m.group(2) == "8080", url
        users = env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
        assert "admin:admin" in users.split(","), users
        assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"].startswith("/opt/airflow/auth/")
    # One secret for all components, or task tokens signed by one are rejected by another.
    secrets = {env_of(services[n])["AIRFLOW__API_AUTH__JWT_SECRET"] for n in AIRFLOW_SERVICES}
    assert len(secrets) == 1
    pg = env_of(services["postgres"])
    conn = env_of(services["airflow-scheduler"])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert f"{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@" in conn
    assert conn.endswith(f"/{pg['POSTGRES_DB']}")


def test_airflow_init_migrates_and_writes_the_passwords_file(services):
    init = services["airflow-init"]
    script = init["command"] if isinstance(init["command"], str) else "\n".join(init["command"])
    assert "airflow db migrate" in script
    assert "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in script
    assert depends_on(init).get("postgres") == "service_healthy"


def test_depends_on_targets_exist_and_conditions_are_sound(services):
    one_shot = one_shot_services(services)
    for name, svc in services.items():
        for target, cond in depends_on(svc).items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
            assert cond in ("service_started", "service_healthy", "service_completed_successfully")
            if cond == "service_healthy":
                assert "healthcheck" in services[target], f"{name}: {target} has no healthcheck"
            if cond == "service_completed_successfully":
                assert target in one_shot
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        deps = depends_on(services[name])
        assert deps.get("airflow-init") == "service_completed_successfully", name
        assert deps.get("postgres") == "service_healthy", name
    for worker in SPARK_WORKERS:
        assert depends_on(services[worker]).get("spark-master") == "service_healthy"

    # No cycles.
    graph = {n: set(depends_on(s)) for n, s in services.items()}
    visiting, done = set(), set()

    def visit(n):
        assert n not in visiting, f"dependency cycle through {n}"
        if n in done:
            return
        visiting.add(n)
        for m in graph[n]:
            visit(m)
        visiting.discard(n)
        done.add(n)

    for n in graph:
        visit(n)


def test_kafka_runs_kraft_combined_with_internal_and_host_listeners(services):
    kafka = services["kafka"]
    image = kafka["image"]
    assert image.startswith("apache/kafka:") and image_is_pinned(image), image
    env = env_of(kafka)
    assert "ZOOKEEPER" not in " ".join(env), "KRaft mode has no ZooKeeper settings"
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]

    listeners = dict(
        (name, int(addr.rsplit(":", 1)[1]))
        for name, _, addr in (item.partition("://") for item in env["KAFKA_LISTENERS"].split(","))
    )
    protocol_map = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocol_map), "every listener needs a security protocol"

    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert controller in listeners
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1, "single node"
    voter_id, _, voter_addr = voters[0].partition("@")
    voter_host, voter_port = voter_addr.rsplit(":", 1)
    assert voter_id == node_id
    assert voter_host in ("kafka", kafka.get("hostname"))
    assert int(voter_port) == listeners[controller]

    inter = env["KAFKA_INTER_BROKER_LISTENER_NAME"]
    advertised = dict(
        (name, addr)
        for name, _, addr in (item.partition("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    )
    assert controller not in advertised
    assert inter in advertised and advertised[inter] == f"kafka:{listeners[inter]}"
    host_listener = [n for n, a in advertised.items() if a == "localhost:9092"]
    assert host_listener and listeners[host_listener[0]] == 9092
    published = {p for entry in kafka.get("ports", []) for _ip, p, _proto in host_ports(entry)}
    assert 9092 in published

    # A fixed cluster id (base64url of a 16-byte UUID) so the data volume is reused.
    cluster_id = env["CLUSTER_ID"]
    assert len(cluster_id) == 22
    raw = base64.urlsafe_b64decode(cluster_id + "==")
    assert len(raw) == 16 and base64.urlsafe_b64encode(raw).decode().rstrip("=") == cluster_id
    # Single broker: internal topics can have one replica only (transactions need theirs).
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key

    # Airflow talks to the broker over the internal listener.
    for name in AIRFLOW_SERVICES:
        assert env_of(services[name])["BATON_KAFKA_BOOTSTRAP"] == advertised[inter] == "kafka:19092"
    hc = " ".join(kafka["healthcheck"]["test"])
    assert "kafka:19092" in hc


def test_spark_workers_point_at_the_master(services):
    master = services["spark-master"]
    master_cmd = master["command"]
    assert isinstance(master_cmd, list)
    assert master_cmd[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    port = master_cmd[master_cmd.index("--port") + 1] if "--port" in master_cmd else "7077"
    master_url = f"spark://spark-master:{port}"
    assert master_url == "spark://spark-master:7077"
    for worker in SPARK_WORKERS:
        cmd = services[worker]["command"]
        assert cmd[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"], worker
        assert master_url in cmd, f"{worker} does not register with {master_url}"
        assert services[worker].get("build") == master.get("build")
        assert services[worker].get("image") == master.get("image")
    for name in AIRFLOW_SERVICES:
        assert env_of(services[name])["BATON_SPARK_MASTER"] == master_url


def test_spark_image_installs_the_locked_pyspark(services):
    pins = lock_pins()
    assert pins.get("pyspark") == "4.3.0", "requirements.txt must pin pyspark==4.3.0"
    assert "pyspark-client" not in pins, "pyspark-client would overwrite pyspark's Python files"

    text = SPARK_DOCKERFILE.read_text()
    assert re.search(r"^COPY\s+[^\n]*\brequirements\.txt\b", text, re.M), "requirements.txt not copied"
    install = re.search(r"pip install[^\n]*--no-deps[^\n]*-r\s+\S*requirements\.txt", text)
    assert install, "the Spark image must pip install the lock with --no-deps"
    assert re.search(r"pip install[^\n]*--no-deps[^\n]*-e\s+/opt/baton", text)
    # Python 3.11 on both sides: PySpark refuses a driver/executor minor-version mismatch.
    spark_base = [b for b in dockerfile_bases(SPARK_DOCKERFILE) if b.startswith("python:")]
    assert spark_base and spark_base[0].startswith("python:3.11"), spark_base
    airflow_base = [b for b in dockerfile_bases(AIRFLOW_DOCKERFILE) if b.startswith("apache/airflow:")]
    assert airflow_base and airflow_base[0].endswith("-python3.11"), airflow_base
    # SPARK_HOME is pyspark's own install dir; the build asserts the version.
    assert "ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark" in text
    assert "pyspark.__version__ == '4.3.0'" in text
    # Same JVM build in both images.
    java = {b for b in dockerfile_bases(SPARK_DOCKERFILE) if b.startswith("eclipse-temurin:")}
    assert java and java == {b for b in dockerfile_bases(AIRFLOW_DOCKERFILE) if b.startswith("eclipse-temurin:")}


def test_airflow_image_matches_the_lock(services):
    pins = lock_pins()
    bases = [b for b in dockerfile_bases(AIRFLOW_DOCKERFILE) if b.startswith("apache/airflow:")]
    assert bases == [f"apache/airflow:{pins['apache-airflow']}-python3.11"], bases
    assert pins["apache-airflow"] == "3.3.2"
    text = AIRFLOW_DOCKERFILE.read_text()
    assert re.search(r"^COPY\s+[^\n]*\brequirements\.txt\b", text, re.M)
    assert re.search(r"pip install[^\n]*--no-deps[^\n]*-r\s+\S*requirements\.txt", text)
    assert re.search(r"pip install[^\n]*--no-deps[^\n]*-e\s+/opt/airflow", text)
    # Every directory COPY'd from the context exists in the repo.
    for line in text.splitlines() + SPARK_DOCKERFILE.read_text().splitlines():
        m = re.match(r"^COPY\s+(?!--from)(?:--\S+\s+)*(.+)\s+(\S+)$", line)
        if m:
            for src in m.group(1).split():
                assert (ROOT / src).exists(), f"COPY source {src} missing from the repo"


def test_airflow_mounted_code_shadows_the_installed_package(services):
    """The image installs the repo editable with project root /opt/airflow, so the package dirs
    mounted at /opt/airflow/<name> are what tasks import."""
    for name in AIRFLOW_SERVICES:
        binds = {
            parse_volume(v)[1]: parse_volume(v)[0] for v in services[name]["volumes"] if parse_volume(v)[2] == "bind"
        }
        for pkg in ("baton", "spark_apps"):
            assert PurePosixPath(binds[f"/opt/airflow/{pkg}"]).name == pkg, name
    for worker in {"spark-master"} | SPARK_WORKERS:
        binds = {
            parse_volume(v)[1]: parse_volume(v)[0] for v in services[worker]["volumes"] if parse_volume(v)[2] == "bind"
        }
        for pkg in ("baton", "spark_apps"):
            assert PurePosixPath(binds[f"/opt/baton/{pkg}"]).name == pkg, worker


def test_checkpoints_are_shared_between_drivers_and_executors(services):
    """Structured Streaming state is written by executors and read back after restarts: the
    checkpoint root must be the same volume at the same path on both sides."""
    root = env_of(services["airflow-scheduler"])["BATON_CHECKPOINT_ROOT"]

    def volume_at(svc: dict) -> str | None:
        for v in svc.get("volumes", []):
            source, target, kind = parse_volume(v)
            if kind == "volume" and (root == target or root.startswith(target.rstrip("/") + "/")):
                return source
        return None

    sources = {volume_at(services[n]) for n in AIRFLOW_SERVICES | SPARK_WORKERS}
    assert len(sources) == 1 and None not in sources, sources
