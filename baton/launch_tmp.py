"""Each launch's own temporary directory for its driver JVM, removed once the launch is over.

A slot's JVM keeps its scratch files under java.io.tmpdir: Spark's block manager and scratch dirs, the
state store's RocksDB working copies (a copy of the slot's state) and the native libraries RocksDB and
LZ4 unpack at every start (14 MB for RocksDB's). It deletes them in shutdown hooks, which a kill -9,
an OOM kill or a host's crash never runs, so on /tmp every failover by kill left them behind: after a
day of this project's test runs /tmp held 405 MB of them, 18 RocksDB libraries among them. A platform
that keeps apps up through crashes must not fill its host's /tmp with every crash.

So each launch gets `<slot dir>/tmp/<launch id>`, and each driver process its wrapper starts in it
(the first, a restart, a spare: baton.driver_wrapper) a directory `<n>` there, as its JVM's java.io.tmpdir, and so as Spark's
local dir unless the launch's conf sets `spark.local.dir` (spark_apps.runtime.spark.driver_java_options).
The wrapper removes a driver's directory when that driver ends, and the launch's when the launch ends; what a launch killed with its
wrapper (its whole process group) leaves, the launcher removes before it spawns the slot's next launch
and when it stops the slot: every directory there that is not a live launch's.

A JVM that crashes writes its fatal error log (hs_err_pid<pid>.log) into its working directory, the
checkout for a local launch: a launch's goes beside its slot's driver.log instead (crash_log_of), where
whoever reads why the slot died looks, and which no launch's end removes.

Only the JVM's temp dir moves. Python keeps the host's, where the locks every process of the host shares
live (baton.kafka.txn_window).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

TMP = "tmp"


def launch_tmp_dir(slot_dir: Path, launch_id: str) -> Path:
    return Path(slot_dir) / TMP / launch_id


def crash_log_of(driver_tmp: Path) -> Path:
    """Where the JVM whose temporary directory is `driver_tmp` writes a fatal error log: its slot's
    directory (`%p` is the JVM's pid). The directory is the launch's, or one driver's inside it
    (`<slot dir>/tmp/<launch id>/<n>`: each driver its wrapper starts has its own, baton.driver_wrapper)."""
    path = Path(driver_tmp)
    slot_dir = next((p.parent for p in path.parents if p.name == TMP), path.parent.parent)
    return slot_dir / "hs_err_pid%p.log"


def remove_gone(slot_dir: Path, live_launch_ids: Iterable[str]) -> list[str]:
    """Remove the temporary directory of every launch of the slot not in live_launch_ids; their ids."""
    root = Path(slot_dir) / TMP
    if not root.is_dir():
        return []
    live = set(live_launch_ids)
    gone = sorted(d.name for d in root.iterdir() if d.name not in live)
    for name in gone:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if gone:
        log.info("%s: removed the temporary files of ended launches %s", slot_dir, ", ".join(gone))
    return gone
