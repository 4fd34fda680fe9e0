"""The cap: how far a slot's source may read (the follower writes it for its slot's next batch).

A pure decision, shared by the runtime (spark_apps.runtime.coordination.follower, which writes it to the cap file)
and the Airflow side (the health DAG and triggers judge a standby's lag against it), so it lives
here, importable without the Spark runtime.
"""

from __future__ import annotations

from baton.handoff import taken_over_at
from baton.records import CommitMarker, ControlRecord, Positions, Role, Slot, covers

# The least a first batch as the active may read on each partition (one the previous active's last
# batch left empty still makes progress).
FIRST_BATCH_FLOOR = 1000


def compute_cap(
    control: ControlRecord | None,
    slot: Slot,
    marker: CommitMarker | None,
    partitions: int,
    processed: Positions | None = None,
    first_batch: Positions | None = None,
) -> Positions | None:
    """The cap for `slot` given the desired state, the last committed marker and what this slot has
    processed (None = no cap). `first_batch`: this slot is about to run its first batch as the
    active, which reads at most this many records per partition beyond `processed`.

    The active reads freely up to the fence, if any. The standby never passes what the active has
    emitted, fence or not: if the active dies before reaching the fence, failover re-fences at the
    active's last emitted position, and a standby that had run ahead could not go back (lost output).
    A state check position (check_at) is a batch boundary, not a stop: each slot reads up to it, ends
    a batch exactly there (the state the check digests), and reads on once it has passed it.
    """
    fence = control.fence if control is not None else None
    role = control.role_of(slot) if control is not None else Role.STANDBY
    check = control.check_at if control is not None else None
    if role is Role.ACTIVE:
        cap = dict(fence) if fence is not None else None
        emitted = marker.emitted if marker is not None else {}
        if check is not None and not covers(emitted, check):
            cap = _lower(cap, check)
        reach = taken_over_at(control, slot)
        if reach is not None and processed is not None and not covers(processed, reach):
            return _lower(cap, reach)
        if first_batch is not None and processed is not None:
            cap = _lower(
                cap, {p: processed.get(p, 0) + max(first_batch.get(p, 0), FIRST_BATCH_FLOOR) for p in range(partitions)}
            )
        return cap
    emitted = marker.emitted if marker is not None else {}
    cap = {p: emitted.get(p, 0) for p in range(partitions)}
    if fence is not None:
        cap = _lower(cap, fence)
    if check is not None and not covers(processed or {}, check):
        cap = _lower(cap, check)
    return cap


def _lower(cap: Positions | None, bound: Positions) -> Positions:
    if cap is None:
        return dict(bound)
    return {p: min(o, bound.get(p, o)) for p, o in cap.items()}
