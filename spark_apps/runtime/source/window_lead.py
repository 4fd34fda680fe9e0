"""How long before a batch's look an active's fetch window opens (prefetch.py, "Fetching in a window").

The window's first fetch brings what was written since the batch before; on a fast host it is buffered
20-50 ms after the window opens, but on a busy one (the broker, the slots and a handoff's tasks sharing
two cores) it comes later, and a look that finds a partition's first answer not yet in takes none of that
partition's records written since the previous look: they wait a whole trigger (`look_misses` in
bench/throughput.py). So the lead starts at its base and grows by half whenever a look finds a partition
unanswered, or answered in the last quarter of the lead, up to its ceiling; each look whose window was
answered in time takes a little off again, back down to the base. The base is never undercut: on a fast
host nothing changes, and on the embedded broker, where every fetch in the window costs a pass over the
partition, the window is longer only while it has to be.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

GROWTH = 1.5
# Answered within the last quarter of the lead counts as tight: records still arriving, or decoding, then
# miss the look.
TIGHT_SHARE = 0.75
# Taken off per look answered in time: from the ceiling of a 1 s trigger (0.5 s) back to 0.25 s in ~12 looks.
SHRINK_S = 0.02


class WindowLead:
    def __init__(self, base_s: float, ceiling_s: float):
        self.base_s, self.ceiling_s = base_s, max(base_s, ceiling_s)
        self.s = base_s

    def note(self, answered: bool, delay_s: float, what: str = "") -> float:
        """A look's report of its window (prefetch.WindowReport); returns the lead for the next one."""
        before = self.s
        if not answered or delay_s > TIGHT_SHARE * self.s:
            self.s = min(self.ceiling_s, max(self.s, delay_s) * GROWTH)
            if self.s > before:
                log.info(
                    "%s: fetch window lead %.2f -> %.2f s (a partition's first answer %s %.2f s after the "
                    "window opened)",
                    what,
                    before,
                    self.s,
                    "came" if answered else "not in",
                    delay_s,
                )
        else:
            self.s = max(self.base_s, self.s - SHRINK_S)
        return self.s
