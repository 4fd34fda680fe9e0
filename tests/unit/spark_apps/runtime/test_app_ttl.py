"""An app with a state TTL gets it in its transform, and its digests compare only the live state."""

from types import SimpleNamespace

import pytest

from baton.apps import StateSettings, StateTtl
from spark_apps.runtime.frame import app_transform
from spark_apps.runtime.state.digests import live_rows


def app(module: str, ttl: StateTtl | None):
    return SimpleNamespace(module=module, state=StateSettings(ttl=ttl))


def test_the_transform_gets_the_ttl_only_when_the_definition_has_one():
    calls = []
    mod = SimpleNamespace(transform=lambda events, **kw: calls.append(kw) or events)
    ttl = StateTtl(idle_ms=60_000)
    assert app_transform(mod, app("m", None), "events") == "events"
    app_transform(mod, app("m", ttl), "events")
    assert calls == [{}, {"ttl": ttl}]


def test_digests_of_a_ttl_app_use_its_live_state_and_an_app_without_one_is_refused():
    assert live_rows(app("spark_apps.apps.click_counts", None), "check") is None
    ttl = StateTtl(idle_ms=60_000)
    assert callable(live_rows(app("spark_apps.apps.click_counts_ttl", ttl), "check"))
    with pytest.raises(ValueError, match="no state_live"):
        live_rows(app("spark_apps.apps.click_counts", ttl), "check")


def test_a_stop_and_its_restore_compare_every_row_of_a_ttl_app_s_state():
    """The stop's figure is its query's row count, keys past their TTL but not yet removed included: a
    restore digest of the live rows only would tell a good restart it lost them."""
    ttl = StateTtl(idle_ms=60_000)
    for at in ("stop", "restore", "end"):
        assert live_rows(app("spark_apps.apps.click_counts_ttl", ttl), at) is None, at
