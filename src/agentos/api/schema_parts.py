"""The building blocks of the API's JSON schemas: `$ref`s, nullable types, pages, list parameters.

Shared by the schema tables (`agentos.api.schemas`, `.schemas_runs`) and the OpenAPI operations.
"""

from __future__ import annotations

from typing import Any

from agentos.api.body import MAX_AFTER, MAX_PAGE_LIMIT
from agentos.config import KernelConfig

REF_TEMPLATE = "#/components/schemas/{name}"


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(name=name)}


# Not only blanks: a character that is not whitespace as Python's str.strip() sees it (ECMA's \s,
# which validators use, leaves out \x1c-\x1f and \x85).
NOT_BLANK = "[^\\s\\x1c-\\x1f\\x85]"
# A turn's or a run's input, as `agentos.api.turns.check_input` takes it at kernel.max_input_chars' default.
INPUT = {"type": "string", "minLength": 1, "maxLength": KernelConfig().max_input_chars, "pattern": NOT_BLANK}


def nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def page(item: str, cursor: dict[str, Any]) -> dict[str, Any]:
    """The shape every list shares: a page of items, and the cursor to pass as `?after=` for
    the next page (null: there is none)."""
    return {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {"data": {"type": "array", "items": ref(item)}, "next_cursor": cursor},
    }


def limit_param(default: int) -> dict[str, Any]:
    return {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT, "default": default},
        "description": f"page size; anything else (0, -1, abc, over {MAX_PAGE_LIMIT}) is a 422 invalid_input",
    }


def after_param(kind: str) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": 0, "maximum": MAX_AFTER} if kind == "integer" else {"type": "string"}
    return {"name": "after", "in": "query", "schema": schema, "description": "the next_cursor of the page before"}
