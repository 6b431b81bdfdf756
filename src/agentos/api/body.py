"""Reading request bodies and query parameters into typed values, with the right 4xx."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from aiohttp import web

from agentos.api.keys import MAX_BODY_BYTES
from agentos.errors import BadRequest, InvalidInput, PayloadTooLarge

T = TypeVar("T")


class SessionCreate(msgspec.Struct, forbid_unknown_fields=True):
    """`agent`: the agent that runs the session's turns; None (or absent): the default, which is
    the agent named "default" if one is defined, else plain chat turns."""

    agent: str | None = None
    metadata: dict[str, Any] = {}


class TurnCreate(msgspec.Struct, forbid_unknown_fields=True):
    input: str


class RunCreate(msgspec.Struct, forbid_unknown_fields=True):
    input: str
    session_id: str | None = None


class AnswerCreate(msgspec.Struct, forbid_unknown_fields=True):
    """An answer to a run's human request; an approval names the exact `args_hash` it approves."""

    operation_id: str
    answer: str = ""
    approve: bool | None = None
    args_hash: str | None = None


async def read_body(request: web.Request, kind: type[T], *, empty_ok: bool = False) -> T:
    """The request's JSON body as a `kind` (`empty_ok`: an empty body reads as `{}`).

    Raises:
        PayloadTooLarge: over `server.max_body_bytes`.
        BadRequest: not JSON (`malformed_json`).
        InvalidInput: JSON of the wrong shape.
    """
    limit = request.app[MAX_BODY_BYTES]
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"request body over {limit} bytes")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"request body over {limit} bytes") from None
    if not raw.strip() and empty_ok:
        raw = b"{}"
    return decode_json(raw, kind)


def decode_json(raw: bytes | str, kind: type[T]) -> T:
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        _check_well_formed(raw)  # msgspec reports a wrong type before it reaches a syntax error
        raise InvalidInput(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="malformed_json") from None


def _check_well_formed(raw: bytes | str) -> None:
    try:
        msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}", code="malformed_json") from None


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
        InvalidInput: not an integer, or outside `low..high`.
    """
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise InvalidInput(f"query parameter {name!r} must be an integer from {low} to {high}, got {raw!r}")
    return value
