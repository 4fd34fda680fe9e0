"""An image of a slot's state as output records, kept current from one state read and every batch's
output since: what a reprocess's corrected output publishes, without reading the state again at the
cutover (spark_apps.runtime.sink.correction).

Why: the new active's correction read its whole state at its first batches past the fence, one task
beside them for 5-7.5 s of one core on this 2-core machine (100k keys), and the output's worst latency
and longest gap of the product-path reprocess fell there. The new generation reads its state anyway
before the cutover, for the invariant check (runtime.state.invariant_check), as the standby behind its
batches: that read also gives the image's base, and from then on the slot collects each batch's output
rows (its standby batches too, which otherwise go to the noop sink) and folds them in. At the cutover
the image is the state at the slot's last batch, in the records the correction publishes.

Only for apps that declare it (`OUTPUT_IS_STATE = True` in the module): every batch's output holds,
for each key whose state the batch changed, the record `state_output` gives for that key's new state,
and no key leaves the state without one (click_counts; not click_counts_ttl, whose idle users leave the
state silently). Anything that breaks the chain (a batch not folded in, a read at another batch, too
many keys, KEEP_S without a correction) drops the image; the correction then reads the state, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

Pairs = list[tuple[bytes | None, bytes | None]]

# A Python dict of the state's records: ~220 bytes a key (100k keys: ~22 MB). Past this, read instead.
MAX_KEYS = 500_000
# Collecting the standby's output costs it a conversion per batch: a staged reprocess that is not handed
# over within this long stops paying for it (its correction will read the state).
KEEP_S = 1800.0


def keeps_image(module) -> bool:
    """Whether the app module's output can keep a state image (see the module's docstring)."""
    return getattr(module, "OUTPUT_IS_STATE", False) is True and hasattr(module, "state_output")


class StateImage:
    """Armed after batch J (`arm`), it takes every later batch's output (`fold`, consecutive batches
    only) and, once the state after J is read (`base`), holds each key's newest record through batch
    `through`. Not thread-safe on its own: the sink folds under its batch lock, and `arm`, `base` and
    the correction's use of it run under the same lock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS, keep_s: float = KEEP_S):
        self.clock, self.max_keys, self.keep_s = clock, max_keys, keep_s
        self.after: int | None = None  # armed: the batch whose state the base is (None: not armed)
        self.through: int | None = None  # the last batch folded in (or `after`)
        self.request = ""  # what armed it (an invariant check's request)
        self._rows: dict | None = None  # the records, once the base is in
        self._updates: dict = {}  # records of batches after J folded before the base arrived
        self._armed_at = 0.0

    @property
    def collecting(self) -> bool:
        """Whether the sink must collect every batch's output for the image."""
        return self.after is not None

    @property
    def ready(self) -> bool:
        return self._rows is not None

    def arm(self, after: int, request: str = "") -> None:
        """Start an image of the state after batch `after`: the batches after it fold in from now."""
        self.drop()
        self.after = self.through = after
        self.request, self._armed_at = request, self.clock()

    def fold(self, batch_id: int, output: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        """Batch `batch_id`'s output records (all of them: emitted, skipped as emitted before, or the
        standby's). A batch out of sequence breaks the chain: the image is dropped."""
        if self.after is None or batch_id <= self.after:  # not collecting, or a batch the base holds
            return
        assert self.through is not None  # set with after
        if batch_id != self.through + 1:
            self.drop(f"batch {batch_id} follows batch {self.through}: a batch was not folded in")
            return
        (self._rows if self._rows is not None else self._updates).update(output)
        self.through = batch_id
        if len(self._rows if self._rows is not None else self._updates) > self.max_keys:
            self.drop(f"more than {self.max_keys} keys")

    def base(self, batch_id: int, rows: Pairs) -> bool:
        """The state's records after batch `batch_id`, read: the image is complete if that is the batch
        it was armed after. Returns whether it is."""
        if batch_id != self.after or self._rows is not None:
            self.drop(f"the state was read at batch {batch_id}, the image was armed after {self.after}")
            return False
        if len(rows) > self.max_keys:
            self.drop(f"{len(rows)} keys, more than {self.max_keys}")
            return False
        image = dict(rows)
        image.update(self._updates)  # newer: batches after J
        self._rows, self._updates = image, {}
        return True

    @property
    def keys(self) -> int:
        return len(self._rows or {})

    def left_after(self, newer: set) -> int:
        """How many records `records_less(newer)` would give."""
        rows = self._rows or {}
        return len(rows) - sum(1 for k in newer if k in rows)

    def records_less(self, newer: set) -> Pairs:
        """Every key's newest record, less the keys in `newer` (their record is downstream already)."""
        return [(k, v) for k, v in (self._rows or {}).items() if k not in newer]

    def expired(self) -> bool:
        return self.collecting and self.clock() - self._armed_at > self.keep_s

    def drop(self, why: str = "") -> None:
        if why and self.collecting:
            log.info(
                "state image (armed after batch %s) dropped: %s; a correction reads the state instead", self.after, why
            )
        self.after = self.through = None
        self._rows, self._updates, self.request = None, {}, ""
