"""Outbound URLs a caller may set: an allow-list of hosts, and no private addresses (SSRF).

An API-defined agent may name a URL the server will connect to (an MCP server over HTTP).
Without a check, the server would fetch its own loopback ports, the cloud's metadata service
(169.254.169.254: the host's credentials) or anything on the private network for whoever holds
an API key. Two checks, one policy:

- `check_url(url, policy)` is static (no DNS): scheme, userinfo, the host allow-list, and the
  address itself when the host is an IP literal or a `localhost` name. Run when an agent is
  created, so a bad URL is refused with 403 at once.
- `resolve_checked(host, port, policy)` resolves the name and checks *every* address it
  resolves to. The caller then connects only to those addresses (`agentos.mcp.http`
  pins them), so a name that re-resolves elsewhere between check and connect (DNS rebinding)
  gains nothing. Each redirect hop is a new request and goes through both checks again.

An address is refused when it is not globally routable (loopback, private, link-local,
unspecified, shared 100.64/10, documentation, reserved), multicast, or a metadata address,
unless a network in `outbound_allow_networks` contains it. A metadata address needs its own
/32 (/128) entry: allowing 169.254.0.0/16 for a link-local device does not open it.
IPv4 addresses inside IPv6 ones (`::ffff:127.0.0.1`, 6to4, Teredo, NAT64) are checked as IPv4.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from agentos.errors import ConfigError, Forbidden

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> the addresses it resolves to; tests inject their own.
Resolver = Callable[[str, int], Awaitable[list[str]]]

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "192.0.0.192")
)
_LOCALHOST_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_LOOPBACK = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_URL_SCHEMES = ("http", "https")
_BAD_URL_CHARS = frozenset("\\ \x7f") | {chr(c) for c in range(0x20)}  # a backslash, a space, controls


@dataclass(frozen=True, slots=True)
class OutboundPolicy:
    """Where callers' URLs may point. The default: any public host, no private address."""

    allow_hosts: tuple[str, ...] = ()  # "example.com", "*.example.com"; empty: any host
    allow_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_lists(cls, hosts: Iterable[str], networks: Iterable[str], *, where: str = "security") -> OutboundPolicy:
        """Raises: ConfigError: a network that is not CIDR notation, naming the key."""
        parsed: list[IPNetwork] = []
        for text in networks:
            try:
                parsed.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise ConfigError(f"{where}.outbound_allow_networks: {text!r} is not a network (10.0.0.0/8)") from None
        return cls(tuple(h.lower().rstrip(".") for h in hosts), tuple(parsed))


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str  # lower case, no trailing dot, IPv6 without brackets
    port: int


def check_url(url: str, policy: OutboundPolicy) -> Target:
    """The static checks: no DNS, so cheap enough for every request that names a URL.

    Raises:
        Forbidden: `url_not_allowed`, with the reason.
    """
    target = _parse(url)
    check_host(target.host, policy)
    return target


def check_host(host: str, policy: OutboundPolicy) -> None:
    """The host allow-list, then the address when the host is one (or a localhost name).

    Raises:
        Forbidden: `url_not_allowed`.
    """
    host = host.lower().rstrip(".")
    if policy.allow_hosts and not any(_host_matches(host, p) for p in policy.allow_hosts):
        raise _refused(f"host {host!r} is not in security.outbound_allow")
    if host in _LOCALHOST_NAMES or host.endswith(".localhost"):
        for loopback in _LOOPBACK:  # RFC 6761: these are loopback whatever DNS says
            check_address(loopback, policy, host=host)
        return
    address = _ip_literal(host)
    if address is not None:
        check_address(address, policy, host=host)


def _host_matches(host: str, pattern: str) -> bool:
    """`example.com` is that host only; `*.example.com` any name below it (not itself)."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def check_address(address: IPAddress, policy: OutboundPolicy, *, host: str = "") -> None:
    """Raises: Forbidden: `url_not_allowed`, naming the kind of address."""
    reason = refusal(address, policy)
    if reason is not None:
        named = f"address {address} (host {host!r})" if host and host != str(address) else f"address {address}"
        raise _refused(f"{named} is {reason}; security.outbound_allow_networks can allow it")


def refusal(address: IPAddress, policy: OutboundPolicy) -> str | None:
    """Why `address` may not be connected to under `policy`, or None if it may."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return refusal(embedded, policy) or _own_refusal(address, policy)
    return _own_refusal(address, policy)


def _own_refusal(address: IPAddress, policy: OutboundPolicy) -> str | None:
    if address in METADATA_ADDRESSES:
        exact = any(n.num_addresses == 1 and address in n for n in policy.allow_networks)
        return None if exact else "a cloud metadata address"
    if any(address.version == n.version and address in n for n in policy.allow_networks):
        return None
    return _kind(address)


async def resolve_checked(
    host: str, port: int, policy: OutboundPolicy, resolver: Resolver | None = None
) -> list[IPAddress]:
    """Every address `host` resolves to, each checked; connect only to these.

    Raises:
        Forbidden: the host or any of its addresses is refused (one bad address refuses all:
            a client could pick any of them).
        OSError: the name does not resolve.
    """
    check_host(host, policy)
    literal = _ip_literal(host)
    if literal is not None:
        return [literal]
    answers = await (resolver or system_resolve)(host, port)
    addresses = [ipaddress.ip_address(a.partition("%")[0]) for a in answers]
    if not addresses:
        raise OSError(f"{host!r} resolves to no address")
    for address in addresses:
        check_address(address, policy, host=host)
    return addresses


async def system_resolve(host: str, port: int) -> list[str]:
    """The loop's `getaddrinfo` (run in a thread, so the loop never blocks on DNS)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _parse(url: str) -> Target:
    if not isinstance(url, str) or any(c in _BAD_URL_CHARS for c in url):
        raise _refused("the URL holds a backslash, a space or a control character")  # parsers disagree on them
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _refused(f"the URL cannot be parsed: {exc}") from None
    if parts.scheme.lower() not in _URL_SCHEMES:
        raise _refused(f"scheme {parts.scheme!r} is not allowed; use http or https")
    if "@" in parts.netloc:
        raise _refused("a URL may not carry a user name or password")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise _refused("the URL has no host")
    if not host.isascii() or "%" in host:
        raise _refused(f"host {host!r}: write a name in ASCII (xn-- for others), without %-escapes")
    scheme = parts.scheme.lower()
    return Target(scheme, host, port or (443 if scheme == "https" else 80))


def _ip_literal(host: str) -> IPAddress | None:
    """The address if `host` is one. Other numeric forms that resolvers still accept
    (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`) are refused: parsers disagree on them."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        if ":" in host:
            raise _refused(f"host {host!r} is not a valid IPv6 address") from None
    last = host.rsplit(".", 1)[-1]
    if _numeric_label(last):
        raise _refused(f"host {host!r} looks like an IPv4 address in a non-standard form; write a.b.c.d")
    return None


def _numeric_label(label: str) -> bool:
    """WHATWG's "ends in a number": a decimal or 0x-hex last label makes the host an IPv4 address."""
    lowered = label.lower()
    if lowered.startswith("0x"):
        return all(c in "0123456789abcdef" for c in lowered[2:])
    return lowered.isdigit()


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _kind(address: IPAddress) -> str | None:
    kinds = (
        ("a loopback address", address.is_loopback),
        ("a link-local address", address.is_link_local),
        ("the unspecified address", address.is_unspecified),
        ("a multicast address", address.is_multicast),
        ("a private address", address.is_private),
        ("a reserved address", address.is_reserved),
        ("not a public address", not address.is_global),
    )
    return next((kind for kind, hit in kinds if hit), None)


def _refused(message: str) -> Forbidden:
    return Forbidden(message, code="url_not_allowed")
