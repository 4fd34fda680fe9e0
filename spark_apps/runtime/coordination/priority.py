"""The standby yields the CPU to the active: while a slot is the standby its processes run at a lower
scheduling priority (the app's `standby_nice` added to the nice value the slot was started with), and
at the priority it was started with while it is the active.

Why: on a small host the active's batches, the standby's, the broker and whatever a handoff starts
(a restarted slot catching up, a new generation replaying history, digests) share the cores. The
active's output carries the SLA; the standby only has to stay near it and catches up whenever the
active leaves CPU over. Measured on a saturated 2-core host at the seed's rate (bench/throughput.py
--standby-nice, 0 / 10 / 10 / 0): the active's p99 11.3 / 8.9 / 10.1 / 11.0 s, the CPU split the
same (the standby 0.64-0.65 cores in all four): where both slots' batches overlap, the active's goes
first. The standby's lag p50 3.8-3.9 s at 0, 4.1-4.3 s at 10. A standby whose batch runs long (a
third of the silence after which a slot counts as hung) gets its priority back until a batch ends
quickly again: a standby catching up a large backlog must not stop renewing its lease for yielding.

Linux keeps a nice value per thread, and a new thread or process inherits its creator's: a change
walks every thread of the slot's processes (the driver, its JVM, the Python workers under it), then
walks once more a second later, for a thread created while the first walk ran.

Raising the priority again (a standby taking over) needs CAP_SYS_NICE or an RLIMIT_NICE that allows
it. Without either, the slot never lowers its priority: a new active must not be stuck at the
standby's priority, so on such a host the slots share the CPU equally (logged once).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import time
from pathlib import Path

from baton.procfs import tree_threads
from baton.records import Role

log = logging.getLogger(__name__)

PROC = Path("/proc")
CAP_SYS_NICE = 23
REWALK_S = 1.0


def can_raise_priority(base: int, status: Path = PROC / "self" / "status") -> bool:
    """Whether this process may set a thread's nice value back to `base` after raising it."""
    if os.geteuid() == 0:
        return True
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:") and int(line.split()[1], 16) >> CAP_SYS_NICE & 1:
                return True
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    # RLIMIT_NICE r allows nice values down to 20 - r (unlimited: any).
    return soft == resource.RLIM_INFINITY or 20 - soft <= base


class SlotPriority:
    """Sets the nice value of this slot's processes from its role (`follow`, called from the harness's
    loop). `standby_nice` 0 leaves the priority alone."""

    def __init__(
        self,
        standby_nice: int,
        root: int | None = None,
        clock=time.monotonic,
        threads=tree_threads,
        may_raise=can_raise_priority,
        setpriority=os.setpriority,
    ):
        self.root = root if root is not None else os.getpid()
        self.base = os.getpriority(os.PRIO_PROCESS, 0)
        self.standby_nice = standby_nice
        self.clock, self.threads, self.setpriority = clock, threads, setpriority
        self.current = self.base
        self._rewalk_at: float | None = None
        self._role: Role | None = None
        self.enabled = standby_nice > 0 and self.base < 19
        if self.enabled and not may_raise(self.base):
            self.enabled = False
            log.info(
                "the standby keeps the active's CPU priority: this process may not raise a nice value "
                "again (no CAP_SYS_NICE, RLIMIT_NICE %s), so a standby taking over would stay behind",
                resource.getrlimit(resource.RLIMIT_NICE)[0],
            )

    def rebase(self, base: int) -> None:
        """A spare driver, started at a lower priority than its wrapper's while it held (baton.driver_wrapper),
        is now the slot's driver: every thread of it back to `base`, the priority its role follows from."""
        if base == self.base:
            return
        log.info("spare driver promoted: CPU priority back to nice %d (was %d)", base, self.base)
        self.base = self.current = base
        self.enabled = self.standby_nice > 0 and base < 19
        self._walk()
        self._rewalk_at = self.clock() + REWALK_S  # a thread created while the walk ran

    def target(self, role: Role, slow_batch: bool = False) -> int:
        return self.base if role is Role.ACTIVE or slow_batch else min(19, self.base + self.standby_nice)

    def follow(self, role: Role, slow_batch: bool = False) -> None:
        """`slow_batch`: the slot's current batch has run long (the harness's judgment): a standby
        then gets its priority back, so yielding can never make its batches look hung."""
        if not self.enabled:
            return
        nice = self.target(role, slow_batch)
        new_role, self._role = role is not self._role, role
        if nice != self.current:
            # A role change is worth a line; a long batch's flips (every ~10 s in a catch-up) are not.
            say = log.info if new_role else log.debug
            say(
                "CPU priority for the %s role: nice %d (was %d)%s",
                role.value,
                nice,
                self.current,
                ", its batch running long" if slow_batch and role is Role.STANDBY else "",
            )
            self.current = nice
            self._walk()
            self._rewalk_at = self.clock() + REWALK_S
        elif self._rewalk_at is not None and self.clock() >= self._rewalk_at:
            self._rewalk_at = None
            self._walk()

    def _walk(self) -> None:
        for tid in self.threads(self.root):
            try:
                self.setpriority(os.PRIO_PROCESS, tid, self.current)
            except OSError as exc:
                if exc.errno == errno.ESRCH:  # the thread ended meanwhile
                    continue
                self.enabled = False
                log.warning(
                    "CPU priority left as it is: setting nice %d on thread %d failed (%s)", self.current, tid, exc
                )
                return
