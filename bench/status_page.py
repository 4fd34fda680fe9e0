"""The Baton page with 20 apps registered and an hour of their slots' status behind it: does it stay
responsive, and are its reads bounded? (issue 22)

    .venv/bin/python bench/status_page.py        # -> bench/results/status_page.json/.png

Starts the embedded platform as `make up` does (bench/dag_platform.py) with 20 registered apps (4 input
partitions each, their topics created by the platform), then writes what 40 running slots would have
written over the last hour: a status record per slot and second (144,000), lease renewals, and each
app's control history (a start and a few cutovers); each input gets records. While 40 simulated slots
go on writing (a status record and a lease renewal per slot and second), a browser-like client polls
the page's data (`GET /baton/api/apps`, logged in, as the page does every 5 s) every second for
--seconds. No Spark slot runs (baton_health is paused, or it would launch the 40 slots it finds
dead): the page reads topics, and what it reads is what is measured.
Measured: the first answer after the API server started (the feed's bounded first read), then each
answer's time (p50 / p95 / max), its size, the status records the API server's feed read in all
(bounded: the tail, then what arrived since), `baton apps` from a shell (its own first read) and the
API server's CPU over the polling window. Target: every answer under 1 s, the first under 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, log, machine, pyplot, write_result  # noqa: E402

APPS = 20
TARGET_S = 1.0


def write_registry(folder: Path, n: int) -> list[str]:
    names = []
    for i in range(n):
        name = f"page_app_{i:02d}"
        (folder / f"{name}.yaml").write_text(
            f"name: {name}\nversion: v1\nmodule: spark_apps.apps.click_counts\n"
            f"input: {{topic: in-{name}, partitions: 4}}\noutput: {{topic: out-{name}, partitions: 4}}\n"
        )
        names.append(name)
    return names


def history(bootstrap: str, names: list[str], now_ms: int, seconds: int) -> int:
    """An hour of what 2 slots per app write: status records a second, leases, control changes, input."""
    from confluent_kafka import Producer

    from baton.leases import Lease
    from baton.records import ControlRecord, Handoff, Role, Slot, SlotSpec, SlotState
    from baton.settings import CONTROL_TOPIC, LEASES_TOPIC, STATUS_TOPIC

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 2000})
    n = 0
    for name in names:
        slots = {s: SlotSpec(desired=SlotState.RUNNING, version="v1") for s in Slot}
        revision, epoch, active = 1, 1, Slot.BLUE
        for k in range(6):  # a start, then cutovers every ten minutes
            ts = now_ms - seconds * 1000 + k * 600_000
            handoff = Handoff(id=f"manual__{k}", epoch=epoch - 1, fence={0: k}, to=active) if k else None
            rec = ControlRecord(
                app=name,
                revision=revision,
                epoch=epoch,
                active=active,
                slots=slots,
                handoff=handoff,
                writer=f"baton_cutover:manual__{k}",
                ts_ms=ts,
            )
            p.produce(CONTROL_TOPIC, rec.to_bytes(), rec.key())
            revision, epoch, active = revision + 1, epoch + 1, active.other
        for q in range(4):
            for _ in range(50):
                p.produce(f"in-{name}", b'{"user_id": "u1", "timestamp": 1}', b"u1", partition=q)
    for t in range(seconds):
        ts = now_ms - (seconds - t) * 1000
        for name in names:
            for slot in ("blue", "green"):
                p.produce(STATUS_TOPIC, status(name, slot, ts, t).to_bytes(), f"{name}/{slot}".encode())
                n += 1
        if t % 10 == 0:
            p.poll(0)
    for name in names:
        for slot in Slot:
            lease = Lease(
                app=name,
                slot=slot,
                launch="l",
                host="h",
                pid=1,
                pid_start=1,
                state=SlotState.RUNNING,
                role=Role.ACTIVE,
                epoch_seen=6,
                seq=1,
                ts_ms=now_ms,
                ttl_ms=4000,
                interval_ms=1000,
            )
            p.produce(LEASES_TOPIC, lease.to_bytes(), lease.key())
    p.flush(60)
    return n


def status(name: str, slot: str, ts: int, t: int):
    from baton.records import Role, Slot, SlotState, StatusRecord

    done = 200 * t
    return StatusRecord(
        app=name,
        slot=Slot(slot),
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=6,
        version="v1",
        batch_id=t,
        processed={q: done for q in range(4)},
        input_end={q: done + 300 for q in range(4)},
        input_rate=800.0,
        processing_rate=1500.0,
        batch_ms=400,
        state_rows=10_000,
        state_bytes=4 << 20,
        dead_letters=3,
        pid=1,
        host="h",
        ts_ms=ts,
    )


class Slots(threading.Thread):
    """40 slots going on: a status record and a lease renewal per slot and second."""

    def __init__(self, bootstrap: str, names: list[str], t0: int):
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.names, self.t = names, t0
        self.stop = threading.Event()

    def run(self) -> None:
        from baton.settings import STATUS_TOPIC

        while not self.stop.wait(1.0):
            self.t += 1
            now = int(time.time() * 1000)
            for name in self.names:
                for slot in ("blue", "green"):
                    self.p.produce(STATUS_TOPIC, status(name, slot, now, self.t).to_bytes(), f"{name}/{slot}".encode())
            self.p.poll(0)
        self.p.flush(10)


def api_server_pid() -> int | None:
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "api-server" in cmd or "api_server" in cmd:
            return p.pid
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", type=int, default=APPS)
    ap.add_argument("--history-s", type=int, default=3600, help="seconds of status history written first")
    ap.add_argument("--seconds", type=float, default=60.0, help="polling window")
    args = ap.parse_args()

    import subprocess

    import httpx
    import psutil

    with tempfile.TemporaryDirectory(prefix="baton-bench-page-") as tmp:
        apps_dir = Path(tmp) / "apps"
        apps_dir.mkdir()
        names = write_registry(apps_dir, args.apps)
        os.environ["BATON_APPS_DIR"] = str(apps_dir)  # the platform's processes inherit it
        from dag_platform import platform

        with platform(None) as (plat, client, _procs):
            bootstrap = plat.broker.bootstrap
            # The slots here are simulated: baton_health would find them dead and launch 40 real ones.
            client.request("PATCH", "/dags/baton_health", "pause baton_health", json={"is_paused": True})
            t = time.monotonic()
            written = history(bootstrap, names, int(time.time() * 1000), args.history_s)
            log(f"history: {written:,} status records for {len(names)} apps in {time.monotonic() - t:.0f}s")
            slots = Slots(bootstrap, names, args.history_s)
            slots.start()
            http = httpx.Client(
                base_url=plat.airflow.url, timeout=60, headers={"Authorization": f"Bearer {client.token()}"}
            )
            t = time.monotonic()
            first = http.get("/baton/api/apps")
            first_s = time.monotonic() - t
            assert first.status_code == 200, first.text
            apps = first.json()["apps"]
            assert len(apps) == len(names) and all(a["revision"] == 6 for a in apps), "not every app read"
            log(f"first answer: {first_s:.2f}s, {len(first.content) / 1024:.0f} KiB")
            server = psutil.Process(api_server_pid())
            cpu0, w0 = sum(server.cpu_times()[:2]), time.monotonic()
            samples, loads = [], []
            while time.monotonic() - w0 < args.seconds:
                loads.append(os.getloadavg()[0])
                t = time.monotonic()
                r = http.get("/baton/api/apps")
                samples.append((t - w0, time.monotonic() - t, len(r.content)))
                assert r.status_code == 200, r.text
                time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
            cpu = (sum(server.cpu_times()[:2]) - cpu0) / (time.monotonic() - w0)
            points = sum(len(a["points"]) for a in r.json()["apps"])
            env = {**os.environ, "BATON_KAFKA_BOOTSTRAP": bootstrap}
            t = time.monotonic()
            cli = subprocess.run([sys.executable, "-m", "baton.local", "apps"], env=env, capture_output=True, text=True)
            cli_s = time.monotonic() - t
            assert cli.returncode == 0 and names[-1] in cli.stdout, cli.stderr
            slots.stop.set()
            slots.join()
            http.close()

    times = sorted(s[1] for s in samples)
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]  # noqa: E731
    result = {
        "what": "GET /baton/api/apps (the Baton page's data) through the Airflow API server, 20 apps, an hour of status",
        "command": "bench/status_page.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "apps": len(names),
        "status_records_written": written,
        "first_answer_s": round(first_s, 3),
        "answers": len(times),
        "answer_p50_s": round(q(0.5), 3),
        "answer_p95_s": round(q(0.95), 3),
        "answer_max_s": round(times[-1], 3),
        "answer_kib": round(samples[-1][2] / 1024, 1),
        "plot_points": points,
        "api_server_cores": round(cpu, 3),
        "load_avg_1m_while_polling_max": round(max(loads), 1),
        "baton_apps_cli_s": round(cli_s, 2),
        "target_s": TARGET_S,
        "met": times[-1] <= TARGET_S and first_s <= TARGET_S * 5,
    }
    path = write_result("status_page", result)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot([s[0] for s in samples], [s[1] * 1000 for s in samples], marker=".", lw=1)
    ax.axhline(TARGET_S * 1000, color="r", ls="--", lw=1, label=f"target {TARGET_S:g} s")
    ax.set_xlabel("s"), ax.set_ylabel("answer time (ms)"), ax.legend()
    ax.set_title(
        f"Baton page data, {len(names)} apps, {written:,} status records behind: first {first_s:.2f} s, "
        f"p95 {q(0.95) * 1000:.0f} ms",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(RESULTS / "status_page.png", dpi=110)
    log(f"{json.dumps(result)}\n-> {path}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
