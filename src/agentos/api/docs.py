"""The interactive API page: `GET /docs` (Swagger UI on /openapi.json) and its assets.

The assets are vendored (agentos/api/static/README.md says which version, from where, and
under which license), so the page works offline and loads nothing from another origin. Its
Content-Security-Policy allows only same-origin scripts, styles and requests
(`agentos.api.static_assets`): the script that starts Swagger UI is a file of its own, never
inline.
"""

from __future__ import annotations

from aiohttp import web

from agentos.api.routes import tagged, text
from agentos.api.static_assets import Asset, named_asset, serve_asset

routes = web.RouteTableDef()
operation = tagged("server")

PAGE = Asset("docs.html", "text/html; charset=utf-8", gzipped=False)
# What /docs/{asset} serves, by name: nothing else under static/ is reachable.
ASSETS = {
    "swagger-ui-bundle.js": Asset("swagger-ui-bundle.js.gz", "text/javascript; charset=utf-8", gzipped=True),
    "swagger-ui.css": Asset("swagger-ui.css.gz", "text/css; charset=utf-8", gzipped=True),
    "swagger-ui-bundle.js.LICENSE.txt": Asset("swagger-ui-bundle.js.LICENSE.txt", "text/plain; charset=utf-8", False),
    "docs.js": Asset("docs.js", "text/javascript; charset=utf-8", gzipped=False),
}


@routes.get("/docs")
@operation(
    "This page: the document, browsable, with requests you can try",
    open=True,
    answers={200: text("The page", "text/html")},
)
async def docs_page(request: web.Request) -> web.Response:
    return serve_asset(request, PAGE, cache_control="no-cache")


@routes.get("/docs/{asset}")
@operation(
    "The page's scripts and styles (vendored Swagger UI)",
    open=True,
    answers={200: text("The asset", "text/javascript", "text/css", "text/plain")},
    errors={404: "Not one of the page's assets"},
)
async def docs_asset(request: web.Request) -> web.Response:
    """Raises: NotFound: not one of `ASSETS`."""
    return serve_asset(request, named_asset(request, ASSETS, "/docs"), cache_control="public, max-age=3600")
