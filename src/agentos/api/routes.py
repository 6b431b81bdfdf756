"""What each route does, said beside its handler; `agentos.api.openapi` writes the document from it.

A handler is described under its aiohttp route, by `operation` (`Operation` names the fields):
`create_session` in `agentos.api.sessions` is a short example, with a body, its answer, its
errors and the quota it may name.

A request or answer body is the msgspec `Struct` the handler decodes or encodes (its JSON Schema
is msgspec's), or a `Schema` written by hand beside a handler that builds its answer as a dict.
`errors` are the `Error` body's answers (OpenAI's on the OpenAI routes); what every keyed
operation answers (401, 403, 429, the store's 503, the rate-limit headers) the document adds
from `open` and `limits`, so that no handler repeats it. A route served without a description
is an error (`described`), and tests/api/test_openapi.py serves every route.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from agentos.api.body import MAX_AFTER, MAX_PAGE_LIMIT
from agentos.errors import ConfigError

REF_TEMPLATE = "#/components/schemas/{name}"
Tag = Literal[
    "sessions",
    "turns",
    "agents",
    "runs",
    "admin",
    "usage",
    "knowledge",
    "triggers",
    "schedules",
    "tokens",
    "openai",
    "server",
]
# The groups of operations on /docs, in the order shown.
TAGS: dict[Tag, str] = {
    "sessions": "Sessions, their transcripts and stored events",
    "turns": "Turns: streamed (SSE), whole (JSON) or over a WebSocket; last-wins",
    "agents": "Agent definitions (docs/agents.md)",
    "runs": "Background runs of an agent, their events, their human requests",
    "admin": "Tenants and their API keys (the admin scope; docs/security.md)",
    "usage": "Tokens and cost of model calls, from the usage ledger (docs/providers.md)",
    "knowledge": "Collections, documents and hybrid retrieval (docs/knowledge.md)",
    "triggers": "Signed webhooks that start runs (docs/triggers.md)",
    "schedules": "Runs started on a cron or every N seconds (docs/schedules.md)",
    "tokens": 'Short-lived browser tokens for a web page (docs/security.md, "Browser tokens")',
    "openai": "The OpenAI-compatible front door: models, chat completions, responses (docs/openai.md)",
    "server": "Health, metrics, and this documentation",
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(name=name)}


def obj(properties: dict[str, Any], required: Iterable[str] | None = None) -> dict[str, Any]:
    """The JSON Schema of an object of these properties; `required`: the ones it always has
    (default: all of them)."""
    return {"type": "object", "required": list(properties if required is None else required), "properties": properties}


@dataclass(frozen=True)
class Schema:
    """A JSON Schema written by hand beside the handler that builds this answer as a dict, a
    component of the document under `name`; `uses`: the structs and schemas it refers to."""

    name: str
    body: dict[str, Any]
    uses: tuple[Any, ...] = ()

    @classmethod
    def object(
        cls, name: str, properties: dict[str, Any], required: Iterable[str] | None = None, *, uses: tuple[Any, ...] = ()
    ) -> Schema:
        """An object of these properties (`obj`), under `name`."""
        return cls(name, obj(properties, required), uses)

    @property
    def ref(self) -> dict[str, str]:
        return ref(self.name)


# A body's schema: a msgspec Struct type, or a hand-written `Schema`.
Body = type | Schema


@dataclass(frozen=True, kw_only=True)
class Answer:
    """One documented answer: a description, its bodies by media type, its headers."""

    description: str
    content: Mapping[str, Body | dict[str, Any]] = field(default_factory=dict)
    headers: Mapping[str, dict[str, Any]] = field(default_factory=dict)


def json(description: str, body: Body, headers: Mapping[str, dict[str, Any]] | None = None) -> Answer:
    return Answer(description=description, content={"application/json": body}, headers=headers or {})


def text(description: str, *media_types: str) -> Answer:
    return Answer(description=description, content=dict.fromkeys(media_types, {"type": "string"}))


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What an operation that starts work adds to every keyed operation's 429 (`more_429`: its
    own codes), the quota (`quota`) its 403 may name, and whether it holds spending budgets
    (`budgets`: its 402 `budget_exceeded`)."""

    more_429: str = ""
    quota: str = ""
    budgets: bool = False


@dataclass(frozen=True, kw_only=True)
class Operation:
    """A route as the document shows it (see the module docstring).

    `body`: the JSON body's schema, `body_content` the body's other media types (both: a body of
    several types); `body_required=False`: no body reads as `{}`. `errors`: status to
    description (an `Error` body), or an `Answer` where it carries headers. `open`: no bearer key."""

    summary: str
    tag: Tag
    answers: Mapping[int, Answer]
    errors: Mapping[int, str | Answer] = field(default_factory=dict)
    body: Body | None = None
    body_content: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    body_description: str | None = None
    body_required: bool = True
    parameters: tuple[dict[str, Any], ...] = ()
    description: str | None = None
    open: bool = False
    limits: Limits = Limits()


H = TypeVar("H", bound=Callable[..., Any])
_OPERATIONS: dict[Callable[..., Any], Operation] = {}
# Component name -> what the server checks of that struct beyond its types, where JSON Schema can
# say it: run on msgspec's schemas once they are made (`refines`).
REFINEMENTS: dict[str, Callable[[dict[str, Any]], None]] = {}


def operation(summary: str, /, **details: Any) -> Callable[[H], H]:
    """Describe the handler below (see `Operation` for the fields)."""

    def describe(handler: H) -> H:
        _OPERATIONS[handler] = Operation(summary=summary, **details)
        return handler

    return describe


@dataclass(frozen=True)
class TaggedOperation:
    """`operation` with the group (`tag`) given once; `tagged` makes one."""

    tag: Tag

    def __call__(self, summary: str, /, **details: Any) -> Callable[[H], H]:
        return operation(summary, tag=self.tag, **details)


def tagged(tag: Tag) -> TaggedOperation:
    """`operation` for a module whose routes are all in one group (`tag`), so that no handler
    repeats it: `operation = tagged("admin")`, then `@operation("Create a tenant", ...)`."""
    return TaggedOperation(tag)


def described(handler: Callable[..., Any]) -> Operation:
    """The handler's description.

    Raises:
        ConfigError: the handler has none (`operation` was not put on it)."""
    try:
        return _OPERATIONS[handler]
    except KeyError:
        raise ConfigError(f"the route handler {handler.__qualname__!r} has no @operation") from None


def refines(name: str) -> Callable[[Callable[[dict[str, Any]], None]], Callable[[dict[str, Any]], None]]:
    """Register what the server checks of the struct `name` beyond its types (its schema is
    changed in place, with every component at hand: `fn(components)`)."""

    def register(fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        REFINEMENTS[name] = fn
        return fn

    return register


# Parameters and answers many operations share.


def path_parameter(name: str, description: str | None = None) -> dict[str, Any]:
    parameter: dict[str, Any] = {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
    return parameter | ({"description": description} if description else {})


def query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema or {"type": "string"}, "description": description}


def header(
    name: str, description: str, schema: dict[str, Any] | None = None, *, required: bool = False
) -> dict[str, Any]:
    parameter = {"name": name, "in": "header", "schema": schema or {"type": "string"}, "description": description}
    return parameter | ({"required": True} if required else {})


RETRY_AFTER = {
    "description": "Seconds to wait before trying again (RFC 9110); at least 1",
    "schema": {"type": "integer", "minimum": 1},
}


def retry(description: str) -> Answer:
    """An error answer that says when to retry."""
    return Answer(description=description, headers={"Retry-After": RETRY_AFTER})


BAD_BODY: dict[int, str | Answer] = {
    400: "Malformed JSON, or nested deeper than 64 levels (malformed_json);"
    " not what its Content-Encoding says (malformed_body)",
    413: "Body over the limit, as sent or once inflated",
    415: "A Content-Encoding other than gzip, deflate or identity (unsupported_content_encoding)",
    422: "Wrong types or values, or a string with NUL; the message names the field",
}
SSE = "text/event-stream"
# One event of a `text/event-stream` answer, as a client parses it (the OpenAPI 3.2 reading).
SERVER_SENT_EVENT = Schema(
    "ServerSentEvent", {"type": "object", "properties": {k: {"type": "string"} for k in ("event", "data", "id")}}
)


def events(description: str) -> Answer:
    """An answer streamed as server-sent events."""
    return Answer(description=description, content={SSE: SERVER_SENT_EVENT})


def nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


# The creating end user of a session, run or schedule (`Principal.subject`; docs/security.md).
OWNER: dict[str, Any] = {
    **nullable("string"),
    "description": "the end user who made it (their token's `sub`); null: made with a tenant key",
}


def ref_of(body: Body) -> dict[str, str]:
    """The `$ref` of a body's component (msgspec names a struct's after its class)."""
    return body.ref if isinstance(body, Schema) else ref(body.__name__)


def page(name: str, item: Body, cursor: dict[str, Any] | None = None) -> Schema:
    """The shape every list shares: a page of items, and the cursor to pass as `?after=` for
    the next page (null: there is none)."""
    properties = {"data": {"type": "array", "items": ref_of(item)}, "next_cursor": cursor or nullable("string")}
    return Schema.object(name, properties, uses=(item,))


def limit_param(default: int) -> dict[str, Any]:
    return query(
        "limit",
        f"page size; anything else (0, -1, abc, over {MAX_PAGE_LIMIT}) is a 422 invalid_input",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT, "default": default},
    )


SEQ = {"type": "integer", "minimum": 0, "maximum": MAX_AFTER}


def page_params(limit: int, after: Literal["integer", "string"] = "string") -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters of a cursor-paginated list: `limit` (`limit` its default), and `after`, the
    `next_cursor` of the page before (an integer or a string)."""
    after_schema = SEQ if after == "integer" else {"type": "string"}
    return limit_param(limit), query("after", "the next_cursor of the page before", after_schema)


def listing(
    description: str,
    name: str,
    item: Body,
    limit: int,
    *more: dict[str, Any],
    after: Literal["integer", "string"] = "string",
    cursor: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a cursor-paginated list adds to its `operation`: its parameters (`page_params`, then
    `more`) and its 200, a `page(name, item, cursor)`: `@operation("List ...", **listing(...))`."""
    return {
        "parameters": (*page_params(limit, after), *more),
        "answers": {200: json(description, page(name, item, cursor))},
    }
