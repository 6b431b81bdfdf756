"""The Responses API's response ids, pure (the `response` objects and the streamed events are
`agentos.providers.responses_wire`'s, shared with the mock provider).

A response is a turn: its id joins the session's and the turn's (`resp_<session hex><turn
hex>`), so `previous_response_id` names the session to continue and `GET /v1/responses/{id}`
finds the turn, with no table of its own. Ids are unguessable as the session's and turn's are.
"""

from __future__ import annotations

import re

_HEX = 36  # `agentos.ids.new_id`: 12 hex digits of time, 24 of randomness
_RESPONSE_ID = re.compile(rf"resp_([0-9a-f]{{{_HEX}}})([0-9a-f]{{{_HEX}}})")


def response_id(session_id: str, turn_id: str) -> str:
    return f"resp_{session_id.removeprefix('ses_')}{turn_id.removeprefix('turn_')}"


def parse_response_id(value: str) -> tuple[str, str] | None:
    """(session_id, turn_id) of a response id; None if it is not one."""
    match = _RESPONSE_ID.fullmatch(value)
    return None if match is None else (f"ses_{match[1]}", f"turn_{match[2]}")
