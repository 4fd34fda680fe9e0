"""The apps' status as the Baton page, `baton apps` and the metrics read it, from a real broker: bounded
first read, incremental refreshes, and the CLI and the exporter a user runs."""

import os
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from baton.apps import load_registry
from baton.kafka.admin import ensure_topics
from baton.leases import Lease
from baton.local.procs import free_port
from baton.records import ControlRecord, Handoff, Role, Slot, SlotSpec, SlotState, StatusRecord
from baton.settings import CONTROL_TOPIC, LEASES_TOPIC, STATUS_TOPIC
from baton.status_feed import StatusFeed
from baton.topics import platform_topics

pytestmark = pytest.mark.integration


@pytest.fixture
def app(bootstrap, topics, tmp_path):
    """A registered app with an input holding 1,000 records (its end), no slot running: the records a
    running app would write are produced by the test."""
    name = f"feed_{uuid.uuid4().hex[:6]}"
    t = topics(input=2, output=2)
    (tmp_path / f"{name}.yaml").write_text(
        f"name: {name}\nversion: v1\nmodule: spark_apps.apps.click_counts\n"
        f"input: {{topic: {t['input']}, partitions: 2}}\noutput: {{topic: {t['output']}, partitions: 2}}\n"
    )
    ensure_topics(bootstrap, [s for s in platform_topics() if s.name in (CONTROL_TOPIC, STATUS_TOPIC, LEASES_TOPIC)])
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(1000):
        p.produce(t["input"], b"{}", partition=i % 2)
    p.flush(10)
    return load_registry(tmp_path)[name], tmp_path


def produce(bootstrap, items):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, key, value in items:
        p.produce(topic, value, key)
    p.flush(10)


def controls(name, now):
    base = dict(
        app=name,
        slots={
            Slot.BLUE: SlotSpec(desired=SlotState.RUNNING, version="v1"),
            Slot.GREEN: SlotSpec(desired=SlotState.RUNNING, version="v1"),
        },
    )
    fence = {0: 400, 1: 400}
    return [
        ControlRecord(
            revision=1, epoch=1, active=Slot.BLUE, writer="baton_lifecycle:manual__a", ts_ms=now - 9000, **base
        ),
        ControlRecord(
            revision=2,
            epoch=1,
            active=Slot.BLUE,
            fence=fence,
            writer="baton_cutover:manual__b",
            ts_ms=now - 6000,
            **base,
        ),
        ControlRecord(
            revision=3,
            epoch=2,
            active=Slot.GREEN,
            writer="baton_cutover:manual__b",
            ts_ms=now - 5000,
            handoff=Handoff(id="manual__b", epoch=1, fence=fence, to=Slot.GREEN),
            **base,
        ),
    ]


def status(name, slot, ts, processed, batch):
    return StatusRecord(
        app=name,
        slot=slot,
        state=SlotState.RUNNING,
        role=Role.ACTIVE if slot is Slot.GREEN else Role.STANDBY,
        epoch_seen=2,
        version="v1",
        batch_id=batch,
        processed=processed,
        input_end={0: 500, 1: 500},
        input_rate=100.0,
        batch_ms=250,
        ts_ms=ts,
    )


def test_the_first_read_is_bounded_and_later_refreshes_read_only_what_arrived(bootstrap, app):
    app_def, _ = app
    name, now = app_def.name, int(time.time() * 1000)
    produce(bootstrap, [(CONTROL_TOPIC, r.key(), r.to_bytes()) for r in controls(name, now)])
    old = [status(name, Slot.BLUE, now - 4000 + i, {0: 100, 1: 100}, i) for i in range(300)]
    for i in range(0, 300, 10):  # in batches of 10, as slots write them (a tail read starts at a batch)
        produce(bootstrap, [(STATUS_TOPIC, s.key(), s.to_bytes()) for s in old[i : i + 10]])
    lease = Lease(
        app=name,
        slot=Slot.GREEN,
        launch="l",
        host="h",
        pid=1,
        pid_start=1,
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=2,
        seq=1,
        ts_ms=now - 500,
        ttl_ms=4000,
        interval_ms=1000,
    )
    produce(bootstrap, [(LEASES_TOPIC, lease.key(), lease.to_bytes())])

    feed = StatusFeed(bootstrap, status_tail=50)
    feed.refresh()
    # The tail, not the whole topic: at least 50, at most one batch more (Tansu's end is a batch's start).
    assert 50 <= feed.read[STATUS_TOPIC] <= 60
    assert len(feed.apps[name].history()) <= 10  # per slot, the last ten: what a view reads
    view = next(v for v in feed.views({name: app_def}) if v.app == name)
    assert (view.epoch, view.active, view.revision) == (2, "green", 3)
    assert [e.kind for e in view.events] == ["slot", "slot", "slot", "fence", "cutover"]
    assert view.events[-1].run_id == "manual__b"
    blue, green = view.slots
    assert blue.lag_records == 800  # the input's real end (500 a partition) minus 100 processed of each
    assert green.lease_age_s is not None and green.lease_age_s < 30 and green.state == ""

    position, read = dict(feed.next), feed.read[STATUS_TOPIC]
    produce(
        bootstrap,
        [
            (STATUS_TOPIC, s.key(), s.to_bytes())
            for s in [status(name, Slot.GREEN, now + i, {0: 500, 1: 450}, 1000 + i) for i in range(5)]
        ],
    )
    feed.refresh()
    assert feed.next[STATUS_TOPIC] >= position[STATUS_TOPIC] + 5 and feed.next[CONTROL_TOPIC] == position[CONTROL_TOPIC]
    assert feed.read[STATUS_TOPIC] - read < 50  # only what arrived since (here: 5, and other tests' records)
    green = next(v for v in feed.views({name: app_def}) if v.app == name).slots[1]
    assert (green.batch_id, green.lag_records, green.state) == (1004, 50, "running")


def baton(args, bootstrap, apps_dir, **kw):
    env = {**os.environ, "BATON_KAFKA_BOOTSTRAP": bootstrap, "BATON_APPS_DIR": str(apps_dir)}
    return subprocess.run(
        [sys.executable, "-m", "baton.local", *args], env=env, capture_output=True, text=True, timeout=60, **kw
    )


def test_baton_apps_and_app_show_the_status_in_the_terminal_and_refuse_an_unknown_app(bootstrap, app):
    app_def, apps_dir = app
    now = int(time.time() * 1000)
    produce(
        bootstrap,
        [(CONTROL_TOPIC, r.key(), r.to_bytes()) for r in controls(app_def.name, now)]
        + [(STATUS_TOPIC, s.key(), s.to_bytes()) for s in [status(app_def.name, Slot.GREEN, now, {0: 450, 1: 450}, 9)]],
    )
    table = baton(["apps"], bootstrap, apps_dir)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(app_def.name) and " green " in line)
    assert "active" in row and "running" in row and "100" in row  # role, reported state, lag
    detail = baton(["app", app_def.name], bootstrap, apps_dir)
    assert detail.returncode == 0 and "epoch 2, green active" in detail.stdout
    assert "cutover" in detail.stdout and "baton_cutover:manual__b" in detail.stdout
    unknown = baton(["app", "nope"], bootstrap, apps_dir)
    assert unknown.returncode == 2 and "no app 'nope' is registered" in unknown.stderr
    down = baton(["apps"], f"127.0.0.1:{free_port()}", apps_dir)
    assert down.returncode == 1 and "cannot read Baton's topics" in down.stderr


def test_the_metrics_exporter_serves_each_slot_s_figures_to_a_scraper(bootstrap, app):
    app_def, apps_dir = app
    now = int(time.time() * 1000)
    produce(
        bootstrap,
        [(CONTROL_TOPIC, r.key(), r.to_bytes()) for r in controls(app_def.name, now)]
        + [(STATUS_TOPIC, s.key(), s.to_bytes()) for s in [status(app_def.name, Slot.GREEN, now, {0: 450, 1: 450}, 9)]],
    )
    port = free_port()
    env = {**os.environ, "BATON_KAFKA_BOOTSTRAP": bootstrap, "BATON_APPS_DIR": str(apps_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton.local", "metrics", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, text = time.monotonic() + 60, None
        while text is None:
            assert proc.poll() is None, proc.stdout.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    text = r.read().decode()
            except OSError:
                assert time.monotonic() < deadline, "the exporter did not answer within 60 s"
                time.sleep(0.3)
        samples = {
            (s.name, s.labels.get("app"), s.labels.get("slot")): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        assert samples[("baton_app_epoch", app_def.name, None)] == 2
        assert samples[("baton_slot_lag_records", app_def.name, "green")] == 100
        assert samples[("baton_slot_active", app_def.name, "green")] == 1
        assert samples[("baton_slot_batch_duration_seconds", app_def.name, "green")] == 0.25
    finally:
        proc.terminate()
        proc.wait(10)
