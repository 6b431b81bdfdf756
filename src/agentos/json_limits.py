"""What a JSON document from a client may hold, beyond being JSON: how deep it nests, and no NUL.

- Depth: at most `MAX_JSON_DEPTH` arrays and objects inside each other. msgspec itself stops
  near Python's recursion limit (about 1000, less the caller's stack), so a document nested
  900 deep decoded, was stored, and could fail later wherever it was walked again (a 500, or a
  failed run). No API body needs more than a few levels.
- NUL: PostgreSQL takes no NUL in `text` nor `\\u0000` in `jsonb`; a string with one failed
  the write (a 500, or a message lost). SQLite would store it; both backends refuse it alike.

Both checks cost nothing on an ordinary body: a raw document whose bytes hold fewer than
`MAX_JSON_DEPTH` brackets and no `\\u0000` escape cannot break either rule, and only one that
does is walked (iteratively, never by recursion), after it was decoded.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import msgspec.inspect

from agentos.errors import BadRequest, InvalidInput

MAX_JSON_DEPTH = 64
TOO_DEEP_MESSAGE = f"JSON must not nest deeper than {MAX_JSON_DEPTH} levels"
NUL_MESSAGE = "a string must not contain NUL (\\u0000)"

_CONTAINERS = (dict, list, tuple, msgspec.Struct)


def may_break_limits(raw: bytes | str, *, deep: bool = True) -> bool:
    """False when `raw` cannot break either rule (the common case: a substring search, and
    two byte counts unless `deep` is False: its type cannot nest, see `nests_freely`)."""
    if isinstance(raw, str):
        return "\\u0000" in raw or deep and raw.count("[") + raw.count("{") > MAX_JSON_DEPTH
    return b"\\u0000" in raw or deep and raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH


@functools.cache
def nests_freely(kind: Any) -> bool:
    """Whether a value decoded as `kind` can nest as deep as its JSON does: `kind` holds `Any`
    (`dict[str, Any]`, a bare `object`) or refers to itself. A struct of strings (a turn's body,
    the hot path) cannot; its depth is its type's, so only NUL is looked for."""
    return _has_any(msgspec.inspect.type_info(kind), set())


def _has_any(node: Any, seen: set[int]) -> bool:
    if isinstance(node, msgspec.inspect.AnyType) or id(node) in seen:
        return True
    seen.add(id(node))
    for name in node.__struct_fields__:
        value = getattr(node, name)
        parts = value if isinstance(value, tuple) else (value,)
        for part in parts:
            child = part.type if isinstance(part, msgspec.inspect.Field) else part
            if isinstance(child, msgspec.inspect.Type) and _has_any(child, seen):
                return True
    return False


def too_deep() -> BadRequest:
    """The error of a document nested deeper than `MAX_JSON_DEPTH` (or than msgspec goes)."""
    return BadRequest(TOO_DEEP_MESSAGE, code="malformed_json")


def check_json(raw: bytes | str, value: Any, *, deep: bool = True) -> None:
    """Check `value`, decoded from `raw`, against both rules (cheap unless `raw` may break one;
    `deep`: False when `value`'s type cannot nest, see `nests_freely`).

    Raises:
        BadRequest: nested deeper than `MAX_JSON_DEPTH` (`malformed_json`).
        InvalidInput: a string (a value or a key) holds NUL.
    """
    if not may_break_limits(raw, deep=deep):
        return
    problem = json_problem(value)
    if problem == "too_deep":
        raise too_deep()
    if problem == "nul":
        raise InvalidInput(NUL_MESSAGE)


def json_problem(value: Any) -> str | None:
    """What is wrong with a decoded document: "too_deep" (deeper than `MAX_JSON_DEPTH`),
    "nul" (a string, a value or a key, with NUL), or None. Visits each container once."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "nul"
            continue
        if depth > MAX_JSON_DEPTH:
            return "too_deep"
        if isinstance(item, dict):
            children: Any = [*item, *item.values()]
        elif isinstance(item, msgspec.Struct):
            children = [getattr(item, name) for name in item.__struct_fields__]
        else:
            children = item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (str, *_CONTAINERS)))
    return None
