"""Reading request bodies and query parameters into typed values, with the right 4xx."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from aiohttp import web

from agentos.api.keys import MAX_BODY_BYTES
from agentos.errors import BadRequest, InvalidInput, PayloadTooLarge

T = TypeVar("T")


class SessionCreate(msgspec.Struct, forbid_unknown_fields=True):
    agent: str = "default"
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


def query_int(request: web.Request, name: str, default: int, *, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise InvalidInput(f"query parameter {name!r} must be between {low} and {high}, got {value}")
    return value
