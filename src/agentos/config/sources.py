"""How a rejected setting is reported: where it came from, its dotted key, and what is wrong.

    AGENTOS_PORT=abc: server.port expects an integer
    --port 70000: server.port must be an integer <= 65535
    agentos.toml: agents.ops must be a table

The source comes first because it is what the user edits: an env var (with its value), a flag
(with its value), or the config file. `agentos.config` is the only user of this module.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect

_SECRET_KEYS = ("api_key", "api_token")
_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string", "array": "a list"}


class InvalidSetting(Exception):
    """A setting that failed validation: its dotted key and what is wrong, as a predicate."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key} {problem}")
        self.key = key
        self.problem = problem


class Sources:
    """Where each setting came from. The defaults are valid, so a key that fails and was set by
    neither an env var nor a flag came from the file."""

    def __init__(self, file: Path | None) -> None:
        self.file = str(file) if file else None
        self.by_key: dict[str, str] = {}

    def note(self, key: str, label: str, value: object) -> None:
        """`label` is `VAR=` or `--flag `; secrets are masked."""
        shown = "**********" if key.endswith(_SECRET_KEYS) else value
        if key in ("store.postgres_url", "coordination.redis_url") and isinstance(value, str) and "@" in value:
            scheme = value.split("://", 1)[0] if "://" in value else ""
            shown = f"{scheme}://**********@" + value.rpartition("@")[2]  # the credentials are secret
        self.by_key[key] = f"{label}{shown}"

    def describe(self, invalid: InvalidSetting) -> str:
        source = self.by_key.get(invalid.key) or self.file
        return f"{source}: {invalid}" if source else str(invalid)

    def in_file(self, message: str) -> str:
        """A message about a part only the file sets (the agent tables)."""
        return f"{self.file}: {message}" if self.file else message


def from_validation_error(exc: msgspec.ValidationError, root: type) -> InvalidSetting:
    """msgspec says ``Expected `int`, got `str` - at `$.server.port` ``; say `server.port expects an integer`."""
    message, sep, where = str(exc).rpartition(" - at `$")
    if not sep:
        message, where = str(exc), ""
    path = where.rstrip("`").lstrip(".")
    if unknown := re.fullmatch(r"Object contains unknown field `(.+)`", message):
        return InvalidSetting(f"{path}.{unknown[1]}" if path else unknown[1], "is not a known setting")
    if enum := re.fullmatch(r"Invalid enum value (.+)", message):
        return InvalidSetting(path, f"must be one of {', '.join(_choices(root, path))}, got {enum[1]}")
    expected = re.fullmatch(r"Expected `(\w+)`(, got `\w+`)?(.*)", message)
    if expected is None:
        return InvalidSetting(path, message)
    if expected[1] == "object":
        return InvalidSetting(path, "must be a table")
    kind = _KINDS.get(expected[1], expected[1])
    return InvalidSetting(path, f"must be {kind}{expected[3]}" if expected[3] else f"expects {kind}")


def _choices(root: type, key: str) -> list[str]:
    """The allowed values of a `Literal` setting, read from the settings type."""
    info: Any = msgspec.inspect.type_info(root)
    for part in key.split("."):
        info = {f.name: f.type for f in getattr(info, "fields", ())}.get(part)
    return [str(v) for v in getattr(info, "values", ())]
