"""Browser tokens over HTTP: minting (`POST /v1/tokens`), the verification keys
(`/.well-known/jwks.json`), the EventSource cookie (`POST /v1/tokens/cookie`), and the one place a
browser token's narrowing is enforced (`BrowserGate`, called by the auth middleware).

How a page presents its token, with nothing of it in a URL (URLs reach access logs, histories
and `Referer` headers):
- `fetch`: `Authorization: Bearer <token>`;
- `WebSocket`, which cannot set headers but can name subprotocols: offer
  `["agentos.v1", "agentos.bearer.<token>"]`; the server answers `agentos.v1` (never echoing the
  token);
- `EventSource`, which can set neither: `POST /v1/tokens/cookie` with the token in the header
  answers with one HttpOnly, SameSite=Strict cookie per resource of the token, each scoped to
  that resource's path (`/v1/sessions/<id>`, `/v1/runs/<id>`) and expiring with the token; the
  cookie is then taken on GET requests only.

The gate: a browser token may use only the routes in `ALLOWED` (else 403 `insufficient_scope`),
and only on the resources it names (else the same 404 an unknown id answers). The browser rules
(Origin, Host: `agentos.api.browser`) run before it, as for every request.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from aiohttp import web

from agentos.agents.engine import run_not_found
from agentos.api.body import read_body
from agentos.api.keys import RUNS, RUNTIME, TENANTS
from agentos.api.owners import check_run, check_session
from agentos.api.routes import BAD_BODY, Answer, Schema, json, refines, tagged
from agentos.api.routes import operation as described_as
from agentos.api.sessions import json_response
from agentos.errors import Forbidden, NotFound, SessionNotFound
from agentos.tenancy.browser_tokens import (
    BROWSER_SCOPES,
    DEFAULT_LIFETIME_S,
    MAX_LIFETIME_S,
    BrowserTokens,
    Grant,
    granted_scopes,
    is_browser_token,
)
from agentos.tenancy.entries import Refused
from agentos.tenancy.principal import Principal, Scope, Via, principal
from agentos.tenancy.records import KeyNotFound

routes = web.RouteTableDef()
operation = tagged("tokens")

TOKENS: web.AppKey[BrowserTokens] = web.AppKey("browser_tokens", BrowserTokens)
# The token a request presented, for the cookie exchange (set by the gate, browser tokens only).
PRESENTED: web.RequestKey[str] = web.RequestKey("browser_token", str)

SUBPROTOCOL = "agentos.v1"
BEARER_SUBPROTOCOL = "agentos.bearer."
COOKIE = "agentos_token"
COOKIE_ROUTE = "/v1/tokens/cookie"
MAX_OF_A_KIND = 16  # sessions, and runs, a token may name

# The routes a browser token may use, and the kind of resource whose id the route names (None:
# the cookie exchange, which names none). Lists, admin, agents and deletes are absent on purpose.
ALLOWED: dict[tuple[str, str], str | None] = {
    ("GET", "/v1/sessions/{session_id}"): "session",
    ("GET", "/v1/sessions/{session_id}/messages"): "session",
    ("GET", "/v1/sessions/{session_id}/events"): "session",
    ("POST", "/v1/sessions/{session_id}/turns"): "session",
    ("GET", "/v1/sessions/{session_id}/turns/{turn_id}/events"): "session",
    ("DELETE", "/v1/sessions/{session_id}/turn"): "session",
    ("DELETE", "/v1/sessions/{session_id}/turns/{turn_id}"): "session",
    ("GET", "/v1/sessions/{session_id}/ws"): "session",
    ("GET", "/v1/runs/{run_id}"): "run",
    ("GET", "/v1/runs/{run_id}/events"): "run",
    ("POST", "/v1/runs/{run_id}/answer"): "run",
    ("POST", "/v1/runs/{run_id}/steer"): "run",
    ("POST", "/v1/runs/{run_id}/cancel"): "run",
    ("POST", COOKIE_ROUTE): None,
}
_PARAM = {"session": "session_id", "run": "run_id"}
_PATH = {"session": "/v1/sessions/", "run": "/v1/runs/"}


class BrowserGate:
    """What the auth middleware asks about a request that may carry a browser token."""

    __slots__ = ("_tokens",)

    def __init__(self, tokens: BrowserTokens) -> None:
        self._tokens = tokens

    def credential(self, request: web.Request) -> str:
        """A browser token presented where a client without headers puts it ("" if none): a
        WebSocket's `agentos.bearer.` subprotocol, or (on a GET) the `agentos_token` cookie.
        Browser tokens only: a tenant key is taken from the `Authorization` header alone."""
        given = ""
        if request.headers.get("Upgrade", "").lower() == "websocket":
            for offered in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
                if (offered := offered.strip()).startswith(BEARER_SUBPROTOCOL):
                    given = offered.removeprefix(BEARER_SUBPROTOCOL)
                    break
        elif request.method in ("GET", "HEAD"):
            given = request.cookies.get(COOKIE, "")
        return given if is_browser_token(given) else ""

    def authenticate(self, request: web.Request, route: str | None, token: str) -> Principal | Refused:
        """The token's principal if it may make this request; Refused (401) for a bad token.

        Raises:
            Forbidden: a route a browser token may not use (`insufficient_scope`).
            NotFound: a resource the token does not name, answered as for an unknown id.
        """
        found = self._tokens.authenticate(token)
        if isinstance(found, Refused):
            return found
        if route is not None:  # an unmatched path answers its own 404 / 405
            check_route(request, route, found)
        request[PRESENTED] = token
        return found


def check_route(request: web.Request, route: str, who: Principal) -> None:
    """Raises: Forbidden, NotFound (`BrowserGate.authenticate`)."""
    method = "GET" if request.method == "HEAD" else request.method
    try:
        kind = ALLOWED[(method, route)]
    except KeyError:
        raise Forbidden(
            f"a browser token may not call {method} {route}; it may use only its own sessions' turns and"
            " streams and its own runs' events and answers",
            code="insufficient_scope",
        ) from None
    if kind is None:
        return
    resource_id = request.match_info[_PARAM[kind]]
    if who.resources is None or (kind, resource_id) not in who.resources:
        raise _not_found(kind, resource_id)


def _not_found(kind: str, resource_id: str) -> NotFound:
    """Exactly what an unknown id answers, so that a token cannot probe for others' ids."""
    return SessionNotFound(resource_id) if kind == "session" else run_not_found(resource_id)


class TokenCreate(msgspec.Struct, forbid_unknown_fields=True):
    """A browser token for one end user's page."""

    session_ids: Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1, max_length=200)]],
        msgspec.Meta(max_length=MAX_OF_A_KIND, description="the sessions it may use (turns, streams, WebSocket)"),
    ] = msgspec.field(default_factory=list)
    run_ids: Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1, max_length=200)]],
        msgspec.Meta(max_length=MAX_OF_A_KIND, description="the runs it may use (events, answers, steer, cancel)"),
    ] = msgspec.field(default_factory=list)
    scopes: Annotated[
        list[Scope] | None,
        msgspec.Meta(
            description="of sessions:read, sessions:write, runs:read, runs:write; intersected with the"
            " key's (absent: all four the key has)"
        ),
    ] = None
    subject: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=256, description="the end user it is for (its `sub`)")]
        | None
    ) = None
    expires_in_s: Annotated[int, msgspec.Meta(ge=1, le=MAX_LIFETIME_S, description="its lifetime, in seconds")] = (
        DEFAULT_LIFETIME_S
    )


@refines("TokenCreate")
def _token_checks(schemas: dict[str, Any]) -> None:
    """What `check_grant` and `granted_scopes` answer a 422 for, where JSON Schema can say it:
    at least one session or run, and only the scopes a browser token may have."""
    token = schemas["TokenCreate"]
    token["anyOf"] = [
        {"required": [name], "properties": {name: {"minItems": 1}}} for name in ("session_ids", "run_ids")
    ]
    scopes = {"type": "array", "items": {"enum": sorted(BROWSER_SCOPES)}}
    token["properties"]["scopes"]["anyOf"] = [scopes, {"type": "null"}]


_MINTED = Schema.object(
    "BrowserToken",
    {
        "token": {"type": "string", "description": "a JWT (EdDSA), verifiable with /.well-known/jwks.json"},
        "token_type": {"const": "Bearer"},
        "expires_at_ms": {"type": "integer"},
        "scopes": {"type": "array", "items": {"type": "string"}},
        "session_ids": {"type": "array", "items": {"type": "string"}},
        "run_ids": {"type": "array", "items": {"type": "string"}},
        "subject": {"type": ["string", "null"]},
        "key_id": {
            "type": ["string", "null"],
            "description": "the parent key: revoking it refuses this token at once (null: minted by an end user)",
        },
    },
)


@routes.post("/v1/tokens")
@operation(
    "Mint a short-lived browser token, narrowed to a few sessions and runs",
    description="Call it from your back end with a tenant key, and hand the token to your user's page."
    ' docs/security.md, "Browser tokens".',
    body=TokenCreate,
    answers={201: json("The token (shown once)", _MINTED)},
    errors=BAD_BODY | {404: "A session or run that is not this tenant's"},
)
async def create_token(request: web.Request) -> web.Response:
    body = await read_body(request, TokenCreate)  # a bad body is a 4xx naming its field, whoever asks
    who = _minting_key(request)
    scopes = granted_scopes(who, body.scopes)
    if not scopes:
        raise Forbidden("this key has none of the scopes asked for", code="insufficient_scope")
    by_user = who.via is Via.USER
    if by_user and body.subject not in (None, who.subject):
        raise Forbidden("a user's token mints browser tokens for that user only", code="insufficient_scope")
    for session_id in body.session_ids:  # each must be the caller's to see: 404 as for any unknown id
        await request.app[RUNTIME].ensure_loaded(who.tenant_id, session_id)
        await check_session(request.app[RUNTIME], who, session_id)
    for run_id in body.run_ids:
        await request.app[RUNS].get_run(who.tenant_id, run_id)
        await check_run(request.app[RUNS], who, run_id)
    resources = frozenset({*(("session", s) for s in body.session_ids), *(("run", r) for r in body.run_ids)})
    subject = who.subject if by_user else body.subject
    parent = "" if by_user else who.key_id
    assert parent is not None  # _minting_key
    grant = Grant(
        who.tenant_id, parent, scopes, resources, subject, body.expires_in_s, by_user=by_user, issuer=who.issuer
    )
    minted = request.app[TOKENS].mint(grant)
    answer = {
        "token": minted.token,
        "token_type": "Bearer",
        "expires_at_ms": minted.expires_ms,
        "scopes": sorted(scopes),
        "session_ids": sorted(set(body.session_ids)),
        "run_ids": sorted(set(body.run_ids)),
        "subject": subject,
        "key_id": who.key_id,
    }
    return json_response(answer, status=201)


def _minting_key(request: web.Request) -> Principal:
    """The caller, if it holds a tenant API key (the parent a token's revocation follows), or is
    an end user signed in with their identity provider's token (minting for themselves).

    Raises: Forbidden (`key_required`): the server's api_token, an open server, a browser token."""
    who = principal(request)
    if who.via is Via.USER and who.subject is not None:
        return who
    if who.via is Via.KEY and who.key_id is not None:
        try:
            request.app[TENANTS].key(who.key_id)
            return who
        except KeyNotFound:
            pass
    raise Forbidden(
        "browser tokens are minted with a tenant API key (POST /v1/admin/keys) or an end user's token",
        code="key_required",
    )


@routes.post(COOKIE_ROUTE)
@operation(
    "Trade the browser token in the Authorization header for cookies, for EventSource",
    description="One HttpOnly, SameSite=Strict cookie per resource of the token, scoped to its path and"
    " expiring with the token; taken on GET requests only. Call it with fetch(..., {credentials:"
    " 'include'}), then open `new EventSource(url, {withCredentials: true})`.",
    answers={204: Answer(description="The cookies are set", headers={"Set-Cookie": {"schema": {"type": "string"}}})},
    errors={403: "Not a browser token (`key_required`)"},
)
async def token_cookie(request: web.Request) -> web.Response:
    who = principal(request)
    token = request.get(PRESENTED)
    if who.via is not Via.BROWSER or token is None or who.resources is None:
        raise Forbidden("only a browser token is traded for cookies", code="key_required")
    import jwt  # here: it loads cryptography (agentos.tenancy.signing says why)

    expires_s = int(jwt.decode(token, options={"verify_signature": False})["exp"])  # verified by the gate
    max_age = max(0, expires_s - request.app[TENANTS].now_ms() // 1000)
    secure = request.secure or request.url.host not in ("127.0.0.1", "localhost", "::1")
    response = web.Response(status=204)
    for kind, resource_id in sorted(who.resources):
        response.set_cookie(
            COOKIE,
            token,
            path=_PATH[kind] + resource_id,
            max_age=max_age,
            httponly=True,
            samesite="Strict",
            secure=secure,
        )
    return response


_JWKS = Schema.object("JWKS", {"keys": {"type": "array", "items": {"type": "object"}}})


@routes.get("/.well-known/jwks.json")
@described_as(
    "The public keys browser tokens are signed with: the current one and the previous one",
    tag="server",
    open=True,
    answers={200: json("A JSON Web Key Set (RFC 7517)", _JWKS)},
)
async def jwks(request: web.Request) -> web.Response:
    keys = [key.jwk() for key in request.app[TOKENS].keys.live()]
    response = json_response({"keys": keys})
    # a verifier that meets an unknown kid refetches; keys rotate daily, so minutes of cache cost nothing
    response.headers["Cache-Control"] = "public, max-age=300"
    return response
