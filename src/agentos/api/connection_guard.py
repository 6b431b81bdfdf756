"""What the connections of one server share (`agentos.api.connections`): the settings, the
open connections per client address, the close counters, and the answers written without a
request."""

from __future__ import annotations

import msgspec

from agentos.config import ServerConfig
from agentos.metrics import CLOSE_REASONS, Metrics

LINGER_S = 2.0  # how long a closing connection reads and drops what its client still sends
MAX_LINGERING = 512  # connections doing so at once (each holds a socket): past it, closed at once


def _raw_answer(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP answer, for a connection that has no request to answer through aiohttp."""
    body = msgspec.json.encode({"error": {"code": code, "message": message}})
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


class ConnectionGuard:
    """What the connections of one server share: the settings, the open connections per client
    address, the close counters and the two answers written without a request."""

    __slots__ = ("config", "per_client", "closed", "head_timeout_answer", "too_many_answer", "lingering", "linger_s")

    def __init__(self, config: ServerConfig, metrics: Metrics) -> None:
        self.config = config
        self.per_client: dict[str, int] = {}
        self.lingering = 0  # connections closing that still read what their client sends
        self.linger_s = LINGER_S
        self.closed = {reason: metrics.connections_closed.labels(reason) for reason in CLOSE_REASONS}
        self.head_timeout_answer = _raw_answer(
            408,
            "Request Timeout",
            "request_timeout",
            f"the request head did not arrive within {config.header_timeout_s:g} s (server.header_timeout_s)",
        )
        self.too_many_answer = _raw_answer(
            429,
            "Too Many Requests",
            "too_many_connections",
            f"over {config.max_connections_per_client} open connections from this address"
            " (server.max_connections_per_client)",
        )

    def admit(self, client: str) -> bool:
        """Count a new connection from `client`; False (and counted as closed) when over the bound."""
        open_now = self.per_client.get(client, 0)
        if open_now >= self.config.max_connections_per_client:
            self.closed["per_client_limit"].inc()
            return False
        self.per_client[client] = open_now + 1
        return True

    def release(self, client: str) -> None:
        left = self.per_client[client] - 1
        if left:
            self.per_client[client] = left
        else:
            del self.per_client[client]
