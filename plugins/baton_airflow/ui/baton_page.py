"""The Baton page in the Airflow UI: a FastAPI app under the API server (`/baton/`), registered with
an entry in the navigation by baton_airflow.ui.plugin (the package's airflow.plugins entry point).

Airflow does not authenticate a plugin's routes: every route here requires an Airflow user, through
the API server's own dependency (a session cookie from the UI's login, or a bearer token from
`/auth/token`). Status reads are bounded (baton.status_feed): one reader per API server process,
refreshed at most every REFRESH_S however many browsers poll.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.api_fastapi.core_api.security import requires_authenticated
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, Response

if TYPE_CHECKING:
    from baton.status_feed import StatusFeed

PAGE = Path(__file__).with_name("page.html")
REFRESH_S = 2.0
# A baton, passed between two hands (the nav's icon).
ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="currentColor" '
    'stroke-width="2" stroke-linecap="round"><path d="M4 20 20 4"/><circle cx="5" cy="19" r="2"/>'
    '<circle cx="19" cy="5" r="2"/></svg>'
)


def kafka_bootstrap() -> str:
    """Baton's broker, resolved as the hooks do (connection `baton_kafka` > BATON_KAFKA_BOOTSTRAP >
    default); the API server may have no connection access of a task's kind: then the environment."""
    try:
        from baton_airflow.hooks.kafka import BatonKafkaHook

        return BatonKafkaHook().bootstrap
    except Exception:
        from baton.settings import Settings

        return Settings.load().kafka_bootstrap


class Views:
    """The apps' views, rebuilt in the background at most every REFRESH_S while someone asks: a request
    answers with the newest views at once and never waits for a read of the broker (but the first)."""

    def __init__(self):
        self.feed: StatusFeed | None = None
        self.views: list = []
        self.body = b""  # the views as the page's JSON, encoded once a refresh (not once a request)
        self.read_at = 0.0
        self.error: Exception | None = None
        self.lock = threading.Lock()  # one refresh at a time
        self.refreshing = False

    def refresh(self) -> None:
        assert self.feed is not None  # made by get before its first refresh
        try:
            self.feed.refresh()
            views = self.feed.views()
            self.body = json.dumps(
                {"now_ms": int(time.time() * 1000), "apps": [v.to_json() for v in views]}, separators=(",", ":")
            ).encode()
            self.views, self.error = views, None
        except Exception as exc:  # the broker unreachable: said by the next answer
            self.error = exc
        finally:
            self.read_at = time.monotonic()
            self.refreshing = False

    def get(self) -> list:
        from baton.status_feed import StatusFeed

        with self.lock:
            if self.feed is None:
                self.feed = StatusFeed(kafka_bootstrap())
                self.refreshing = True
                self.refresh()
            elif not self.refreshing and time.monotonic() - self.read_at >= REFRESH_S:
                self.refreshing = True
                threading.Thread(target=self.refresh, name="baton-page-refresh", daemon=True).start()
            if self.error is not None:
                raise self.error
            return self.views


VIEWS = Views()
# No docs routes: FastAPI serves them outside the app-wide dependency, i.e. unauthenticated.
app = FastAPI(
    title="Baton", dependencies=[Depends(requires_authenticated())], docs_url=None, redoc_url=None, openapi_url=None
)


def _views():
    try:
        return VIEWS.get()
    except Exception as exc:  # the broker unreachable, a bad app definition: say which, as an error
        raise HTTPException(status_code=503, detail=f"Baton's status cannot be read: {exc}") from None


@app.get("/", response_class=HTMLResponse)
def page() -> HTMLResponse:
    return HTMLResponse(PAGE.read_text())


@app.get("/icon.svg")
def icon() -> Response:
    return Response(ICON, media_type="image/svg+xml")


@app.get("/api/apps")
def apps() -> Response:
    _views()
    return Response(VIEWS.body, media_type="application/json")


@app.get("/metrics")
def metrics() -> Response:
    from baton.metrics import CONTENT_TYPE, render

    return Response(render(_views()), media_type=CONTENT_TYPE)
