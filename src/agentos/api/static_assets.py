"""Files of the package served as they are (agentos/api/static/): the /docs page and the console.

Each page names the files it serves (`Asset`s by name: nothing else under static/ is
reachable) and its routes come from one `StaticPage`, always under the strict Content-Security-Policy:
same-origin scripts, styles and requests, nothing inline. Files are read once and kept; a file
stored gzip-compressed is sent as it is to a client that takes gzip, decompressed otherwise.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import NamedTuple

from aiohttp import web

from agentos.api.routes import tagged, text
from agentos.errors import NotFound

operation = tagged("server")

# Same-origin everything; `data:` images for the icons inlined in swagger-ui.css.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}


class Asset(NamedTuple):
    file: str  # under agentos/api/static/
    content_type: str
    gzipped: bool  # stored gzip-compressed


@dataclass(frozen=True, kw_only=True)
class StaticPage:
    """A page and its files: `GET {path}` answers the page, `GET {path}/{asset}` one of `assets`
    by name (a 404 for any other name). The page is never cached unrevalidated (a server upgrade
    must not meet an old page); the assets as `assets_cache_control` says."""

    path: str
    page: Asset
    assets: Mapping[str, Asset]
    assets_cache_control: str

    def routes(self, *, page: str, assets: str, asset_types: tuple[str, ...]) -> web.RouteTableDef:
        """The page's two routes, described by `page` and `assets` (their summaries) and the media
        types its assets are served as."""
        routes = web.RouteTableDef()

        @routes.get(self.path)
        @operation(page, open=True, answers={200: text("The page", "text/html")})
        async def serve_page(request: web.Request) -> web.Response:
            return await serve_asset(request, self.page, cache_control="no-cache")

        @routes.get(self.path + "/{asset}")
        @operation(
            assets,
            open=True,
            answers={200: text("The asset", *asset_types)},
            errors={404: "Not one of the page's assets"},
        )
        async def serve_named_asset(request: web.Request) -> web.Response:
            """Raises: NotFound: not one of `assets`."""
            asset = named_asset(request, self.assets, self.path)
            return await serve_asset(request, asset, cache_control=self.assets_cache_control)

        return routes


def named_asset(request: web.Request, assets: Mapping[str, Asset], under: str) -> Asset:
    """The asset the path's `{asset}` names, of those a page serves under the path `under`.

    Raises: NotFound: not one of `assets`.
    """
    name = request.match_info["asset"]
    asset = assets.get(name)
    if asset is None:
        raise NotFound(f"no asset {name!r} under {under}")
    return asset


async def serve_asset(request: web.Request, asset: Asset, *, cache_control: str) -> web.Response:
    """`asset` under the strict CSP; a gzipped one as it is stored, or decompressed for a client
    that does not take gzip."""
    headers = {**_HEADERS, "Content-Type": asset.content_type, "Cache-Control": cache_control}
    if not asset.gzipped:
        return web.Response(body=await _loaded(asset.file, False), headers=headers)
    headers["Vary"] = "Accept-Encoding"
    if accepts_gzip(request.headers.get("Accept-Encoding", "")):
        return web.Response(body=await _loaded(asset.file, False), headers={**headers, "Content-Encoding": "gzip"})
    return web.Response(body=await _loaded(asset.file, True), headers=headers)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an `Accept-Encoding` value takes gzip (named, or `*`, and not with `q=0`)."""
    for item in accept_encoding.split(","):
        coding, _, params = item.partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        q = params.strip().lower()
        if not q.startswith("q="):
            return True
        try:
            return float(q[2:]) > 0
        except ValueError:
            return False
    return False


# Each file as served (stored, or decompressed), read at its first request and kept: a server
# that never serves /docs never holds Swagger UI.
_LOADED: dict[tuple[str, bool], bytes] = {}


async def _loaded(file: str, decompressed: bool) -> bytes:
    """The file's bytes: read (and decompressed) in a thread the first time, never on the loop."""
    body = _LOADED.get((file, decompressed))
    if body is None:
        body = _LOADED[file, decompressed] = await asyncio.to_thread(_read, file, decompressed)
    return body


def _read(file: str, decompressed: bool) -> bytes:
    stored = resources.files("agentos.api").joinpath("static", *file.split("/")).read_bytes()
    return gzip.decompress(stored) if decompressed else stored
