"""The plans a DAG run's steps hand each other, as typed data.

A step returns `plan.to_xcom()` (plain JSON: the Airflow UI shows it as it is, and no deserialisation
allow-list has to name Baton's classes) and the step that takes it reads it back with `Plan.of(xcom)`,
which checks every field and says which step's value was wrong. Extra keys are ignored, so a run
started before an upgrade of Baton that added a field still resumes; a missing required field is an
error naming it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar, Union

from baton.records import Positions, Slot

P = TypeVar("P", bound="Plan")


class PlanError(ValueError):
    """A step's input is not the plan it expects (the step before it failed, or returned something else)."""


def _is_positions(hint: Any) -> bool:
    return typing.get_origin(hint) is dict and typing.get_args(hint) == (int, int)


def _convert(value: Any, hint: Any, what: str) -> Any:
    if typing.get_origin(hint) in (Union, types.UnionType):  # X | None
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hint is Slot:
        return Slot(value)
    if _is_positions(hint):
        if not isinstance(value, Mapping):
            raise PlanError(f"{what}: expected an object of partition -> offset, got {type(value).__name__}")
        return {int(p): int(o) for p, o in value.items()}
    if hint is bool:
        return value.strip().lower() == "true" if isinstance(value, str) else bool(value)
    if hint in (int, float, str):
        return hint(value)
    if typing.get_origin(hint) is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise PlanError(f"{what}: expected an object, got {type(value).__name__}")
        return dict(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Slot):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    # field -> the names an earlier Baton wrote it under (read when the field's own is absent)
    aliases: ClassVar[dict[str, tuple[str, ...]]] = {}

    def to_xcom(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def of(cls: type[P], raw: Any) -> P:
        """`raw` (a step's XCom) as this plan; the plan itself is returned as it is."""
        if isinstance(raw, cls):
            return raw
        name = cls.__name__
        if not isinstance(raw, Mapping):
            raise PlanError(
                f"{name}: expected the previous step's plan (an object), got {raw!r:.200}; did that step succeed?"
            )
        hints = typing.get_type_hints(cls)
        values, missing = {}, []
        raw = {
            field: raw[old] for field, olds in cls.aliases.items() for old in olds if field not in raw and old in raw
        } | dict(raw)
        for f in dataclasses.fields(cls):
            if f.name not in raw:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    missing.append(f.name)
                continue
            try:
                values[f.name] = _convert(raw[f.name], hints[f.name], f"{name}.{f.name}")
            except (TypeError, ValueError) as exc:
                raise PlanError(f"{name}.{f.name} = {raw[f.name]!r:.100}: {exc}") from None
        if missing:
            raise PlanError(f"{name}: missing {', '.join(missing)} in {dict(raw)!r:.300}")
        return cls(**values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HandoffPlan(Plan):
    """A fence set (FenceOperator): the active stops emitting at `fence`, set at role `epoch`; `to`
    takes over from `from_slot` there."""

    fence: Positions
    epoch: int
    from_slot: Slot
    to: Slot

    aliases: ClassVar[dict[str, tuple[str, ...]]] = {"from_slot": ("from",)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cutover(Plan):
    """A cutover done (CutoverOperator): `active` emits from `fence` at `epoch`, since `at_ms`."""

    epoch: int
    active: Slot
    fence: Positions
    at_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlotRestart(Plan):
    """A slot (re)started by a step and running: launched at `since_ms` (its status records since then
    are this launch's), on `version` or `generation`; `left`: the state digest (JSON) its previous launch
    left at its stop, when a restore check follows; `launch`: where its process and log are."""

    slot: Slot
    since_ms: int
    launch: dict[str, Any]
    version: str = ""
    generation: int | None = None
    left: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateCheckPlan(Plan):
    """Both slots were asked for their state at `position`, `ahead_s` of input ahead when asked."""

    position: Positions
    active: Slot
    standby: Slot
    ahead_s: float = 2.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class VersionChange(Plan):
    """What a run that moves an app to `version` (its definition file `definition`) planned at its
    start: `active` serves at `epoch` on `from_version`, `standby` takes the new version first.
    `operation`: the hold a run keeps on the app (ControlRecord.operation), if it keeps one."""

    app: str
    version: str
    definition: str
    active: Slot
    standby: Slot
    epoch: int
    from_version: str
    operation: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpgradePlan(VersionChange):
    """A rolling upgrade's plan (PreflightOperator): states compared under `policy`."""

    policy: str
    preflight: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReprocessPlan(VersionChange):
    """A reprocess's plan (ValidateReprocessOperator): `standby` is rebuilt as `generation` (from
    `from_generation`) with fresh state from `start_offsets` (`start` says how they were chosen); `end`:
    "handover" (cut over with corrected output) or "standby" (stay staged)."""

    from_generation: int
    generation: int
    start: str
    start_offsets: Positions
    end: str = "handover"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConfirmPlan(Plan):
    """A confirmation's plan (ConfirmRequestOperator): `keep` runs `generation` (`version`, its
    definition file `definition`); `rebuild` moves from `drop_generation` (`drop_version`) onto it;
    archives are kept until `keep_until_ms`. `discards_reprocess`: the way back was taken."""

    app: str
    operation: str
    epoch: int
    keep: Slot
    rebuild: Slot
    generation: int
    version: str
    definition: str
    drop_generation: int
    drop_version: str
    discards_reprocess: bool
    keep_until_ms: int
