"""The slots' files on the host they run on: checkpoints, the copies and notes kept beside them, their
size on disk, the drivers' logs. Operators go through this hook for that file I/O, as they go through
BatonKafkaHook for Kafka and BatonSparkHook for the slots' processes.

The state directory is the Spark hook's (its argument, else baton.settings: BATON_HOME); `of(spark)`
gives the hook for the slots that Spark hook launches.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from airflow.sdk import BaseHook

from baton.procfs import tail
from baton.records import ControlRecord, Slot

# Beside a slot's checkpoint: a copy of it as the slot's previous version left it, taken while the slot
# was stopped for an upgrade (the way back if the new version is refused before it took the role).
WAY_BACK = "way-back"
# Beside an archived generation's checkpoint (a reprocess keeps it): what it holds, and why.
ARCHIVE_NOTE = "ARCHIVED.json"


class BatonSlotStateHook(BaseHook):
    hook_name = "Baton slot state"

    def __init__(self, state_dir: Path):
        super().__init__()
        self.state_dir = Path(state_dir)

    @classmethod
    def of(cls, spark) -> BatonSlotStateHook:
        """The hook for the state directory of a BatonSparkHook's slots."""
        return cls(spark.state_dir)

    def checkpoint(self, app: str, slot: Slot, generation: int) -> Path:
        from baton.generations import slot_paths

        return slot_paths(self.state_dir, app, slot, generation).checkpoint

    # --- the way back of an upgrade -------------------------------------------------------------
    @staticmethod
    def keep_way_back(checkpoint: Path) -> Path | None:
        """Copy the stopped slot's checkpoint beside it (replacing an older copy); None: no checkpoint yet."""
        if not checkpoint.is_dir():
            return None
        copy = checkpoint.parent / WAY_BACK
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(checkpoint, copy)
        return copy

    @staticmethod
    def has_way_back(checkpoint: Path) -> bool:
        return (checkpoint.parent / WAY_BACK).is_dir()

    @staticmethod
    def drop_way_back(checkpoint: Path) -> None:
        """The copy keep_way_back made is of no more use (the new version took the role and settled)."""
        shutil.rmtree(checkpoint.parent / WAY_BACK, ignore_errors=True)

    @staticmethod
    def take_way_back(checkpoint: Path) -> bool:
        """Put the copy keep_way_back made in the checkpoint's place (the slot is stopped); False: there
        is none. A retry after the move finds the checkpoint in place and no copy: done already."""
        copy = checkpoint.parent / WAY_BACK
        if not copy.is_dir():
            return False
        shutil.rmtree(checkpoint, ignore_errors=True)
        copy.rename(checkpoint)
        return True

    # --- a reprocess's generations -------------------------------------------------------------
    def archive_note(self, app: str, slot: Slot, generation: int, version: str, why: str) -> None:
        """Keep a generation's checkpoint (nothing is deleted) with a note saying what it holds."""
        root = self.checkpoint(app, slot, generation).parent
        if root.is_dir():
            (root / ARCHIVE_NOTE).write_text(
                json.dumps(
                    {
                        "app": app,
                        "slot": slot.value,
                        "generation": generation,
                        "version": version,
                        "why": why,
                        "archived_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    },
                    indent=1,
                )
            )

    def archive_generation(
        self, app: str, slot: Slot, generation: int, why: str, keep_until_ms: int, now_ms: int, version: str = ""
    ) -> Path | None:
        """Move a slot's generation into the app's archive with its note (baton.generations)."""
        from baton.generations import archive_generation

        return archive_generation(self.state_dir, app, slot, generation, why, keep_until_ms, now_ms, version=version)

    def archive_unused(self, rec: ControlRecord, why: str, keep_until_ms: int, now_ms: int) -> list[Path]:
        """Archive every generation of the app that no slot runs (baton.generations)."""
        from baton.generations import archive_unused

        return archive_unused(self.state_dir, rec, why, keep_until_ms, now_ms)

    def purge_expired(self, app: str, now_ms: int) -> list[Path]:
        """Delete the app's archives past their retention (baton.generations)."""
        from baton.generations import purge_expired

        return purge_expired(self.state_dir, app, now_ms)

    @staticmethod
    def copy_checkpoint(source: Path, target: Path) -> int | None:
        """Copy a checkpoint to its last committed batch, cut after it (never ahead of what the active
        emitted: baton.checkpoints); the batch, or None if there was none."""
        from baton.checkpoints import copy_checkpoint, truncate_after

        batch = copy_checkpoint(source, target)
        if batch is not None:
            truncate_after(target, batch)
        return batch

    # --- the health check ---------------------------------------------------------------------
    def disk_bytes(self, app: str, slot: Slot) -> int | None:
        """The size on disk of everything of the slot's (every generation); None if it has nothing."""
        return disk_bytes(self.state_dir / "slots" / app / slot.value)

    @staticmethod
    def log_tail(path: Path | str, lines: int = 20) -> str:
        """The last lines of a driver's log, or "(no log)"."""
        return tail(Path(path), lines)


def disk_bytes(root: Path) -> int | None:
    if not root.exists():
        return None
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass  # a checkpoint file removed by Spark's maintenance while we walk
    return total
