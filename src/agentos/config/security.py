"""The config groups that bound what callers may make the host do: `[security]` and `[sandbox]`
(docs/security.md). `agentos.config.Settings` holds them."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

# The most any agent may set, whoever defines it (config file, admin key or API caller), and so
# the most each `[security]` cap may be: far above real use, far below where a value stops
# fitting an rlimit, a 64-bit column or a timer (2**63 was taken before, and failed only when a
# command ran: `setrlimit` overflowed). `agentos.config.agents` applies them; docs/agents.md.
MAX_TURNS = 100
MAX_TOKEN_BUDGET = 10**12  # prompt + completion tokens per run (tenant_limits.tokens_per_day's maximum)
MAX_HUMAN_TIMEOUT_S = 7 * 24 * 3600.0  # a waiting run holds a handle and a deadline meanwhile
MAX_DELEGATION_DEPTH = 100
MAX_DELEGATION_WIDTH = 1000
MAX_COMMAND_S = 86_400.0  # `command.timeout_s` and `cpu_s`: a day
MAX_COMMAND_MB = 1 << 20  # `memory_mb`, `file_size_mb`: 1 TiB (RLIMIT_AS, RLIMIT_FSIZE, the /tmp tmpfs)
MAX_PROCESSES = 1 << 22  # Linux's PID_MAX_LIMIT: no more processes can exist
MAX_OUTPUT_BYTES = 1 << 24  # per stream, kept in memory, journaled and shown to the model

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_COMMAND_S)]
CpuSeconds = Annotated[int, msgspec.Meta(ge=1, le=int(MAX_COMMAND_S))]
Megabytes = Annotated[int, msgspec.Meta(ge=1, le=MAX_COMMAND_MB)]
Processes = Annotated[int, msgspec.Meta(ge=1, le=MAX_PROCESSES)]
OutputBytes = Annotated[int, msgspec.Meta(ge=1, le=MAX_OUTPUT_BYTES)]
Turns = Annotated[int, msgspec.Meta(ge=1, le=MAX_TURNS)]
TokenBudget = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKEN_BUDGET)]
HumanTimeout = Annotated[float, msgspec.Meta(gt=0, le=MAX_HUMAN_TIMEOUT_S)]
DelegationDepth = Annotated[int, msgspec.Meta(ge=0, le=MAX_DELEGATION_DEPTH)]
DelegationWidth = Annotated[int, msgspec.Meta(ge=0, le=MAX_DELEGATION_WIDTH)]


class CommandCaps(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The most an API-defined agent's `command` limits may ask for (`agentos.agents.policy`)."""

    timeout_s: Seconds = 300.0
    cpu_s: CpuSeconds = 300
    memory_mb: Megabytes = 4096
    file_size_mb: Megabytes = 1024
    max_processes: Processes = 1024
    output_max_bytes: OutputBytes = 1 << 20


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
    max_turns: Turns = MAX_TURNS
    max_token_budget: TokenBudget = 0  # 0: no cap; else API agents need 1..max_token_budget
    max_human_timeout_s: HumanTimeout = MAX_HUMAN_TIMEOUT_S
    max_delegation_depth: DelegationDepth = 4
    max_delegation_width: DelegationWidth = 16
    # The secret every API key hash is keyed with (agentos.tenancy.pepper); empty: the file
    # <data_dir>/key_pepper, made on the first start. Masked in `agentos config show`.
    key_pepper: str = ""


class SandboxConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`run_command`'s sandbox (`agentos.sandbox.sandbox`; docs/security.md).

    `allow_weaker`: where the OS cannot give every layer (a PID namespace, a separate identity,
    a network namespace, Landlock), run commands with the layers it has instead of refusing them.
    `uid_base`/`uid_count`: when the server runs as root, each workspace gets its own uid and gid
    from `[uid_base + 1, uid_base + uid_count)`; `uid_base` itself is the start-up probe's.
    `ready_sandboxes`: how many sandboxes the fork server keeps confined ahead of time, each
    waiting for one command (`agentos.sandbox._ready`), so a burst of that many commands starts
    without paying for namespaces and a root; about 1 MB of memory each (docs/security.md).
    Used when the server runs as root (identity by setuid); 0 starts every command fresh.
    """

    allow_weaker: bool = False
    uid_base: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 2**20)] = 1_000_000_000
    uid_count: Annotated[int, msgspec.Meta(ge=2, le=2**20)] = 1 << 20
    ready_sandboxes: Annotated[int, msgspec.Meta(ge=0, le=1024)] = 0
