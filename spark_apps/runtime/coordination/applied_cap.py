"""The source's word that it plans under the cap the follower last wrote: how a handoff knows the active
stays at its fence, not only that it stands there.

Why: a handoff's gate read the active's commit marker at the fence F and cut over. An active idle at
the input's end stood at F before it had read the fence (a fence planned in a pause lies at the end),
and input that arrived before the fence reached its source was planned past F and emitted at the old
epoch after the cutover: the new active then met output past the fence it took over at (a
ReplayConflict, seen in CI in the rolled-back upgrade test). A marker says where the active stands,
not that it stays there.

What the word means: the source read this very cap file (each write carries a number, new whenever
what the write says changes: follower.Follower._publish_cap) when it last planned a batch. Spark plans a micro-batch only after the one
before it has committed, so when the source reads a cap nothing it planned under an older cap is still
in flight, and every later plan reads this cap or a newer one. A slot whose follower wrote a fence's
cap, and whose source answers with that same text, emits nothing past the fence at its epoch: the
marker read after that answer is where it stays (Follower.held_fence, baton.handoff.FenceGate).

The source (its own process) writes `<cap file>.applied` atomically when the text it plans under
changes and removes it when it plans with no cap; the harness reads it when it publishes the slot's
status. No word (a write that failed, a source that has not planned yet) is no hold: the gate waits.
"""

from __future__ import annotations

import os
from pathlib import Path

SUFFIX = ".applied"
# The cap file's key that numbers the follower's writes ("<pid>.<n>": unique across the slot's processes).
CAP_WRITE_KEY = "write"
_UNKNOWN = "\0"  # never a cap file's text: the first note always writes (a stale word is replaced)


def applied_path(cap_file: str | Path) -> Path:
    return Path(f"{cap_file}{SUFFIX}")


class AppliedCap:
    """The source's side: `note` the cap text each plan reads. Plain fields: the reader is pickled."""

    def __init__(self, cap_file: str):
        self.cap_file = cap_file
        self.last: str | None = _UNKNOWN

    def note(self, text: str | None) -> None:
        if text == self.last:
            return
        path = applied_path(self.cap_file)
        try:
            if text is None:
                path.unlink(missing_ok=True)
            else:
                tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
                tmp.write_text(text)
                os.replace(tmp, path)
        except OSError:
            return  # the slot's directory went away (a stop): no word, and the next plan tries again
        self.last = text


def read_applied(cap_file: str | Path) -> str | None:
    """The cap text the source last planned under (None: no cap, or no word yet)."""
    try:
        return applied_path(cap_file).read_text()
    except OSError:
        return None
