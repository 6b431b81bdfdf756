"""GET /docs: the interactive API page. It loads only same-origin assets that the server
serves (vendored, so it works offline), under a Content-Security-Policy without inline scripts."""

from __future__ import annotations

import asyncio
import gzip
import re
import shutil
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import aiohttp
import pytest

from agentos.api.docs import ASSETS
from agentos.api.static_assets import accepts_gzip
from agentos.testing import RunningServer
from tests.api.helpers import OPENAPI, expect_error

TYPES = {".js": "text/javascript", ".css": "text/css", ".txt": "text/plain"}


class _Page(HTMLParser):
    """The URLs a page loads, and whatever it carries inline."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.inline += [name for name in attributes if name.startswith("on") or name == "style"]
        if tag == "style":
            self.inline.append("<style>")
        if tag == "script":
            self._in_script = True
            self.urls.append(attributes["src"] or "")
        if tag == "link" and attributes.get("rel") == "stylesheet":
            self.urls.append(attributes["href"] or "")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(f"<script>{data.strip()[:40]}")


async def test_the_page_loads_only_same_origin_assets_it_serves(server: RunningServer, http) -> None:
    page_url = f"{server.url}/docs"
    async with http.get(page_url) as r:
        assert r.status == 200 and r.content_type == "text/html"
        csp = r.headers["Content-Security-Policy"]
        html = await r.text()
    directives = dict(d.strip().partition(" ")[::2] for d in csp.split(";"))
    assert directives["default-src"] == "'none'" and directives["script-src"] == "'self'"
    assert "unsafe" not in csp and "http" not in csp
    parser = _Page()
    parser.feed(html)
    assert parser.inline == []
    assert len(parser.urls) == 3  # the stylesheet, Swagger UI, and our script that starts it
    origin = urlsplit(server.url)[:2]
    for url in (urljoin(page_url, u) for u in parser.urls):
        assert urlsplit(url)[:2] == origin, url
        async with http.get(url) as r:
            assert r.status == 200, url
            assert r.content_type == TYPES[url[url.rindex(".") :]], (url, r.content_type)
            assert "Content-Security-Policy" in r.headers
            assert len(await r.read()) > 100


async def test_the_page_reads_the_servers_own_document(server: RunningServer, http) -> None:
    async with http.get(f"{server.url}/docs/docs.js") as r:
        script = await r.text()
    assert 'new URL("openapi.json", document.baseURI)' in script  # /docs -> /openapi.json
    assert 'validatorUrl: "none"' in script  # no call to validator.swagger.io
    async with http.get(f"{server.url}/openapi.json") as r:
        assert r.status == 200 and (await r.json())["openapi"].startswith("3.1")


async def test_a_compressed_asset_is_sent_as_is_or_decompressed(server: RunningServer) -> None:
    url = f"{server.url}/docs/swagger-ui-bundle.js"
    async with aiohttp.ClientSession(auto_decompress=False) as raw:
        async with raw.get(url, headers={"Accept-Encoding": "gzip"}) as r:
            assert r.headers["Content-Encoding"] == "gzip" and r.headers["Vary"] == "Accept-Encoding"
            compressed = await r.read()
        async with raw.get(url, headers={"Accept-Encoding": "identity"}) as r:
            assert "Content-Encoding" not in r.headers
            plain = await r.read()
    assert gzip.decompress(compressed) == plain
    assert b"SwaggerUIBundle" in plain


@pytest.mark.parametrize("asset", ["nothing.js", "README.md", "docs.html", "..%2Fdocs.py", "swagger-ui.LICENSE"])
async def test_only_the_listed_assets_are_served(server: RunningServer, http, asset: str) -> None:
    assert asset not in ASSETS
    async with http.get(f"{server.url}/docs/{asset}") as r:
        await expect_error(r, 404, "not_found")


async def test_the_page_is_open_without_the_token(server_factory, mock, http) -> None:
    """A browser cannot send the bearer token to load the page; every route it describes still
    asks for it."""
    server: RunningServer = await server_factory(mock.url, **{"server.api_token": "s3cret"})
    for path in ("/docs", "/docs/docs.js", "/docs/swagger-ui.css", "/openapi.json"):
        async with http.get(server.url + path) as r:
            assert r.status == 200, path
    for path in ("/v1/sessions", "/v1/agents", "/metrics", "/docs/../v1/sessions", "/docs/%2E%2E/v1/sessions"):
        async with http.get(server.url + path) as r:
            assert r.status == 401, path


@pytest.mark.parametrize(
    ("value", "gzip_ok"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("br;q=1.0, gzip;q=0.5", True),
        ("*", True),
        ("", False),
        ("identity", False),
        ("gzip;q=0", False),
        ("gzip;q=0.0", False),
        ("deflate", False),
    ],
)
def test_accept_encoding(value: str, gzip_ok: bool) -> None:
    assert accepts_gzip(value) is gzip_ok


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
async def test_a_headless_browser_renders_every_route_with_no_csp_violation(server: RunningServer) -> None:
    """The page as a browser runs it: Swagger UI draws every documented path, and the console
    reports nothing (a CSP violation is reported there: 'Applying inline style violates ...')."""
    assert CHROMIUM is not None
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    process = await asyncio.create_subprocess_exec(
        CHROMIUM,
        *args,
        "--virtual-time-budget=10000",
        "--dump-dom",
        f"{server.url}/docs",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    dom, log = await asyncio.wait_for(process.communicate(), timeout=90)
    drawn = set(re.findall(r'data-path="([^"]+)"', dom.decode()))
    assert drawn == set(OPENAPI["paths"])
    console = [line for line in log.decode().splitlines() if ":CONSOLE" in line]
    assert console == []
