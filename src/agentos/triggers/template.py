"""A trigger's input template: the text a delivery's run gets as its input.

    {payload}          the body as received (UTF-8 text)
    {payload.a.b}      the field a.b of the JSON body: a string as it is, anything else as JSON
                       text; a list is indexed by a number (`{payload.items.0.id}`)

A field the body does not have renders as the empty string (a sender's event types differ in
their fields; one template serves them all). Any other text, braces included, is kept as it is.
It is rendered when the run starts (the dispatcher), from the stored payload: a delivery stores
only what was sent. A trigger's template is fixed when it is created.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

MAX_TEMPLATE_CHARS = 8192
_PLACEHOLDER = re.compile(r"\{payload((?:\.[A-Za-z0-9_\-]+)*)\}")
_MISSING = object()


def render(template: str, payload: bytes) -> str:
    """`template` with its placeholders filled from `payload` (a JSON body)."""
    text = payload.decode("utf-8", "replace")
    try:
        document: Any = msgspec.json.decode(payload)
    except (msgspec.DecodeError, RecursionError):  # deliveries are checked to be JSON; a row is trusted no further
        document = _MISSING

    def fill(match: re.Match[str]) -> str:
        path = match.group(1)
        if not path:
            return text
        value = _field(document, path[1:].split("."))
        if value is _MISSING:
            return ""
        return value if isinstance(value, str) else msgspec.json.encode(value).decode()

    return _PLACEHOLDER.sub(fill, template)


def _field(document: Any, names: list[str]) -> Any:
    value = document
    for name in names:
        if isinstance(value, dict):
            value = value.get(name, _MISSING)
        elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
            value = value[int(name)]
        else:
            return _MISSING
    return value
