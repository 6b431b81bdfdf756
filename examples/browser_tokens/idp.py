"""A tiny identity provider for the example: just enough OpenID Connect (the authorization code
flow) for the back end to sign a user in and verify who it is. Not for production: users and
passwords are in a dict, codes live in memory. A real deployment points the back end at its
company's provider (Keycloak, Auth0, Entra ID, Google) instead.

Routes: `/.well-known/openid-configuration`, `/jwks.json`, `/authorize` (a login form; on
success it redirects to the client's `redirect_uri` with a one-time `code`), `/token` (the
client trades the code, with its secret, for an ES256-signed `id_token`).
"""

from __future__ import annotations

import hmac
import html
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec

CODE_TTL_S = 60
TOKEN_TTL_S = 300


@dataclass
class Client:
    client_id: str
    secret: str
    redirect_uri: str


@dataclass
class Provider:
    issuer: str
    clients: dict[str, Client]
    users: dict[str, str]  # name -> password
    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    kid: str = field(default_factory=lambda: secrets.token_hex(4))
    codes: dict[str, tuple[str, str, str, float]] = field(default_factory=dict)  # code -> client, user, nonce, until

    def id_token(self, client_id: str, user: str, nonce: str) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": client_id, "sub": user, "iat": now, "exp": now + TOKEN_TTL_S}
        return jwt.encode(claims | {"nonce": nonce}, self.key, algorithm="ES256", headers={"kid": self.kid})

    def jwks(self) -> dict[str, Any]:
        jwk = jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [jwk | {"kid": self.kid, "alg": "ES256", "use": "sig"}]}


PROVIDER: web.AppKey[Provider] = web.AppKey("provider", Provider)
routes = web.RouteTableDef()

_FORM = """<!doctype html><meta charset="utf-8"><title>Sign in</title>
<h1>Example identity provider</h1>
<form method="post">
<label>User <input id="username" name="username" autocomplete="username"></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password"></label>
<button id="sign-in" type="submit">Sign in</button></form><p>{error}</p>"""


@routes.get("/.well-known/openid-configuration")
async def discovery(request: web.Request) -> web.Response:
    issuer = request.app[PROVIDER].issuer
    return web.json_response(
        {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "jwks_uri": f"{issuer}/jwks.json",
            "id_token_signing_alg_values_supported": ["ES256"],
            "response_types_supported": ["code"],
        }
    )


@routes.get("/jwks.json")
async def jwks(request: web.Request) -> web.Response:
    return web.json_response(request.app[PROVIDER].jwks())


@routes.get("/authorize")
async def login_form(request: web.Request) -> web.Response:
    _client_of(request.app[PROVIDER], request.query)
    return _form("")


@routes.post("/authorize")
async def login(request: web.Request) -> web.Response:
    provider = request.app[PROVIDER]
    client = _client_of(provider, request.query)
    form = await request.post()
    user, password = str(form.get("username", "")), str(form.get("password", ""))
    known = provider.users.get(user)
    if known is None or not hmac.compare_digest(known.encode(), password.encode()):
        return _form("Unknown user or wrong password.", status=401)
    code = secrets.token_urlsafe(24)
    provider.codes[code] = (client.client_id, user, request.query.get("nonce", ""), time.monotonic() + CODE_TTL_S)
    query = urlencode({"code": code, "state": request.query.get("state", "")})
    raise web.HTTPFound(f"{client.redirect_uri}?{query}")


@routes.post("/token")
async def token(request: web.Request) -> web.Response:
    provider = request.app[PROVIDER]
    form = await request.post()
    client = provider.clients.get(str(form.get("client_id", "")))
    if client is None or not hmac.compare_digest(client.secret.encode(), str(form.get("client_secret", "")).encode()):
        return web.json_response({"error": "invalid_client"}, status=401)
    found = provider.codes.pop(str(form.get("code", "")), None)  # one use only
    if found is None or found[0] != client.client_id or found[3] < time.monotonic():
        return web.json_response({"error": "invalid_grant"}, status=400)
    id_token = provider.id_token(client.client_id, found[1], found[2])
    return web.json_response({"id_token": id_token, "token_type": "Bearer", "expires_in": TOKEN_TTL_S})


def _client_of(provider: Provider, query: Any) -> Client:
    client = provider.clients.get(query.get("client_id", ""))
    if client is None or query.get("redirect_uri") != client.redirect_uri:
        raise web.HTTPBadRequest(text="unknown client or redirect_uri")
    return client


def _form(error: str, status: int = 200) -> web.Response:
    """The login form; it posts back to the same URL, whose query (client, state, nonce) it keeps."""
    return web.Response(text=_FORM.format(error=html.escape(error)), content_type="text/html", status=status)


def identity_provider(provider: Provider) -> web.Application:
    app = web.Application()
    app[PROVIDER] = provider
    app.add_routes(routes)
    return app
