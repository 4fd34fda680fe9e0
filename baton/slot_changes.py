"""Which slots died, and which came up, while a watcher read the leases topic (the baton_watch DAG).

baton_health runs once a minute. A dead slot waited for that run, and so did the app's redundancy:
after a failover the old active was restarted as the standby only at the next run (55-80 s after a
kill -9 at the seed's rate), and the standby it came back as had that much more input to catch up
beside the active. The watcher reads every app's leases in log order and reports at once:

- died: a slot's newest lease, not released by a stop, names a process on this host that is gone
  (its pid free, or another process's: baton.leases.process_gone), or, for a slot on another host,
  has been silent for its ttl while the app's other slot renewed steadily (baton.leases.LeaseJudge:
  a stalled broker expires nobody). A slot on this host that is alive but silent (stopped, hung) is
  not reported: its standby takes over by its lease, and a stopped one that wakes rejoins as the
  standby by itself; baton_health's own run judges it;
- up: a launch of a slot reported RUNNING in its lease, having not while the watcher looked before (a
  restarted slot: baton_health then makes it desired RUNNING again, and only then may it take over by
  itself).

What was already so when the watcher began (a slot dead before it, a launch running before it) is not
reported: baton_health's runs see those. One exception: a launch that came up in the look-back's last
RECENT_UP_MS while the control plane still has its slot desired STARTING (a restart whose return no check
has seen yet: it may have come up between two watch runs) is reported up, else it would wait for the
minute. Pure: the caller reads the topic, the control records and asks the host.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from baton.leases import Lease, LeaseJudge, process_gone
from baton.records import Slot, SlotState

DIED, UP = "died", "up"
# A launch running for less than this when the watch begins may still await baton_health's check.
RECENT_UP_MS = 120_000


@dataclass(frozen=True)
class SlotChange:
    app: str
    slot: Slot
    kind: str  # DIED or UP
    launch: str
    why: str

    def message(self) -> str:
        return f"{self.app}/{self.slot.value} {self.kind}: {self.why}"

    def to_dict(self) -> dict[str, str]:
        return {"app": self.app, "slot": self.slot.value, "kind": self.kind, "launch": self.launch, "why": self.why}


class SlotChangeWatch:
    """Fed the leases topic in log order (observe), asked what changed (changes). `begin()` marks the
    end of the look-back: what holds then is the baseline, never reported."""

    def __init__(self, host: str, start_of: Callable[[int], int | None]):
        self.host, self.start_of = host, start_of
        self.newest: dict[tuple[str, Slot], Lease] = {}
        # The judge of a slot's silence counts the other slot's renewals (keyed by the slot judged).
        self.judges: dict[tuple[str, Slot], LeaseJudge] = {}
        self.running_launches: dict[tuple[str, Slot, str], int] = {}  # launches seen RUNNING: since (ts)
        self.reported: set[tuple[str, Slot, str, str]] = set()  # (app, slot, launch, kind): baseline or told

    def observe(self, lease: Lease) -> None:
        key = (lease.app, lease.slot)
        self.newest[key] = lease
        judged = (lease.app, lease.slot.other)
        judge = self.judges.get(judged)
        if judge is None or judge.launch != lease.launch:  # this slot's new launch counts afresh
            judge = LeaseJudge(lease.app, lease.slot, lease.launch, lease.interval_ms)
            if (silent := self.newest.get(judged)) is not None:
                judge.observe(silent)
            self.judges[judged] = judge
        judge.observe(lease)
        if (own := self.judges.get(key)) is not None:
            own.observe(lease)  # a renewal of the slot judged: its silence ends
        if lease.state is SlotState.RUNNING:
            self.running_launches.setdefault((lease.app, lease.slot, lease.launch), lease.ts_ms)

    def recently_up(self) -> set[tuple[str, Slot]]:
        """Slots whose current launch came up within RECENT_UP_MS of the newest renewal read."""
        newest = max((lease.ts_ms for lease in self.newest.values()), default=0)
        return {
            (app, slot)
            for (app, slot, launch), since in self.running_launches.items()
            if self._current(app, slot, launch) and since >= newest - RECENT_UP_MS
        }

    def begin(self, awaiting_check: Collection[tuple[str, Slot]] = frozenset()) -> None:
        """The look-back is read: every slot dead now, and every launch running now, is the baseline,
        except a running one whose slot is `awaiting_check` (desired STARTING in its control record)."""
        for change in self._current_deaths():
            self.reported.add((change.app, change.slot, change.launch, DIED))
        for app, slot, launch in self.running_launches:
            if not ((app, slot) in awaiting_check and self._current(app, slot, launch)):
                self.reported.add((app, slot, launch, UP))

    def _current(self, app: str, slot: Slot, launch: str) -> bool:
        lease = self.newest.get((app, slot))
        return lease is not None and lease.launch == launch

    def changes(self) -> list[SlotChange]:
        """What changed since the baseline and was not reported yet (each change once)."""
        found = list(self._current_deaths())
        for app, slot, launch in self.running_launches:
            if self._current(app, slot, launch):
                lease = self.newest[(app, slot)]
                found.append(
                    SlotChange(
                        app, slot, UP, launch, f"launch {launch[:8]} (pid {lease.pid} on {lease.host}) is running"
                    )
                )
        new = [c for c in found if (c.app, c.slot, c.launch, c.kind) not in self.reported]
        self.reported.update((c.app, c.slot, c.launch, c.kind) for c in new)
        return sorted(new, key=lambda c: (c.app, c.slot.value, c.kind))

    def _current_deaths(self):
        for (app, slot), lease in self.newest.items():
            if lease.released:
                continue
            if lease.host == self.host:
                if process_gone(lease, self.host, self.start_of):
                    yield SlotChange(
                        app, slot, DIED, lease.launch, f"its process (pid {lease.pid} on {lease.host}) is gone"
                    )
                continue
            judge = self.judges.get((app, slot))
            silent = judge.silent_ms() if judge is not None and judge.other is lease else 0
            if silent >= lease.ttl_ms:
                yield SlotChange(
                    app,
                    slot,
                    DIED,
                    lease.launch,
                    f"its lease was not renewed for {silent / 1000:.1f} s (ttl {lease.ttl_ms / 1000:g} s) "
                    f"while {slot.other.value} renewed",
                )
