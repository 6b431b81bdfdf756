"""The `[server]` config group: where the server listens, and who may address it from a browser
(`allowed_origins`, `allowed_hosts`: `agentos.api.browser`, docs/security.md "Browser rules").
`agentos.config.Settings` holds it; import it from either module."""

from __future__ import annotations

from typing import Annotated

import msgspec

from agentos.config.sources import InvalidSetting

PosInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]

ANY_HOST = "*"


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`allowed_origins`: exact origins (`https://app.example.com`) whose pages may call the API
    besides the server's own; empty: only its own. `allowed_hosts`: host names (no port) a
    request's `Host` may name besides `localhost`, `127.0.0.1`, `::1` and `host`; `"*"`: any.
    Empty on a loopback bind: only those; empty on any other bind: any (keys guard it)."""

    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8080
    # Server processes on this host (`agentos.supervisor`, docs/deployment.md "Workers"): 1 is one
    # process; more need the cluster path (store.backend = "postgres" + coordination.redis_url).
    workers: Annotated[int, msgspec.Meta(ge=1, le=512)] = 1
    # > 0: worker k also listens on worker_port_base + k, on its own: its own /metrics to scrape.
    worker_port_base: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    max_body_bytes: PosInt = 1 << 20
    api_token: str = ""
    access_log: bool = True
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    # Reading a request (agentos.api.connections, docs/security.md): a request head must arrive
    # within header_timeout_s of the connection opening (or of its first byte, on a kept-alive
    # connection); a body within body_timeout_s, plus 1 s per body_min_rate_bytes_s bytes
    # received (0: no extension). Answers are never timed.
    header_timeout_s: PosFloat = 10.0
    body_timeout_s: PosFloat = 10.0
    body_min_rate_bytes_s: NonNegInt = 1024
    keepalive_timeout_s: PosFloat = 75.0  # an idle connection between requests
    max_connections_per_client: NonNegInt = 4096  # open at once from one address; 0 = no bound
    # The console's event stream (GET /v1/console/stream) ends after this long and the tab
    # reconnects: a revoked key or a disabled tenant loses its live view within that time.
    console_stream_s: PosFloat = 60.0


def check_server(server: ServerConfig) -> None:
    """Raises: InvalidSetting naming `server.allowed_origins` or `server.allowed_hosts`."""
    for origin in server.allowed_origins:
        if normal_origin(origin) is None:
            raise InvalidSetting(
                "server.allowed_origins",
                f'takes origins like "https://app.example.com" (scheme://host[:port], no path), got {origin!r}',
            )
    for host in server.allowed_hosts:
        if host != ANY_HOST and normal_host(host) is None:
            raise InvalidSetting(
                "server.allowed_hosts",
                f'takes names or addresses without a port ("agents.example.com", "[::1]") or "*", got {host!r}',
            )


def normal_origin(origin: str) -> str | None:
    """`origin` as a browser writes it in `Origin` (lower case, no trailing slash); None when it
    is no http(s) origin (a path, a wildcard, "null")."""
    value = origin.strip().lower().removesuffix("/")
    scheme, sep, authority = value.partition("://")
    if not sep or scheme not in ("http", "https") or not authority:
        return None
    if any(c in authority for c in "/?#@*\\ \t") or authority.startswith(":") or authority.endswith(":"):
        return None
    return value


def normal_host(host: str) -> str | None:
    """`host` as `agentos.api.browser` compares it (lower case, an IPv6 address without its
    brackets); None when it has a port, a path or spaces."""
    value = host.strip().lower().removesuffix(".")
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
        return value if value and all(c in "0123456789abcdef:." for c in value) else None
    if not value or any(c in value for c in "/?#@*[]\\ \t") or (":" in value and value.count(":") < 2):
        return None
    return value
