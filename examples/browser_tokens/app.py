"""The example's back end: it signs its users in against an identity provider (idp.py), holds the
Agent OS tenant key (the page never sees it), and hands the signed-in user's page a browser
token for that user's session. The page (static/index.html) then streams turns straight from
Agent OS over a WebSocket: no proxy in between.

Run it (README.md): `python app.py --agentos http://127.0.0.1:8080` with `AGENTOS_KEY` set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import jwt
from aiohttp import web
from idp import Client, Provider, identity_provider

STATIC = Path(__file__).resolve().parent / "static"
SIGN_IN = "app_session"  # this app's own session cookie (not Agent OS's)


@dataclass
class Config:
    url: str  # this back end's own origin, e.g. http://127.0.0.1:8000
    agentos_url: str
    agentos_key: str  # a tenant key with sessions:read and sessions:write; never sent to a browser
    issuer: str  # the identity provider
    client: Client


@dataclass
class State:
    """In memory, as an example may: who is signed in, the logins under way, each user's session."""

    signed_in: dict[str, str] = field(default_factory=dict)  # app session cookie -> user
    logins: dict[str, str] = field(default_factory=dict)  # state -> nonce
    sessions: dict[str, str] = field(default_factory=dict)  # user -> Agent OS session id


CONFIG: web.AppKey[Config] = web.AppKey("config", Config)
STATE: web.AppKey[State] = web.AppKey("state", State)
HTTP: web.AppKey[aiohttp.ClientSession] = web.AppKey("http", aiohttp.ClientSession)
routes = web.RouteTableDef()


def user_of(request: web.Request) -> str | None:
    return request.app[STATE].signed_in.get(request.cookies.get(SIGN_IN, ""))


@routes.get("/")
async def index(request: web.Request) -> web.StreamResponse:
    if user_of(request) is None:
        raise web.HTTPFound("/login")
    return web.FileResponse(STATIC / "index.html")


@routes.get("/page.js")
async def script(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "page.js")


@routes.get("/login")
async def login(request: web.Request) -> web.Response:
    """Send the browser to the identity provider (the authorization code flow)."""
    config, state = request.app[CONFIG], secrets.token_urlsafe(16)
    request.app[STATE].logins[state] = nonce = secrets.token_urlsafe(16)
    query = {"response_type": "code", "scope": "openid", "client_id": config.client.client_id}
    query |= {"redirect_uri": config.client.redirect_uri, "state": state, "nonce": nonce}
    raise web.HTTPFound(f"{config.issuer}/authorize?{urlencode(query)}")


@routes.get("/callback")
async def callback(request: web.Request) -> web.Response:
    """Trade the code for an id_token, and verify it here: the back end decides who the user is."""
    config, app_state = request.app[CONFIG], request.app[STATE]
    nonce = app_state.logins.pop(request.query.get("state", ""), None)
    if nonce is None:
        raise web.HTTPBadRequest(text="unknown login (state)")
    form = {"grant_type": "authorization_code", "code": request.query.get("code", "")}
    form |= {"client_id": config.client.client_id, "client_secret": config.client.secret}
    http = request.app[HTTP]
    async with http.post(f"{config.issuer}/token", data=form) as r:
        if r.status != 200:
            raise web.HTTPUnauthorized(text="the identity provider refused the code")
        id_token = (await r.json())["id_token"]
    user = await verified_user(http, config, id_token, nonce)
    cookie = secrets.token_urlsafe(24)
    app_state.signed_in[cookie] = user
    response = web.HTTPFound("/")
    # Lax: the redirect back from the provider is a top-level navigation that must carry it
    response.set_cookie(SIGN_IN, cookie, httponly=True, samesite="Lax", path="/")
    raise response


async def verified_user(http: aiohttp.ClientSession, config: Config, id_token: str, nonce: str) -> str:
    """The `sub` of an id_token signed by the provider's key for this client, else 401."""
    async with http.get(f"{config.issuer}/jwks.json") as r:
        keys = {k["kid"]: k for k in (await r.json())["keys"]}
    try:
        jwk = keys[jwt.get_unverified_header(id_token)["kid"]]
        claims = jwt.decode(
            id_token, jwt.PyJWK(jwk).key, algorithms=["ES256"], audience=config.client.client_id, issuer=config.issuer
        )
    except (KeyError, jwt.InvalidTokenError) as exc:
        raise web.HTTPUnauthorized(text=f"bad id_token: {exc}") from None
    if claims.get("nonce") != nonce:
        raise web.HTTPUnauthorized(text="bad id_token: nonce")
    return str(claims["sub"])


@routes.post("/api/browser-token")
async def browser_token(request: web.Request) -> web.Response:
    """A browser token for the signed-in user's session (made on first use). JSON only: a page
    of another site cannot send `application/json` here without a CORS preflight we never pass."""
    user = user_of(request)
    if user is None:
        raise web.HTTPUnauthorized(text="sign in first")
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(text="send application/json")
    config, app_state = request.app[CONFIG], request.app[STATE]
    session_id = app_state.sessions.get(user)
    if session_id is None:
        made = await agentos(request, "POST", "/v1/sessions", {"metadata": {"user": user}})
        session_id = app_state.sessions[user] = made["id"]
    body = {"session_ids": [session_id], "subject": user, "scopes": ["sessions:read", "sessions:write"]}
    minted = await agentos(request, "POST", "/v1/tokens", body | {"expires_in_s": 300})
    ws_url = config.agentos_url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/ws"
    return web.json_response({"user": user, "token": minted["token"], "session_id": session_id, "ws_url": ws_url})


async def agentos(request: web.Request, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A call to Agent OS with the tenant key: only this back end ever holds it."""
    config = request.app[CONFIG]
    headers = {"Authorization": f"Bearer {config.agentos_key}"}
    async with request.app[HTTP].request(method, config.agentos_url + path, json=body, headers=headers) as r:
        answer: dict[str, Any] = await r.json()
        if r.status >= 400:
            raise web.HTTPBadGateway(text=f"Agent OS answered {r.status}: {answer}")
        return answer


def back_end(config: Config) -> web.Application:
    app = web.Application()
    app[CONFIG] = config
    app[STATE] = State()
    app.cleanup_ctx.append(_client)
    app.add_routes(routes)
    return app


async def _client(app: web.Application) -> Any:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        app[HTTP] = http
        yield


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agentos", default="http://127.0.0.1:8080", help="Agent OS's URL")
    parser.add_argument("--port", type=int, default=8000, help="this back end's port (the provider's is the next)")
    args = parser.parse_args()
    url, issuer = f"http://127.0.0.1:{args.port}", f"http://127.0.0.1:{args.port + 1}"
    client = Client("example", secrets.token_urlsafe(16), f"{url}/callback")
    provider = Provider(issuer, {client.client_id: client}, {"alice": "wonderland", "bob": "builder"})
    config = Config(url, args.agentos, os.environ["AGENTOS_KEY"], issuer, client)
    runners = [web.AppRunner(identity_provider(provider)), web.AppRunner(back_end(config))]
    for runner, port in zip(runners, (args.port + 1, args.port), strict=True):
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"open {url} and sign in as alice / wonderland")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
