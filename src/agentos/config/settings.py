"""Settings: one frozen tree, loaded from a TOML file, then `AGENTOS_*` env vars, then CLI flags.

Usage::

    settings = load_settings(config_path, environ=os.environ, overrides={"kernel.concurrency_limit": 8})

Every key has a dotted name (`kernel.max_in_flight_turns`) and an env var made from it
(`AGENTOS_KERNEL_MAX_IN_FLIGHT_TURNS`); the common ones also have a short alias (`ENV_ALIASES`).
An invalid value stops start-up with a `ConfigError` that names its source and key
(`AGENTOS_PORT=abc: server.port expects an integer`; `agentos.config.sources`).
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from agentos.config.identity import IdentityConfig, check_identity
from agentos.config.knowledge import KnowledgeConfig, SchedulesConfig, TriggersConfig
from agentos.config.provider import (
    MockConfig,
    ModelConfig,
    NamedProvider,
    ProviderConfig,
    RoutingConfig,
    default_model,
    routes,
)
from agentos.config.security import SandboxConfig, SecurityConfig
from agentos.config.server import ServerConfig, check_server
from agentos.config.sources import InvalidSetting, Sources, from_validation_error
from agentos.config.store import CoordinationConfig, RetentionConfig, StoreConfig
from agentos.config.telemetry import TelemetryConfig
from agentos.config.tenants import TenantLimits
from agentos.errors import ConfigError

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]


class Secret(str):
    """A string that never shows itself in a repr or a config dump."""

    def __repr__(self) -> str:
        return "'**********'" if self else "''"


class KernelConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    max_in_flight_turns: NonNegInt = 0  # 0 = admission gate off
    concurrency_limit: PosInt = 64  # concurrent provider streams
    session_ttl_secs: PosFloat = 300.0
    permit_wait_timeout_s: PosFloat = 30.0  # bounded wait for a provider permit
    retry_after_s: PosInt = 1  # the Retry-After of a 429
    history_max_messages: PosInt = 50  # transcript tail sent to the provider
    max_input_chars: PosInt = 100_000
    max_active_runs: NonNegInt = 1024  # agent runs working at once (children excluded); 0 = no gate
    # Turns one session may hold waiting behind its running turn (`on_busy` enqueue, steer);
    # over it a turn gets 429 turn_queue_full (docs/conversations.md). 0: none may wait.
    max_queued_turns_per_session: NonNegInt = 8
    # Shared by several tenants, this fraction of concurrency_limit (rounded up) is kept from any
    # one tenant, so a newcomer is granted at once (agentos.kernel.permits); 0 = no reserve.
    fair_reserve: Annotated[float, msgspec.Meta(ge=0, lt=1)] = 0.1
    # How long a run waits for an MCP server to start and answer the handshake before it fails
    # (`mcp_timeout`, agentos.mcp.tools; was 20 s, fixed). A Python stdio server is ready
    # in 1-3 s on a busy machine; raise it for servers slow to start (npx downloading a package).
    mcp_connect_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 10.0


class MemoryConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Giving memory back (`agentos.runtime.reclaim`): after `trim_after_evictions` sessions were
    evicted by the TTL reaper, glibc's `malloc_trim(0)` runs in a worker thread, at most once per
    `trim_interval_s` (0 evictions: never). The Python heap in `GET /v1/admin/memory` needs the
    interpreter's own `PYTHONTRACEMALLOC=1` (the memory bench's `--tracemalloc`), never on by default."""

    trim_after_evictions: NonNegInt = 256
    trim_interval_s: PosFloat = 30.0


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    data_dir: str = "./data"
    jsonl_dir: str = ""  # empty: no JSONL event log
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    kernel: KernelConfig = msgspec.field(default_factory=KernelConfig)
    provider: ProviderConfig = msgspec.field(default_factory=ProviderConfig)
    providers: dict[str, NamedProvider] = msgspec.field(default_factory=dict)
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    routing: RoutingConfig = msgspec.field(default_factory=RoutingConfig)
    mock: MockConfig = msgspec.field(default_factory=MockConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    security: SecurityConfig = msgspec.field(default_factory=SecurityConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    tenant_limits: TenantLimits = msgspec.field(default_factory=TenantLimits)  # every tenant's defaults
    coordination: CoordinationConfig = msgspec.field(default_factory=CoordinationConfig)
    knowledge: KnowledgeConfig = msgspec.field(default_factory=KnowledgeConfig)
    triggers: TriggersConfig = msgspec.field(default_factory=TriggersConfig)
    schedules: SchedulesConfig = msgspec.field(default_factory=SchedulesConfig)
    memory: MemoryConfig = msgspec.field(default_factory=MemoryConfig)
    telemetry: TelemetryConfig = msgspec.field(default_factory=TelemetryConfig)
    identity: IdentityConfig = msgspec.field(default_factory=IdentityConfig)  # end users' identity providers
    agents: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)

    @property
    def default_model(self) -> str:
        """The model a plain session or an agent without one uses (`agentos.config.provider`)."""
        return default_model(self.provider, self.models, self.routing)

    @property
    def provider_api_key(self) -> Secret:
        return Secret(self.provider.api_key)

    @property
    def api_token(self) -> Secret:
        return Secret(self.server.api_token)


ENV_ALIASES: dict[str, str] = {
    "AGENTOS_HOST": "server.host",
    "AGENTOS_PORT": "server.port",
    "AGENTOS_API_TOKEN": "server.api_token",
    "AGENTOS_DATA_DIR": "data_dir",
    "AGENTOS_JSONL_DIR": "jsonl_dir",
    "AGENTOS_LOG_LEVEL": "log_level",
    "AGENTOS_PROVIDER_URL": "provider.url",
    "AGENTOS_MODEL": "provider.model",
    "AGENTOS_PROVIDER_API_KEY": "provider.api_key",
    "AGENTOS_MAX_IN_FLIGHT_TURNS": "kernel.max_in_flight_turns",
    "AGENTOS_CONCURRENCY_LIMIT": "kernel.concurrency_limit",
    "AGENTOS_SESSION_TTL_SECS": "kernel.session_ttl_secs",
    "AGENTOS_STORE_ENABLED": "store.enabled",
    "AGENTOS_STORE_BACKEND": "store.backend",
    "AGENTOS_POSTGRES_URL": "store.postgres_url",
    "AGENTOS_REDIS_URL": "coordination.redis_url",
}

_SECTIONS = (
    "server",
    "kernel",
    "provider",
    "mock",
    "store",
    "retention",
    "security",
    "sandbox",
    "tenant_limits",
    "coordination",
    "knowledge",
    "triggers",
    "schedules",
    "memory",
    "routing",
    "telemetry",
)


def _known_keys() -> dict[str, str]:
    """Every settable dotted key, mapped to its generic env var name."""
    defaults = Settings()
    keys: dict[str, str] = {}
    for name in Settings.__struct_fields__:
        if name in _SECTIONS:
            for sub in getattr(defaults, name).__struct_fields__:
                keys[f"{name}.{sub}"] = f"AGENTOS_{name}_{sub}".upper()
        elif name not in ("agents", "providers", "models", "identity"):  # tables of their own: config file only
            keys[name] = f"AGENTOS_{name}".upper()
    return keys


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    head, _, rest = dotted.partition(".")
    if not rest:
        tree[head] = value
        return
    node = tree.setdefault(head, {})
    if not isinstance(node, dict):
        raise InvalidSetting(head, "must be a table")
    _set_dotted(node, rest, value)


def _env_overrides(environ: Mapping[str, str]) -> list[tuple[str, str, str | list[str]]]:
    """(variable, dotted key, value) for every `AGENTOS_*` variable that names a setting; a list
    setting's value is split at commas (`AGENTOS_SERVER_ALLOWED_HOSTS=a.example,b.example`)."""
    by_env = {env: dotted for dotted, env in _known_keys().items()} | ENV_ALIASES
    lists = _list_keys()
    return [
        (name, by_env[name], _split(value) if by_env[name] in lists else value)
        for name, value in environ.items()
        if name in by_env
    ]


def _list_keys() -> frozenset[str]:
    """The dotted keys whose value is a list (`security.outbound_allow`, `server.allowed_hosts`)."""
    defaults = Settings()
    return frozenset(
        f"{name}.{sub}"
        for name in _SECTIONS
        for sub in getattr(defaults, name).__struct_fields__
        if isinstance(getattr(getattr(defaults, name), sub), list)
    )


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} not found") from None
    except OSError as exc:  # a directory, no permission
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None


def load_settings(
    config_path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Settings:
    """File, then env, then explicit overrides (CLI flags); the last one wins.

    Args:
        flags: the CLI flag behind each override key (`{"server.port": "--port"}`), for errors.

    Raises:
        ConfigError: an invalid value; the message names its source (file, `VAR=value` or
            `--flag value`) and the dotted key.
    """
    tree: dict[str, Any] = read_toml(config_path) if config_path else {}
    sources = Sources(config_path)
    known = _known_keys()
    try:
        for name, dotted, value in _env_overrides(environ or {}):
            sources.note(dotted, f"{name}=", (environ or {})[name])
            _set_dotted(tree, dotted, value)
        for dotted, value in (overrides or {}).items():
            if value is None:
                continue
            if dotted not in known:
                raise ConfigError(f"unknown config key {dotted!r}")
            sources.note(dotted, f"{(flags or {}).get(dotted, dotted)} ", value)
            _set_dotted(tree, dotted, value)
    except InvalidSetting as exc:  # a scalar in the file where a table is needed
        raise ConfigError(sources.in_file(str(exc))) from None
    return _convert(tree, sources)


def settings_from_dict(tree: Mapping[str, Any]) -> Settings:
    """Settings from a plain tree (`{"kernel": {"concurrency_limit": 8}}`).

    Raises:
        ConfigError: naming the dotted key.
    """
    return _convert(tree, Sources(None))


def _convert(tree: Mapping[str, Any], sources: Sources) -> Settings:
    try:
        check_agent_tables(tree)
        settings = msgspec.convert(normalized(tree), type=Settings, strict=False)
        check_settings(settings)
    except msgspec.ValidationError as exc:
        raise ConfigError(sources.describe(from_validation_error(exc, Settings))) from None
    except InvalidSetting as exc:
        raise ConfigError(sources.describe(exc)) from None
    except ConfigError as exc:  # from the agent tables, which only the file sets
        raise ConfigError(sources.in_file(str(exc))) from None
    return settings


def resolve_paths(settings: Settings) -> Settings:
    """`data_dir` and `jsonl_dir` as absolute paths (`~` expanded), taken from the current
    directory now: the services are built with these, so a later `chdir` (the sandbox's, in
    each command's process) cannot move them."""

    def absolute(path: str) -> str:
        return os.path.abspath(os.path.expanduser(path)) if path else path

    return msgspec.structs.replace(
        settings, data_dir=absolute(settings.data_dir), jsonl_dir=absolute(settings.jsonl_dir)
    )


# -- what the types cannot say: URLs, names, agent tables, finite floats --------------------


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
    for name, named in settings.providers.items():
        if not named.url.startswith(("http://", "https://")):
            raise InvalidSetting(f"providers.{name}.url", f"must start with http:// or https://, got {named.url!r}")
    if settings.providers or settings.models:
        routes(settings.provider, settings.providers, settings.models, settings.routing)  # raises ConfigError
    _check_store(settings.store)
    check_server(settings.server)
    check_identity(settings.identity)
    redis_url = settings.coordination.redis_url
    if redis_url and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise InvalidSetting("coordination.redis_url", "must start with redis://, rediss:// or unix://")
    if settings.agents:
        from agentos.config.agents import parse_config_agents  # only when agents are configured

        parse_config_agents(settings.agents)  # raises ConfigError naming agents.<name>.<key>
    if settings.security != SecurityConfig():
        from agentos.config.agents import parse_security  # only when the administrator set any

        parse_security(settings.security)  # raises ConfigError naming security.<key>


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
