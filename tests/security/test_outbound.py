"""SSRF: the outbound URL checks, and the pinned HTTP client against a real server on loopback.

Every hostile form below has been used to reach a server's own ports or a cloud's metadata
service through a URL check that parsed it differently from the client that connected.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agentos.errors import ConfigError, Forbidden
from agentos.mcp.http import pinned_client, system_cas
from agentos.outbound import OutboundPolicy, check_url, resolve_checked

DEFAULT = OutboundPolicy()
LOOPBACK_ONLY = OutboundPolicy.from_lists([], ["127.0.0.1/32"])

HOSTILE = [
    "http://127.0.0.1/",
    "http://127.0.0.1:8080/v1/sessions",
    "http://127.8.9.10/",
    "http://localhost/",
    "http://LOCALHOST./",
    "http://api.localhost/",
    "http://[::1]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://10.0.0.7/",
    "http://172.16.3.4/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # shared address space (carrier NAT)
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.10.1/",
    "http://100.100.100.200/",  # Alibaba's metadata
    "http://[fd00:ec2::254]/",  # AWS's metadata over IPv6
    "http://[fe80::1]/",
    "http://[fc00::5]/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://192.0.2.1/",  # documentation
    "http://198.18.0.1/",  # benchmarking
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "http://2130706433/",  # 127.0.0.1 as one decimal number
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://user@example.com/",
    "http://user:pass@example.com/",
    "http://example.com@127.0.0.1/",
    "http://127.0.0.1\\@example.com/",
    "http://example.com\x01@127.0.0.1/",
    "http://127.0.0.1\t/",
    "http://127.0.0.%31/",
    "http://１２７.0.0.1/",  # full-width digits, which IDNA would fold to 127.0.0.1
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "ftp://example.com/",
    "dict://example.com:11211/",
    "http:///nohost",
    "http://example.com:99999/",
    "not a url",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_hostile_urls_are_refused(url: str) -> None:
    with pytest.raises(Forbidden) as caught:
        check_url(url, DEFAULT)
    assert caught.value.code == "url_not_allowed" and caught.value.status == 403


@pytest.mark.parametrize("url", ["https://mcp.example.com/mcp", "http://8.8.8.8:8000/", "https://[2606:4700::1]/x"])
def test_public_urls_pass(url: str) -> None:
    check_url(url, DEFAULT)


def test_an_allowed_network_lets_its_addresses_through_and_no_others() -> None:
    check_url("http://127.0.0.1:9000/mcp", LOOPBACK_ONLY)
    for url in ("http://127.0.0.2/", "http://[::1]/", "http://10.0.0.1/", "http://localhost/"):
        with pytest.raises(Forbidden):  # localhost is ::1 too, which is not allowed
            check_url(url, LOOPBACK_ONLY)


def test_a_metadata_address_needs_its_own_entry() -> None:
    link_local = OutboundPolicy.from_lists([], ["169.254.0.0/16"])
    check_url("http://169.254.10.1/", link_local)
    with pytest.raises(Forbidden, match="metadata"):
        check_url("http://169.254.169.254/", link_local)
    check_url("http://169.254.169.254/", OutboundPolicy.from_lists([], ["169.254.169.254/32"]))


def test_the_host_allow_list() -> None:
    policy = OutboundPolicy.from_lists(["mcp.example.com", "*.tools.example.org"], [])
    check_url("https://mcp.example.com/mcp", policy)
    check_url("https://a.b.tools.example.org/", policy)
    for url in (
        "https://example.com/",
        "https://tools.example.org/",
        "https://eviltools.example.org/",
        "https://mcp.example.com.evil.net/",
        "https://8.8.8.8/",
    ):
        with pytest.raises(Forbidden, match="outbound_allow"):
            check_url(url, policy)


def test_a_bad_network_in_the_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match="security.outbound_allow_networks"):
        OutboundPolicy.from_lists([], ["10.0.0.0/33"])


def resolver(table: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


@pytest.mark.parametrize(
    "answers",
    [["127.0.0.1"], ["10.1.2.3"], ["169.254.169.254"], ["93.184.216.34", "127.0.0.1"], ["::1"], ["fe80::1%eth0"]],
)
async def test_a_name_that_resolves_to_a_refused_address_is_refused(answers: list[str]) -> None:
    with pytest.raises(Forbidden, match="evil.test"):
        await resolve_checked("evil.test", 80, DEFAULT, resolver({"evil.test": answers}))


async def test_a_name_that_resolves_to_public_addresses_passes() -> None:
    found = await resolve_checked("ok.test", 443, DEFAULT, resolver({"ok.test": ["93.184.216.34", "2606:4700::1"]}))
    assert found == [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("2606:4700::1")]


async def test_localhost_through_the_system_resolver_is_refused() -> None:
    with pytest.raises(Forbidden, match="loopback"):
        await resolve_checked("localhost", 80, DEFAULT)


# --- the pinned client, against a real server on 127.0.0.1 ---


class Origin:
    """An aiohttp server on 127.0.0.1 that records each request's Host header."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.port = 0

    async def ok(self, request: web.Request) -> web.Response:
        self.hosts.append(request.headers["Host"])
        return web.Response(text="ok", headers={"Connection": "close"})  # a new connection each time

    async def hop(self, request: web.Request) -> web.Response:
        self.hosts.append(request.headers["Host"])
        raise web.HTTPFound(request.query["to"])


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    state = Origin()
    app = web.Application()
    app.router.add_get("/ok", state.ok)
    app.router.add_get("/hop", state.hop)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = runner.addresses[0][1]
    yield state
    await runner.cleanup()


async def test_the_client_connects_to_the_address_it_checked(origin: Origin) -> None:
    # `mcp.test` exists only in this resolver: a reply proves the pool used the checked address.
    async with pinned_client(LOOPBACK_ONLY, resolver({"mcp.test": ["127.0.0.1"]})) as client:
        response = await client.get(f"http://mcp.test:{origin.port}/ok")
    assert response.text == "ok" and origin.hosts == [f"mcp.test:{origin.port}"]


async def test_a_name_resolving_to_loopback_never_connects(origin: Origin) -> None:
    async with pinned_client(DEFAULT, resolver({"evil.test": ["127.0.0.1"]})) as client:
        with pytest.raises(Forbidden, match="loopback"):
            await client.get(f"http://evil.test:{origin.port}/ok")
        with pytest.raises(Forbidden, match="loopback"):
            await client.get(f"http://127.0.0.1:{origin.port}/ok")
    assert origin.hosts == []


async def test_dns_rebinding_is_checked_at_every_connection(origin: Origin) -> None:
    answers = iter([["127.0.0.1"], ["127.0.0.2"]])  # the second answer points somewhere refused

    async def rebinding(host: str, port: int) -> list[str]:
        return next(answers)

    async with pinned_client(LOOPBACK_ONLY, rebinding) as client:
        assert (await client.get(f"http://mcp.test:{origin.port}/ok")).text == "ok"
        with pytest.raises(Forbidden, match="127.0.0.2"):
            await client.get(f"http://mcp.test:{origin.port}/ok")  # the server closed: a new connection
    assert len(origin.hosts) == 1


async def test_a_redirect_is_checked_again(origin: Origin) -> None:
    """127.0.0.1 is allowed, so the first hop is answered; its 302 to 127.0.0.2 is refused."""
    base = f"http://127.0.0.1:{origin.port}"
    async with pinned_client(LOOPBACK_ONLY) as client:
        first = await client.get(f"{base}/hop", params={"to": f"http://127.0.0.2:{origin.port}/ok"})
        assert first.status_code == 302  # the client itself follows nothing
        with pytest.raises(Forbidden, match="127.0.0.2"):
            await client.get(f"{base}/hop", params={"to": f"http://127.0.0.2:{origin.port}/ok"}, follow_redirects=True)
        with pytest.raises(Forbidden, match="169.254.169.254"):
            await client.get(f"{base}/hop", params={"to": "http://169.254.169.254/latest"}, follow_redirects=True)
        followed = await client.get(f"{base}/hop", params={"to": f"{base}/ok"}, follow_redirects=True)
    assert followed.text == "ok"
    assert origin.hosts == [f"127.0.0.1:{origin.port}"] * 5  # four hops answered, then the allowed target


async def test_the_environment_proxy_is_not_used(origin: Origin, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy would connect on the client's behalf, past the pinned pool."""
    monkeypatch.setenv("HTTP_PROXY", "http://169.254.169.254:80")
    monkeypatch.setenv("ALL_PROXY", "http://169.254.169.254:80")
    async with pinned_client(LOOPBACK_ONLY) as client:
        assert (await client.get(f"http://127.0.0.1:{origin.port}/ok")).text == "ok"


def test_the_client_follows_no_redirect_by_itself() -> None:
    client = pinned_client(DEFAULT)
    assert client.follow_redirects is False and isinstance(client, httpx2.AsyncClient)


async def test_every_mcp_connection_shares_one_context_of_the_system_cas() -> None:
    """Making one parses the CA bundle (60-150 ms of CPU): once per process, in a thread, never
    per MCP connection on the loop."""
    first = await system_cas()
    assert await system_cas() is first and first.verify_mode is ssl.CERT_REQUIRED and first.check_hostname


# --- TLS: pinned to an address, the certificate is still checked against the name ---


def tls_pair(tmp_path: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context with a certificate for `name`, client context trusting its CA)."""
    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = cert("test ca", ca_key, "test ca", ca_key, True)
    leaf = cert(name, leaf_key, "test ca", ca_key, False)
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "key.pem")
    client = ssl.create_default_context(cadata=ca_cert.public_bytes(serialization.Encoding.PEM).decode())
    return server, client


async def test_tls_is_verified_against_the_name_not_the_pinned_address(tmp_path: Path) -> None:
    server_tls, client_tls = tls_pair(tmp_path, "mcp.test")

    async def host(request: web.Request) -> web.Response:
        return web.Response(text=request.headers["Host"])

    app = web.Application()
    app.router.add_get("/ok", host)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls).start()
    port = runner.addresses[0][1]
    names = resolver({"mcp.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    try:
        async with pinned_client(LOOPBACK_ONLY, names, client_tls) as client:
            assert (await client.get(f"https://mcp.test:{port}/ok")).text == f"mcp.test:{port}"
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED|match"):
                await client.get(f"https://other.test:{port}/ok")  # same address, wrong name
    finally:
        await runner.cleanup()
