"""The Baton page in a real browser (Debian's Chromium) as wide as Airflow's UI leaves it beside its
navigation, fed a recorded answer of its own API: what a slot says went wrong is on screen, whole.

The page is served as the plugin serves it (its page.html); only its data request is answered here, so
the layout is checked without a platform. The page with the whole platform behind it is the e2e test
of a cutover from the page (tests/e2e/test_lifecycle_and_health.py)."""

from __future__ import annotations

import json
from pathlib import Path

from baton_airflow.ui import baton_page
from spark_apps.runtime.source.input_check import decide
from tests.support.browser import chromium_path

BASE = "http://baton.test/baton/"
# Airflow 3's navigation takes ~80 px of a 1,100 px window: the page's iframe gets the rest.
VIEWPORT = {"width": 1020, "height": 900}


def slot(name: str, role: str, **changes) -> dict:
    view = {
        "slot": name,
        "role": role,
        "desired": "running",
        "state": "running",
        "version": "v1",
        "generation": 0,
        "epoch_seen": 1,
        "reason": "",
        "restarts": 0,
        "batch_id": 68,
        "lag_records": 4030,
        "lag_s": 2.04,
        "input_rate": 20089.2,
        "processing_rate": 55325.5,
        "batch_ms": 414,
        "latency_ms": 1722,
        "latency_newest_ms": 432,
        "state_rows": 100000,
        "state_bytes": 2097410,
        "state_memory_bytes": 89355320,
        "dead_letters": 165200,
        "report_age_s": 1.5,
        "lease_age_s": 0.9,
        "error": "",
        "host": "vm",
        "pid": 29155,
    }
    return {**view, **changes}


def answer(error: str, now_ms: int = 1_796_152_700_000) -> dict:
    return {
        "now_ms": now_ms,
        "apps": [
            {
                "app": "click_counts",
                "registered": True,
                "epoch": 1,
                "active": "blue",
                "revision": 4,
                "fence": None,
                "operation": "",
                "handoffs": [],
                "points": [],
                "slots": [
                    slot(
                        "blue",
                        "active",
                        state="failed",
                        desired="failed",
                        error=error,
                        reason="crash loop: 2 restarts in 600 s",
                    ),
                    slot("green", "standby", reason="restarted by baton_health after its death"),
                ],
                "events": [
                    {
                        "ts_ms": now_ms - 60_000,
                        "revision": 1,
                        "kind": "slot",
                        "text": "registered at epoch 1, blue active",
                        "writer": "baton_lifecycle:manual__1",
                        "dag_id": "baton_lifecycle",
                        "run_id": "manual__1",
                        "duration_ms": None,
                    }
                ],
            }
        ],
    }


def test_a_slot_s_whole_error_is_on_screen_and_the_page_never_scrolls_sideways():
    from playwright.sync_api import sync_playwright

    # What a slot reports when its input lost what its checkpoint stands on: long, the way out at its end.
    error = decide("clicks", {0: 25_818, 1: 26_006}, {0: 0, 1: 0}, {0: 0, 1: 0}, "fail").reason
    assert len(error) > 300 and error.rstrip(".").endswith("what was lost skipped)")
    page_html = Path(baton_page.PAGE).read_text()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.route(BASE, lambda route: route.fulfill(status=200, content_type="text/html", body=page_html))
            page.route(
                f"{BASE}api/apps",
                lambda route: route.fulfill(
                    status=200, content_type="application/json", body=json.dumps(answer(error))
                ),
            )
            page.goto(BASE)
            card = page.locator("[data-app=click_counts]")
            card.locator("table.slots tr.active").wait_for(timeout=30_000)

            # The page itself fits the width: a wide table scrolls inside its card.
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), page.evaluate(
                "[document.documentElement.scrollWidth, window.innerWidth]"
            )
            # The failed slot's error: all of its first line, inside the card's width, the way out included.
            why = card.locator(".reason[data-slot=blue]")
            assert "Way out: reprocess into a new generation" in why.inner_text()
            assert why.inner_text().rstrip(".").endswith("what was lost skipped)")
            assert why.get_attribute("title") == error
            box, frame = why.bounding_box(), card.bounding_box()
            assert box["x"] >= frame["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"], (box, frame)
            assert box["y"] + box["height"] <= VIEWPORT["height"], box  # on the first screen, no scrolling
            # A slot without an error shows why its desired state was set; the table keeps its columns.
            assert "restarted by baton_health after its death" in card.locator(".reason[data-slot=green]").inner_text()
            head = card.locator("table.slots tr").first.inner_text().split("\t")
            assert head[:3] == ["slot", "role", "desired / reported"] and head[-1] == "restarts", head
            blue = card.locator("table.slots tr.active").inner_text().split("\t")
            assert blue[:4] == ["blue", "active", "failed / failed", "v1 g0 e1"], blue
            # In a 1,280 px window (Airflow's navigation beside the page), the whole table is on screen:
            # no column cut off behind the card's scroll bar.
            page.set_viewport_size({"width": 1200, "height": 900})
            table, holder = card.locator("table.slots"), card.locator(".scroll")
            fits = table.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth")
            assert fits, (table.evaluate("t => t.scrollWidth"), holder.evaluate("h => h.clientWidth"))
        finally:
            browser.close()
