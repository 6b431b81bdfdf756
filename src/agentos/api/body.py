"""Reading request bodies, headers and query parameters into typed values, with the right 4xx.

Every body is read by `read_body` (JSON) or `agentos.api.body_encoding.read_raw` (the bytes,
inflated as their Content-Encoding says, never past the route's limit).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Annotated, Any, TypeVar, cast

import msgspec
from aiohttp import web
from aiohttp.web import RequestPayloadError

from agentos.api.body_encoding import CONTENT_ENCODING, UNREADABLE, read_raw
from agentos.api.expect import send_continue
from agentos.api.keys import MAX_BODY_BYTES
from agentos.config import KernelConfig
from agentos.config.tenants import MAX_BUDGET
from agentos.errors import BadRequest, InvalidInput, PayloadTooLarge, UnsupportedMediaType
from agentos.json_limits import check_json, nests_freely, too_deep
from agentos.kernel import OnBusy

T = TypeVar("T")


# Not only blanks: a character that is not whitespace as Python's str.strip() sees it (ECMA's \s,
# which validators use, leaves out \x1c-\x1f and \x85).
NOT_BLANK = "[^\\s\\x1c-\\x1f\\x85]"
# A turn's or a run's input as the document shows it: `agentos.api.turns.check_input` checks it
# against kernel.max_input_chars (its default here), so these bounds are not checked on decoding.
RunBudget = Annotated[
    float,
    msgspec.Meta(
        gt=0,
        le=MAX_BUDGET,
        description="what this run's model calls may cost together, in the prices' currency; at most the"
        " agent's own max_cost when it has one (absent: the agent's)",
    ),
]
Input = Annotated[
    str,
    msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": KernelConfig().max_input_chars, "pattern": NOT_BLANK}),
]


class SessionCreate(msgspec.Struct, forbid_unknown_fields=True):
    """A new session."""

    agent: Annotated[
        str | None,
        msgspec.Meta(
            description="the agent that runs the turns; absent or null: the agent named default if"
            " one is defined, else plain chat turns"
        ),
    ] = None
    metadata: dict[str, Any] = {}
    on_busy: Annotated[
        OnBusy | None,
        msgspec.Meta(
            description="the default `on_busy` of its turns (a turn's own wins); absent or null: its"
            " agent's `on_busy`, else replace"
        ),
    ] = None


OnBusyField = Annotated[
    OnBusy | None,
    msgspec.Meta(
        description="what this turn does if the session is running one: replace (cancel it, the"
        " default), reject (409 turn_in_progress), enqueue (wait in the session's queue, 429"
        " turn_queue_full over its bound), rollback (replace, and drop the replaced turn's messages),"
        " steer (an agent turn takes the message at its next step; a chat turn: replace)."
        " Absent or null: the session's default (docs/conversations.md)"
    ),
]


class TurnCreate(msgspec.Struct, forbid_unknown_fields=True):
    input: Input
    on_busy: OnBusyField = None


class RunCreate(msgspec.Struct, forbid_unknown_fields=True):
    input: Input
    session_id: Annotated[str | None, msgspec.Meta(description="the session the run belongs to, if any")] = None
    max_cost: RunBudget | None = None


class RunSteer(msgspec.Struct, forbid_unknown_fields=True):
    """A message for a working run, taken in at its next step (`POST /v1/runs/{run_id}/steer`)."""

    input: Input


class RunForkEdit(msgspec.Struct, forbid_unknown_fields=True):
    """The fork's new result for step `at_seq`: `content` for a tool step; `answer` (and
    `approve`, for an approval) for a human step (docs/agents.md "Forks")."""

    content: Annotated[str | None, msgspec.Meta(description="a tool step: the result the model sees")] = None
    answer: Annotated[str | None, msgspec.Meta(description="a human step: the answer")] = None
    approve: Annotated[bool | None, msgspec.Meta(description="an approval step: approved or not")] = None


class RunFork(msgspec.Struct, forbid_unknown_fields=True):
    """Fork a run at a step (`POST /v1/runs/{run_id}/fork`)."""

    at_seq: Annotated[
        int,
        msgspec.Meta(ge=0, le=2**31 - 1, description="the last step of the run's journal the fork keeps (0: none)"),
    ]
    edit: RunForkEdit | None = None


class AnswerCreate(msgspec.Struct, forbid_unknown_fields=True):
    """An answer to a run's human request; an approval names the exact `args_hash` it approves."""

    operation_id: str
    answer: str = ""
    approve: bool | None = None
    args_hash: Annotated[str | None, msgspec.Meta(description="required with approve: the request's args_hash")] = None


async def read_body(request: web.Request, kind: type[T], *, empty_ok: bool = False) -> T:
    """The request's JSON body as a `kind` (`empty_ok`: an empty body reads as `{}`).

    A body must be declared JSON (`application/json` or `application/*+json`, any parameters):
    a web page can send `text/plain` or a form to any site without asking (a "simple" request,
    no CORS preflight), never `application/json` (docs/security.md "Browser rules"). An empty
    body may say anything (clients label even no body `application/octet-stream`).

    Raises:
        UnsupportedMediaType: a body of another Content-Type, or without one.
        PayloadTooLarge: over `server.max_body_bytes` (as sent, or once decoded).
        BadRequest: not JSON, or nested too deep (`malformed_json`); a body
            that is not what its Content-Encoding says (`malformed_body`).
        UnsupportedEncoding: a Content-Encoding other than gzip, deflate or identity.
        InvalidInput: JSON of the wrong shape, or a string with NUL.
    """
    declared = request.headers.get("Content-Type")
    is_json = declared is not None and is_json_type(declared)
    if not is_json and request.content_length:
        raise _not_json(declared)  # before reading it
    limit = request.app[MAX_BODY_BYTES]
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"request body over {limit} bytes")
    if CONTENT_ENCODING in request.headers:
        raw = await read_raw(request, limit)
    else:  # the usual case: one read, capped by the app's client_max_size
        await send_continue(request)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise PayloadTooLarge(f"request body over {limit} bytes") from None
        except RequestPayloadError:
            raise BadRequest(UNREADABLE, code="malformed_body") from None
    if not is_json and raw:  # chunked: no Content-Length
        raise _not_json(declared)
    if not raw.strip() and empty_ok:
        raw = b"{}"
    return decode_json(raw, kind)


def _not_json(declared: str | None) -> UnsupportedMediaType:
    if declared is None:
        return UnsupportedMediaType("a body without a Content-Type: send it as application/json")
    return UnsupportedMediaType(f"Content-Type {declared[:100]!r}: the body must be application/json")


def is_json_type(content_type: str) -> bool:
    """`application/json` or `application/<anything>+json`, any case, any parameters."""
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def decode_json(raw: bytes | str, kind: type[T]) -> T:
    """`raw` as a `kind`, within `agentos.json_limits` (depth, no NUL). A number with no fraction
    (`2.0`, `1e3`) is an integer, as JSON Schema (and the OpenAPI document) says: msgspec refuses
    it where an `int` is due, so such a body is read again with those numbers as ints (only then:
    the common case decodes once).

    Raises:
        BadRequest: not JSON, or nested too deep (`malformed_json`).
        InvalidInput: the wrong shape, or a string with NUL.
    """
    try:
        value: T = _decoder(kind).decode(raw)
    except msgspec.ValidationError as exc:
        # msgspec reports a wrong type before it reaches a syntax error or the depth
        check_json(raw, _well_formed(raw))
        try:
            value = msgspec.convert(_INTEGRAL.decode(raw), kind)
        except msgspec.ValidationError:
            raise InvalidInput(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="malformed_json") from None
    except RecursionError:  # nested deeper than msgspec goes (about 1000 levels)
        raise too_deep() from None
    check_json(raw, value, deep=nests_freely(cast(Hashable, kind)))
    return value


def _number(literal: str) -> int | float:
    """A JSON number of an untyped place (`Any`, or a body read again): an int when integral."""
    value = float(literal)
    return int(value) if value.is_integer() else value


_INTEGRAL: msgspec.json.Decoder[Any] = msgspec.json.Decoder(float_hook=_number)
_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}  # one per body type: a handful


def _decoder(kind: Any) -> msgspec.json.Decoder[Any]:
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.json.Decoder(kind, float_hook=_number)
    return decoder


def _well_formed(raw: bytes | str) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="malformed_json") from None
    except RecursionError:
        raise too_deep() from None


# Every paginated list takes `limit` from 1 to MAX_PAGE_LIMIT; each route has its own default.
MAX_PAGE_LIMIT = 1000
# The largest integer cursor (`after`, `Last-Event-ID`) taken: a SQLite integer is 64-bit signed.
MAX_AFTER = 2**62


def page_limit(request: web.Request, default: int) -> int:
    """The `limit` of a paginated list.

    Raises:
        InvalidInput: not an integer from 1 to `MAX_PAGE_LIMIT`.
    """
    return query_int(request, "limit", default, low=1, high=MAX_PAGE_LIMIT)


def query_int(request: web.Request, name: str, default: int, *, low: int, high: int) -> int:
    """The integer query parameter `name` (`default` when absent).

    Every bad value, not a number or out of range, is the same error, so a client handles one
    kind: 422 `invalid_input`, its message naming the parameter and the range.

    Raises:
        InvalidInput: not an integer, or outside `low..high` (given twice is not one integer).
    """
    raw = _query_once(request, name)
    if raw is None:
        return default
    value = decimal(raw)
    if value is None or not low <= value <= high:
        raise InvalidInput(f"query parameter {name!r} must be an integer from {low} to {high}, got {raw[:40]!r}")
    return value


def query_text(request: web.Request, name: str) -> str | None:
    """The text query parameter `name` (a cursor, an id; None when absent).

    Raises:
        InvalidInput: it holds NUL (`%00`): no id has one, and PostgreSQL takes it in no text;
            or it is given twice.
    """
    raw = _query_once(request, name)
    if raw is not None and "\x00" in raw:
        raise InvalidInput(f"query parameter {name!r} must not contain NUL (%00)")
    return raw


def _query_once(request: web.Request, name: str) -> str | None:
    """The query parameter `name`, given at most once: of `?limit=5&limit=500` neither is
    the client's meaning, so the answer says so instead of taking one."""
    values = request.query.getall(name, ())
    if len(values) > 1:
        raise InvalidInput(f"query parameter {name!r}: give it once, got {len(values)}")
    return values[0] if values else None


def resume_after(request: web.Request, stream_id: str | None = None) -> int:
    """The seq a resumed event stream starts after: `Last-Event-ID`, else `?after=`, else 0. The
    same for a turn's stream and a run's. `stream_id`: a Last-Event-ID may also be
    `<stream_id>:<seq>`, as a turn's stream numbers its events.

    Raises:
        BadRequest: either, when given, is not one integer from 0 to `MAX_AFTER` (an empty one, or
            one given twice, is not one either), or the Last-Event-ID names another stream.
    """
    after = request.query.getall("after", ())
    if len(after) > 1:
        raise BadRequest(f"after: give it once, got {len(after)}")
    last_event_id = header_text(request, "Last-Event-ID")
    if last_event_id is not None and stream_id is not None:
        prefix, colon, seq = last_event_id.rpartition(":")
        if colon and prefix != stream_id:
            raise BadRequest(f"Last-Event-ID {last_event_id[:80]!r} names another stream than {stream_id!r}")
        last_event_id = seq
    given = [("Last-Event-ID", last_event_id), ("after", after[0] if after else None)]
    seqs = [_seq(name, raw) for name, raw in given if raw is not None]
    return seqs[0] if seqs else 0


def _seq(name: str, raw: str) -> int:
    value = decimal(raw)
    # checked before the stream starts: a larger one overflowed SQLite's integer mid-stream
    if value is None or value > MAX_AFTER:
        raise BadRequest(f"{name} must be an event seq from 0 to {MAX_AFTER}, got {raw[:40]!r}")
    return value


def decimal(raw: str) -> int | None:
    """`raw` as a non-negative integer, if it is 1 to 19 ASCII digits (a 64-bit integer's
    length); else None. `int()` alone takes "+5", " 5", "1_0", "٣" and 4300 digits."""
    if 0 < len(raw) <= 19 and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


def header_text(request: web.Request, name: str) -> str | None:
    """The header `name` as text (None when absent), sent at most once.

    Raises:
        BadRequest: its bytes are not UTF-8 (aiohttp keeps such bytes as lone surrogates, which
            no store, log or JSON encoder takes); it was sent twice (neither is surely the
            client's, and a proxy in front may have read the other).
    """
    values = request.headers.getall(name, ())
    if len(values) > 1:
        raise BadRequest(f"{name}: send it once, got {len(values)}")
    value = values[0] if values else None
    if value is not None and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise BadRequest(f"{name}: not UTF-8 text") from None
    return value
