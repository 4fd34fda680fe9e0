"""One transactional.id's critical moments, one process at a time on this host.

Writers of an app's control log share one transactional.id in every process (baton.kafka.control_log):
a writer that initialises fences the others, which is what makes the log a compare-and-set. On Tansu
(the embedded broker) an initialisation that lands while another writer of the id is inside its
commit can leave that commit's transaction open for good, with no coordinator state behind it: no
later init, commit or abort of the id ends it, and every read_committed reader of the partition (every
app's control reads) stops before it. Reproduced with two fresh processes moving their slot at the same
moment, as the mapped start or stop of both slots does: the control topic stalled at round 18 of 60,
and in CI every later lifecycle step failed for the rest of the session.

So the moments that touch the id's transaction state at the broker, initialising and committing (or
aborting), are serialised per id across the processes of this host with an flock: another writer's
init then lands before or after a commit, never inside it, and the fencing stays what it was. A holder
that stops (SIGSTOP, a debugger) must not stop the others: a wait ends after WAIT_S and goes on without
the lock (the broker's fencing keeps the log correct; only Tansu's hazard comes back for that write).
Writers on other hosts are not serialised: a deployment over several hosts runs Apache Kafka, whose
coordinator aborts the open transaction of a fenced writer.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

# Far above an init or a commit (milliseconds, ~1 s on a busy host), well below a control write's 30 s
# timeout. (A commit that hangs holds the lock to its own 10 s timeout: the others go on after this.)
WAIT_S = 5.0
POLL_S = 0.005


def lock_path(bootstrap: str, transactional_id: str, root: Path | None = None) -> Path:
    """The lock file of one transactional.id on one cluster (named by a hash: ids may hold any character)."""
    digest = hashlib.sha256(f"{bootstrap}\0{transactional_id}".encode()).hexdigest()[:24]
    return (root or Path(tempfile.gettempdir()) / "baton-txn-locks") / f"{digest}.lock"


@contextmanager
def txn_window(
    bootstrap: str, transactional_id: str, wait_s: float = WAIT_S, root: Path | None = None
) -> Iterator[bool]:
    """Hold the id's lock for the block (yields True), or go on without it after `wait_s` (False)."""
    path = lock_path(bootstrap, transactional_id, root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:  # e.g. a read-only temp dir: the write goes on as before
        log.warning("%s: no lock file %s (%s): its transaction moments are not serialised", transactional_id, path, exc)
        yield False
        return
    try:
        held, deadline = False, time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
        if not held:
            log.warning(
                "%s: another process held its transaction lock for %.0f s (stopped?): going on without it",
                transactional_id,
                wait_s,
            )
        yield held
    finally:
        os.close(fd)  # releases the flock
