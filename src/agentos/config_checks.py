"""What `agentos.config` checks beyond the types msgspec checks: URLs, names, agent tables, policy.

Each check raises `InvalidSetting` naming the dotted key (or `ConfigError` naming it, from the
agent and policy parsers); `agentos.config` adds where the value came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from agentos.config_security import SecurityConfig
from agentos.config_server import check_server
from agentos.config_sources import InvalidSetting
from agentos.config_store import StoreConfig

if TYPE_CHECKING:
    from agentos.config import Settings


def normalized(tree: Mapping[str, Any]) -> Mapping[str, Any]:
    level = tree.get("log_level")
    return {**tree, "log_level": level.lower()} if isinstance(level, str) else tree


def check_agent_tables(tree: Mapping[str, Any]) -> None:
    """msgspec reports a bad entry of a dict as `agents[...]`, without its name: check here."""
    agents = tree.get("agents", {})
    if not isinstance(agents, dict):
        raise InvalidSetting("agents", "must be a table")
    for name, table in agents.items():
        if not isinstance(table, dict):
            raise InvalidSetting(f"agents.{name}", "must be a table")


def check_settings(settings: Settings) -> None:
    """Raises: InvalidSetting naming the dotted key; ConfigError (agents.<name>.<key>, security.<key>)."""
    check_finite(settings)
    url = settings.provider.url
    if url and not url.startswith(("http://", "https://")):
        raise InvalidSetting("provider.url", f"must start with http:// or https://, got {url!r}")
    _check_store(settings.store)
    check_server(settings.server)
    redis_url = settings.coordination.redis_url
    if redis_url and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise InvalidSetting("coordination.redis_url", "must start with redis://, rediss:// or unix://")
    if settings.agents:
        from agentos.agents.spec import parse_config_agents  # only when agents are configured

        parse_config_agents(settings.agents)  # raises ConfigError naming agents.<name>.<key>
    if settings.security != SecurityConfig():
        from agentos.agents.policy import AgentPolicy  # only when the administrator set any

        AgentPolicy.from_settings(settings)  # raises ConfigError naming security.<key>


def check_finite(value: Any, key: str = "") -> None:
    """Every float setting is a finite number: msgspec takes `inf` for a float (TOML spells it
    so, an environment variable too) wherever no upper bound is declared, and a timeout or TTL
    of inf never fires (nan is refused by every declared bound already; checked here too).

    Raises: InvalidSetting naming the dotted key."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidSetting(key, f"must be a finite number, got {value}")
    elif isinstance(value, msgspec.Struct):  # not the raw `[agents.*]` tables: their parser bounds them
        for field in value.__struct_fields__:
            check_finite(getattr(value, field), f"{key}.{field}" if key else field)


def _check_store(store: StoreConfig) -> None:
    if store.backend == "postgres" and not store.postgres_url.startswith(("postgresql://", "postgres://")):
        shown = store.postgres_url.split("@")[-1]  # never echo a password
        raise InvalidSetting("store.postgres_url", f"must be a postgresql:// URL for the postgres backend: {shown!r}")
    if not store.postgres_schema.replace("_", "a").isalnum() and store.postgres_schema:
        raise InvalidSetting("store.postgres_schema", "letters, digits and _ only")
