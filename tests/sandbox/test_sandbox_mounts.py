"""Issue 14: the sandbox's remaining holes. A command has a root of its own (a mount namespace):
no path-based UNIX socket of the host, no host /tmp; and Landlock scopes its abstract UNIX
sockets and signals where the kernel can (ABI >= 6).

Each attack is first run as a control without the layer under test (a raw fork-server request),
where it must succeed: so each test can fail, and shows what the layer stops.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentos.config.agents import CommandLimits
from agentos.sandbox import _landlock
from agentos.sandbox.sandbox import Sandbox
from tests.sandbox.test_sandbox import spawn
from tests.sandbox.test_sandbox_escape import names, strict, victim  # noqa: F401  (fixtures)

LIMITS = CommandLimits(timeout_s=10, output_max_bytes=4000)
CONNECT = """
import socket, sys
for path in sys.argv[1:]:  # "@name": the abstract socket "\\0name"
    try:
        socket.socket(socket.AF_UNIX).connect(path.replace("@", "\\0", 1) if path[0] == "@" else path)
        print("connected", path)
    except OSError as exc:
        print(type(exc).__name__, exc.errno)
"""


def listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    if not path.startswith("\0"):
        os.chmod(path, 0o777)  # any uid may connect: only the sandbox stands in the way
    return listener


@pytest.fixture
def host_sockets(tmp_path: Path) -> Iterator[list[str]]:
    """Path sockets in the host's /tmp and in a directory outside the workspace, open to all."""
    outside = tmp_path / "sockets"
    outside.mkdir()
    for directory in (tmp_path, outside):
        directory.chmod(0o711)
    paths = [f"/tmp/agentos-escape-{uuid.uuid4().hex[:12]}.sock", str(outside / "s.sock")]
    listeners = [listen(path) for path in paths]
    yield paths
    for listener, path in zip(listeners, paths, strict=True):
        listener.close()
        os.unlink(path)


@pytest.fixture
def host_file() -> Iterator[Path]:
    """A file in the host's /tmp that every uid may read."""
    path = Path(f"/tmp/agentos-escape-{uuid.uuid4().hex[:12]}")
    path.write_text("host\n")
    path.chmod(0o644)
    yield path
    path.unlink()


def known_sockets() -> list[str]:
    """Sockets of this host's services, where it has them."""
    return [p for p in ("/var/run/postgresql/.s.PGSQL.5432", "/run/docker.sock") if os.path.exists(p)]


def raw(argv: list[str], cwd: Path, namespaces: list[str], landlock: dict[str, object] | None) -> dict[str, object]:
    """A fork-server request as the server's own user, with only the layers named."""
    return {
        "argv": argv,
        "cwd": str(cwd),
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": [],
        "namespaces": namespaces,
        "identity": None,
        "landlock": landlock,
    }


async def test_cannot_connect_to_the_hosts_path_unix_sockets(
    strict: Sandbox,  # noqa: F811
    tmp_path: Path,
    host_sockets: list[str],
) -> None:
    abi = _landlock.abi_version()
    landlock = _landlock.policy(str(tmp_path), abi) if abi else None  # no rule for either socket's directory
    control = await spawn(raw(["python3", "-c", CONNECT, *host_sockets], tmp_path, ["pid", "net"], landlock))
    assert control == (0, "".join(f"connected {p}\n" for p in host_sockets))  # Landlock, a network namespace: reached
    known = known_sockets()
    result = await strict.run(["python3", "-c", CONNECT, *host_sockets, *known], tmp_path / "w", LIMITS)
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == "FileNotFoundError 2\n" * (len(host_sockets) + len(known))  # not there at all


async def test_the_hosts_tmp_is_hidden_and_its_own_tmp_is_private(
    strict: Sandbox,  # noqa: F811
    tmp_path: Path,
    host_file: Path,
) -> None:
    own = f"agentos-own-{uuid.uuid4().hex[:12]}"
    script = f"cat {host_file}; ls /tmp; echo own > /tmp/{own}; cat /tmp/{own}; echo ws > f; cat f"
    first = await strict.run(["sh", "-c", script], tmp_path / "a", LIMITS)
    assert "host" not in first.stdout and "No such file" in first.stderr
    assert host_file.name not in first.stdout and first.stdout.endswith("own\nws\n")
    again = [await strict.run(["sh", "-c", f"cat /tmp/{own} f"], tmp_path / w, LIMITS) for w in ("a", "b")]
    assert [r.stdout for r in again] == ["ws\n", ""]  # its workspace stays; its /tmp went with it
    assert all(f"/tmp/{own}: No such file" in r.stderr for r in again)
    assert own not in names(Path("/tmp"))


async def test_ordinary_commands_still_work(strict: Sandbox, tmp_path: Path) -> None:  # noqa: F811
    script = """set -e
echo hello > notes; cat notes; ls; mkdir -p sub && cp notes sub/ && ls sub
python3 -c 'import json, sqlite3, ssl, tempfile; print(json.dumps([tempfile.gettempdir() != "", 1]))'
echo x > /dev/null; head -c 8 /dev/urandom | wc -c; test -w /tmp && echo tmp-writable
touch /usr/x 2>/dev/null || echo usr-read-only; ls /etc/passwd; cd "$HOME" && pwd"""
    result = await strict.run(["sh", "-c", script], tmp_path / "w", LIMITS)
    expected = f"hello\nnotes\nnotes\n[true, 1]\n8\ntmp-writable\nusr-read-only\n/etc/passwd\n{tmp_path / 'w'}\n"
    assert (result.exit_code, result.stdout, result.stderr) == (0, expected, "")


def scoped_policy(workdir: Path) -> dict[str, object]:
    abi = _landlock.abi_version()
    if abi < 6:
        pytest.skip(f"Landlock ABI {abi} has no scoping (Linux >= 6.12 has)")
    return _landlock.policy(str(workdir), abi)


async def test_landlock_scoping_stops_abstract_unix_sockets(tmp_path: Path) -> None:
    """Without a network namespace (weaker mode), Landlock alone keeps the host's abstract sockets out."""
    name = f"@agentos-escape-{uuid.uuid4().hex[:12]}"
    listener = listen(name.replace("@", "\0"))
    try:
        argv = ["python3", "-c", CONNECT, name]
        assert await spawn(raw(argv, tmp_path, [], None)) == (0, f"connected {name}\n")  # the control
        assert await spawn(raw(argv, tmp_path, [], scoped_policy(tmp_path))) == (0, "PermissionError 1\n")
    finally:
        listener.close()


async def test_landlock_scoping_stops_signals(
    tmp_path: Path,
    victim: asyncio.subprocess.Process,  # noqa: F811
) -> None:
    """Without a PID namespace, as the victim's own user, Landlock alone keeps signals in."""
    argv = ["sh", "-c", f"kill -0 {victim.pid} && echo reached; kill -9 {victim.pid} || echo refused"]
    policy = scoped_policy(tmp_path)
    control = await spawn(raw(["sh", "-c", f"kill -0 {victim.pid} && echo reached"], tmp_path, [], None))
    assert control == (0, "reached\n")
    exit_code, output = await spawn(raw(argv, tmp_path, [], policy))
    assert output.endswith("refused\n") and "reached" not in output
    assert victim.returncode is None
