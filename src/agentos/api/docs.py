"""The interactive API page: `GET /docs` (Swagger UI on /openapi.json) and its assets.

The assets are vendored (agentos/api/static/README.md says which version, from where, and
under which license), so the page works offline and loads nothing from another origin. Its
Content-Security-Policy allows only same-origin scripts, styles and requests: the script that
starts Swagger UI is a file of its own, never inline.
"""

from __future__ import annotations

import gzip
from functools import cache
from importlib import resources
from typing import NamedTuple

from aiohttp import web

from agentos.errors import NotFound

routes = web.RouteTableDef()

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


PAGE = Asset("docs.html", "text/html; charset=utf-8", gzipped=False)
# What /docs/{asset} serves, by name: nothing else under static/ is reachable.
ASSETS = {
    "swagger-ui-bundle.js": Asset("swagger-ui-bundle.js.gz", "text/javascript; charset=utf-8", gzipped=True),
    "swagger-ui.css": Asset("swagger-ui.css.gz", "text/css; charset=utf-8", gzipped=True),
    "swagger-ui-bundle.js.LICENSE.txt": Asset("swagger-ui-bundle.js.LICENSE.txt", "text/plain; charset=utf-8", False),
    "docs.js": Asset("docs.js", "text/javascript; charset=utf-8", gzipped=False),
}


@routes.get("/docs")
async def docs_page(request: web.Request) -> web.Response:
    return serve_asset(request, PAGE, cache_control="no-cache")


@routes.get("/docs/{asset}")
async def docs_asset(request: web.Request) -> web.Response:
    """Raises: NotFound: not one of `ASSETS`."""
    name = request.match_info["asset"]
    asset = ASSETS.get(name)
    if asset is None:
        raise NotFound(f"no asset {name!r} under /docs")
    return serve_asset(request, asset, cache_control="public, max-age=3600")


def serve_asset(request: web.Request, asset: Asset, *, cache_control: str) -> web.Response:
    """`asset` under the strict CSP; a gzipped one as it is stored, or decompressed for a client
    that does not take gzip."""
    headers = {**_HEADERS, "Content-Type": asset.content_type, "Cache-Control": cache_control}
    if not asset.gzipped:
        return web.Response(body=_read(asset.file), headers=headers)
    headers["Vary"] = "Accept-Encoding"
    if accepts_gzip(request.headers.get("Accept-Encoding", "")):
        return web.Response(body=_read(asset.file), headers={**headers, "Content-Encoding": "gzip"})
    return web.Response(body=_decompressed(asset.file), headers=headers)


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


@cache
def _read(file: str) -> bytes:
    return resources.files("agentos.api").joinpath("static", *file.split("/")).read_bytes()


@cache
def _decompressed(file: str) -> bytes:
    return gzip.decompress(_read(file))
