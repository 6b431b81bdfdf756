"""The web console: `GET /console` and its assets (agentos/api/static/console/).

Static files only, versioned with the server and read from the package: nothing is built at
install time and nothing is loaded from another origin (uPlot is vendored;
static/console/README.md says which version, from where, under which license). The page
carries no data and no key: its scripts sign in with an API key that stays in the tab's
`sessionStorage` and call the API with `Authorization: Bearer`, never a cookie, so a page of
another site cannot make the browser act with it (no CSRF), and the browser rules
(`agentos.api.browser`) refuse other origins as for every API route. Under the same strict
Content-Security-Policy as /docs: same-origin scripts, styles and requests, nothing inline.
"""

from __future__ import annotations

from agentos.api.static_assets import Asset, StaticPage

_JS = "text/javascript; charset=utf-8"
_CSS = "text/css; charset=utf-8"
PAGE = Asset("console/console.html", "text/html; charset=utf-8", gzipped=False)
# What /console/{asset} serves, by name: nothing else under static/ is reachable.
ASSETS = {
    name: Asset(f"console/{name}", _JS if name.endswith(".js") else _CSS, gzipped=False)
    for name in (
        "console.css",
        "uPlot.min.css",
        "uPlot.iife.min.js",
        "app.js",
        "api.js",
        "dom.js",
        "live.js",
        "sessions.js",
        "runs.js",
        "inbox.js",
        "playground.js",
        "usage.js",
        "schedules.js",
        "waterfall.js",
        "admin.js",
    )
}


# no-cache: the files are not content-hashed, and a server upgrade must not meet old scripts
routes = StaticPage(path="/console", page=PAGE, assets=ASSETS, assets_cache_control="no-cache").routes(
    page="The web console (docs/console.md); it signs in with an API key",
    assets="The console's scripts and styles (and vendored uPlot)",
    asset_types=("text/javascript", "text/css"),
)
