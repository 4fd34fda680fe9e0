"""A real headless browser for the Baton page's tests: Debian's Chromium driven by Playwright.

Chromium is installed by `make test` (scripts/ensure_chromium.sh); a missing one fails the test with
what to install, never skips it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def chromium_path() -> str:
    path = os.environ.get("BATON_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail(
            "no Chromium for the browser test: run `make test` (it installs Debian's chromium) or "
            "set BATON_CHROMIUM=/path/to/chromium"
        )
    return path


@contextmanager
def logged_in(base_url: str, user: str, password: str) -> Iterator:
    """A page of a browser logged in to Airflow at base_url, through its own login form."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(f"{base_url}/")
            page.fill("input[name=username]", user)
            page.fill("input[name=password]", password)
            page.keyboard.press("Enter")
            page.wait_for_url(f"{base_url}/", timeout=60_000)
            yield page
        finally:
            browser.close()
