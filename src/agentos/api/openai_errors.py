"""Errors on the OpenAI-compatible routes, in OpenAI's shape and with the headers its SDKs obey.

Every other layer (auth, rate limits, browser rules, body reading, the handlers) answers with
the native body `{"error": {"code", "message"}}`; this middleware, outside all of them, rewrites
an error answer of a `/v1/models`, `/v1/chat/completions` or `/v1/responses` request into
`{"error": {"message", "type", "param", "code"}}`, so the checks stay in one place and apply
exactly as on the native routes. On the way it:

- answers a 422 (well-formed JSON of the wrong shape) as 400, OpenAI's status for it;
- caps `Retry-After` at 60 s: the Stainless SDKs (openai, anthropic) ignore a longer one and
  back off on their own schedule instead;
- adds `x-should-retry: false` to a 409 (a superseded or cancelled turn, a busy session): the
  SDKs retry 409 by default, and a retried turn would supersede its own first attempt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from agentos.api.openai_wire import error_body
from agentos.api.routes import Answer

OPENAI_PATHS = ("/v1/models", "/v1/chat/completions", "/v1/responses")
MAX_RETRY_AFTER_S = 60
_KEPT_HEADERS = ("Retry-After", "WWW-Authenticate", "Allow", "X-Session-Id")

# What the OpenAI routes that run a turn document beside what every keyed route answers; each
# error is OpenAI's body (`agentos.api.openapi` gives it), and a 422 is answered as 400.
BAD_BODY: dict[int, str | Answer] = {
    400: "Malformed JSON, wrong types, or what the route does not support; `param` names the field",
    413: "Body over the limit",
}
TURN_ERRORS: dict[int, str | Answer] = {
    404: "`model_not_found`: no agent (or plain model) of that id for the caller; an unknown session",
    409: Answer(
        description="The turn was superseded or cancelled (last-wins), or a branch from an older response",
        headers={"x-should-retry": {"schema": {"enum": ["false"]}, "description": "never retry: last-wins"}},
    ),
    500: "The turn failed inside the server (an agent's run failed)",
    502: "The provider failed the turn",
}
# The 429 and 403 a turn adds to every keyed route's (`agentos.api.routes.Limits`).
TURN_LIMITS_429 = (
    "`turn_rate_limited` (turns per minute), `overloaded` (the server's admission limit), `tenant_concurrent_turns`"
)
TURN_QUOTA = (
    "`quota_tokens_per_day` (the tenant's provider tokens for the UTC day are spent), or `quota_sessions`"
    " (a new conversation needs a session, and the tenant holds `max_sessions`)"
)
SESSION_ANSWERED = {"X-Session-Id": {"description": "The session the turn ran in", "schema": {"type": "string"}}}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PATHS)


def openai_error(status: int, code: str, message: str, param: str | None = None) -> web.Response:
    """An OpenAI-shaped error answer (the middleware adds its headers)."""
    body = msgspec.json.encode(error_body(status, code, message, param))
    return web.Response(status=status, body=body, content_type="application/json")


@web.middleware
async def openai_error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if response.status < 400 or not isinstance(response, web.Response) or not is_openai_path(request.path):
        return response
    return _translated(response)


def _translated(response: web.Response) -> web.Response:
    status = 400 if response.status == 422 else response.status
    body = response.body if isinstance(response.body, bytes) else b""
    try:
        error = msgspec.json.decode(body)["error"]
        code, message = str(error["code"]), str(error["message"])
        param = error.get("param")
    except (msgspec.DecodeError, KeyError, TypeError):
        code, message, param = "http_error", response.reason or "error", None
    headers = {name: response.headers[name] for name in _KEPT_HEADERS if name in response.headers}
    if status == 429 and "Retry-After" in headers:  # a quota's 403 keeps its hours: no SDK retries a 403
        headers["Retry-After"] = str(min(_seconds(headers["Retry-After"]), MAX_RETRY_AFTER_S))
    if status == 409:
        headers["x-should-retry"] = "false"
    encoded = msgspec.json.encode(error_body(status, code, message, param if isinstance(param, str) else None))
    return web.Response(status=status, body=encoded, content_type="application/json", headers=headers)


def _seconds(value: str) -> int:
    """A `Retry-After` of ours is whole seconds; anything else reads as the cap."""
    return int(value) if value.isdigit() else MAX_RETRY_AFTER_S
