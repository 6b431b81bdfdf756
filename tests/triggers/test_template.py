"""The input template: the body, its fields, and what a missing field renders as."""

from __future__ import annotations

import pytest

from agentos.triggers.template import render

BODY = b'{"title": "disk full", "host": {"name": "web-3", "cpus": 8}, "tags": ["a", {"id": 7}], "n": null}'


@pytest.mark.parametrize(
    ("template", "rendered"),
    [
        ("{payload}", BODY.decode()),
        ("alert: {payload.title} on {payload.host.name}", "alert: disk full on web-3"),
        ("{payload.host.cpus} cpus", "8 cpus"),  # not a string: its JSON text
        ("{payload.host}", '{"name":"web-3","cpus":8}'),
        ("{payload.tags.1.id}", "7"),  # a list by its index
        ("{payload.n}", "null"),
        ("[{payload.missing}] [{payload.tags.9}] [{payload.title.x}]", "[] [] []"),  # missing: empty
        ("{other} {payload.} {payload", "{other} {payload.} {payload"),  # not placeholders: kept
    ],
)
def test_placeholders_fill_from_the_body(template: str, rendered: str) -> None:
    assert render(template, BODY) == rendered


def test_a_body_that_is_not_json_fills_only_payload() -> None:
    assert render("{payload} / {payload.a}", b"\xffnot json") == "\ufffdnot json / "


def test_a_body_nested_too_deeply_fills_only_payload() -> None:
    assert render("[{payload.a}]", b"[" * 100_000) == "[]"
