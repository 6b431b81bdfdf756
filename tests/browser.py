"""Headless Chromium for the console's browser tests: Debian's `chromium`, driven by the Python
`playwright` package (never `playwright install`: its CDN is out of reach, and the system
browser is what CI installs, `.ci/run`).

Without chromium or playwright the tests are skipped with the reason, unless
TEST_BROWSER_REQUIRED=1 (CI sets it: there the browser is always installed, and a skip would
hide a failure), as TEST_POSTGRES_REQUIRED does for PostgreSQL (tests/postgres.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser

REQUIRED = os.environ.get("TEST_BROWSER_REQUIRED") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# No GPU, no sandbox (containers, root in CI), and none of the background calls that would
# flood a closed network with refused connections.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"{why}; TEST_BROWSER_REQUIRED=1 makes the browser tests required")
    pytest.skip(f"{why}; CI runs these with TEST_BROWSER_REQUIRED=1")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium with a fresh profile, closed afterwards."""
    if CHROMIUM is None:
        _missing("needs chromium (apt-get install chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _missing("needs the playwright package (pip install -e '.[test]')")
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            await browser.close()
