"""The config groups that bound what callers may make the host do: `[security]` and `[sandbox]`
(docs/security.md). `agentos.config.Settings` holds them."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]


class CommandCaps(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The most an API-defined agent's `command` limits may ask for (`agentos.agents.policy`)."""

    timeout_s: PosFloat = 300.0
    cpu_s: PosInt = 300
    memory_mb: PosInt = 4096
    file_size_mb: PosInt = 1024
    max_processes: PosInt = 1024
    output_max_bytes: PosInt = 1 << 20


class SecurityConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What agents defined through the API may ask for; config-file agents are the
    administrator's and are not limited by it (docs/security.md)."""

    # Hosts an API agent's URLs may name ("mcp.example.com", "*.example.com"); empty: any
    # public host. Loopback, private, link-local and metadata addresses are refused whatever
    # the name, unless their network is listed in `outbound_allow_networks` (CIDR).
    outbound_allow: list[str] = msgspec.field(default_factory=list)
    outbound_allow_networks: list[str] = msgspec.field(default_factory=list)
    # MCP servers an API agent may name ("mcp_servers": ["files"]): the only way it gets a
    # stdio server, which is a process on this host. Tables as in `[[agents.x.mcp_servers]]`.
    api_mcp_servers: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    api_tools: list[str] = msgspec.field(default_factory=lambda: ["run_command", "ask_human", "delegate"])
    max_command: CommandCaps = msgspec.field(default_factory=CommandCaps)
    max_turns: PosInt = 100
    max_token_budget: NonNegInt = 0  # 0: no cap; else API agents need 1..max_token_budget
    max_human_timeout_s: PosFloat = 7 * 24 * 3600.0
    max_delegation_depth: NonNegInt = 4
    max_delegation_width: NonNegInt = 16
    # The secret every API key hash is keyed with (agentos.tenancy.pepper); empty: the file
    # <data_dir>/key_pepper, made on the first start. Masked in `agentos config show`.
    key_pepper: str = ""


class SandboxConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`run_command`'s sandbox (`agentos.agents.sandbox`; docs/security.md).

    `allow_weaker`: where the OS cannot give every layer (a PID namespace, a separate identity,
    a network namespace, Landlock), run commands with the layers it has instead of refusing them.
    `uid_base`/`uid_count`: when the server runs as root, each workspace gets its own uid and gid
    from `[uid_base + 1, uid_base + uid_count)`; `uid_base` itself is the start-up probe's.
    """

    allow_weaker: bool = False
    uid_base: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 2**20)] = 1_000_000_000
    uid_count: Annotated[int, msgspec.Meta(ge=2, le=2**20)] = 1 << 20
