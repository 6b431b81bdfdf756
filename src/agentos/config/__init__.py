"""The settings tree: one frozen `Settings`, loaded from a TOML file, then `AGENTOS_*`
environment variables, then CLI flags (`settings.py` says how). One module per config group:
`server`, `store` (and coordination), `provider` (and the mock), `knowledge` (and triggers),
`security` (and the sandbox), `tenants` (the per-tenant limits), `agents` (agent
specifications, from a `[agents.*]` table or an API body); `sources` names where a value came
from, `checks` what the types cannot say, `toml` writes a tree back out."""

from agentos.config.knowledge import KnowledgeConfig, SchedulesConfig, TriggersConfig
from agentos.config.provider import (
    MockConfig,
    ModelConfig,
    NamedProvider,
    Price,
    ProviderConfig,
    Route,
    RoutingConfig,
    Target,
)
from agentos.config.security import CommandCaps, SandboxConfig, SecurityConfig
from agentos.config.server import ServerConfig
from agentos.config.settings import KernelConfig, Secret, Settings, load_settings, resolve_paths, settings_from_dict
from agentos.config.store import CoordinationConfig, RetentionConfig, StoreConfig
from agentos.config.tenants import TenantLimits

__all__ = [
    "CommandCaps",
    "CoordinationConfig",
    "KernelConfig",
    "KnowledgeConfig",
    "MockConfig",
    "ModelConfig",
    "NamedProvider",
    "Price",
    "ProviderConfig",
    "RetentionConfig",
    "Route",
    "RoutingConfig",
    "SandboxConfig",
    "SchedulesConfig",
    "Secret",
    "SecurityConfig",
    "ServerConfig",
    "Settings",
    "StoreConfig",
    "Target",
    "TenantLimits",
    "TriggersConfig",
    "load_settings",
    "resolve_paths",
    "settings_from_dict",
]
