"""Settings written back as TOML (`agentos config show`), secrets masked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from agentos.config import Settings


def to_toml_dict(settings: Settings) -> dict[str, Any]:
    """The effective config as plain data, secrets masked."""
    data: dict[str, Any] = msgspec.to_builtins(settings)
    if data["server"]["api_token"]:
        data["server"]["api_token"] = "**********"
    if data["provider"]["api_key"]:
        data["provider"]["api_key"] = "**********"
    for provider in data["providers"].values():
        if provider["api_key"]:
            provider["api_key"] = "**********"
    if data["security"]["key_pepper"]:
        data["security"]["key_pepper"] = "**********"
    data["store"]["postgres_url"] = mask_url(data["store"]["postgres_url"])
    data["coordination"]["redis_url"] = mask_url(data["coordination"]["redis_url"])
    return data


def mask_url(url: str) -> str:
    """`scheme://user:password@host/...` with the password masked; other URLs as they are."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    if ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:**********@{host}"


def dump_toml(data: Mapping[str, Any]) -> str:
    """A small TOML writer for `agentos config show` (scalars, lists and nested tables)."""
    lines: list[str] = []
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    for key, value in data.items():
        if not isinstance(value, dict):
            lines.append(f"{key} = {_toml_value(value)}")
    for name, table in tables.items():
        _dump_table(lines, name, table)
    return "\n".join(lines) + "\n"


def _dump_table(lines: list[str], name: str, table: Mapping[str, Any]) -> None:
    lines.append(f"\n[{name}]")
    subtables = {k: v for k, v in table.items() if isinstance(v, dict)}
    for key, value in table.items():
        if not isinstance(value, dict):
            lines.append(f"{key} = {_toml_value(value)}")
    for key, sub in subtables.items():
        _dump_table(lines, f"{name}.{key}", sub)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return msgspec.json.encode(str(value)).decode()
