"""The interactive API page: `GET /docs` (Swagger UI on /openapi.json) and its assets.

The assets are vendored (agentos/api/static/README.md says which version, from where, and
under which license), so the page works offline and loads nothing from another origin. Its
Content-Security-Policy allows only same-origin scripts, styles and requests
(`agentos.api.static_assets`): the script that starts Swagger UI is a file of its own, never
inline.
"""

from __future__ import annotations

from agentos.api.static_assets import Asset, StaticPage

PAGE = Asset("docs.html", "text/html; charset=utf-8", gzipped=False)
# What /docs/{asset} serves, by name: nothing else under static/ is reachable.
ASSETS = {
    "swagger-ui-bundle.js": Asset("swagger-ui-bundle.js.gz", "text/javascript; charset=utf-8", gzipped=True),
    "swagger-ui.css": Asset("swagger-ui.css.gz", "text/css; charset=utf-8", gzipped=True),
    "swagger-ui-bundle.js.LICENSE.txt": Asset("swagger-ui-bundle.js.LICENSE.txt", "text/plain; charset=utf-8", False),
    "docs.js": Asset("docs.js", "text/javascript; charset=utf-8", gzipped=False),
}


routes = StaticPage(path="/docs", page=PAGE, assets=ASSETS, assets_cache_control="public, max-age=3600").routes(
    page="This page: the document, browsable, with requests you can try",
    assets="The page's scripts and styles (vendored Swagger UI)",
    asset_types=("text/javascript", "text/css", "text/plain"),
)
