"""`agentos serve` with an everyday mistake: one line naming the setting, a non-zero exit code,
no traceback, and nothing started (issue 13, defect 3)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import pytest

from agentos.errors import ConfigError
from agentos.mock.server import MockServer
from agentos.server import serve
from tests.conftest import child_env, make_settings

pytestmark = pytest.mark.slow


# `python -m agentos` on a host without the `mcp` package (None in sys.modules: its import fails)
WITHOUT_MCP = ("-c", "import sys; sys.modules['mcp'] = None; from agentos.cli import main; raise SystemExit(main())")


async def serve_refused(
    *args: str, env: dict[str, str] | None = None, python: tuple[str, ...] = ("-m", "agentos")
) -> str:
    """Run `agentos serve ARGS`; assert it stops at once with one line; that line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *python,
        "serve",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env(**(env or {})),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    output = out.decode() + err.decode()
    assert proc.returncode == 2, output
    assert "Traceback" not in output
    assert out == b""  # nothing started: not the server, not the built-in mock
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentos: "), output
    return lines[0]


async def test_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = await serve_refused("--port", str(port), "--data-dir", str(tmp_path / "data"))
    assert line == (
        f"agentos: server.port: 127.0.0.1:{port} is already in use; choose another with --port or AGENTOS_PORT"
    )
    assert not (tmp_path / "data" / "runs.db").exists()  # no store was opened


async def test_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "data"
    file.write_text("not a directory")
    line = await serve_refused("--port", "0", "--data-dir", str(file))
    assert line == f"agentos: data_dir: {file} is not a directory; choose another with --data-dir or AGENTOS_DATA_DIR"


async def test_a_data_dir_that_cannot_be_created(tmp_path: Path) -> None:
    """Below a regular file: impossible for every user, root included."""
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "data"
    line = await serve_refused("--port", "0", "--data-dir", str(data))
    assert line.startswith(f"agentos: data_dir: cannot create {data} (Not a directory);")
    assert line.endswith("choose another with --data-dir or AGENTOS_DATA_DIR")


async def test_a_read_only_data_dir(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root, which ignores directory permissions: a read-only data dir is writable")
    data = tmp_path / "data"
    data.mkdir(mode=0o555)
    line = await serve_refused("--port", "0", "--data-dir", str(data))
    assert line.startswith(f"agentos: data_dir: {data} is not writable (Permission denied);")


async def test_a_relative_data_dir_is_named_in_full(tmp_path: Path) -> None:
    """The line names the directory the server would have used, resolved from the current one."""
    (tmp_path / "data").write_text("")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentos",
        "serve",
        "--port",
        "0",
        "--data-dir",
        "data",
        stderr=asyncio.subprocess.PIPE,
        env=child_env(),
        cwd=tmp_path,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert err.decode().startswith(f"agentos: data_dir: {tmp_path / 'data'} is not a directory;")


async def test_a_jsonl_dir_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "events"
    file.write_text("")
    line = await serve_refused(
        "--port", "0", "--data-dir", str(tmp_path / "data"), env={"AGENTOS_JSONL_DIR": str(file)}
    )
    assert line == f"agentos: jsonl_dir: {file} is not a directory; choose another with AGENTOS_JSONL_DIR"


async def test_a_port_taken_after_the_check_is_one_line_too(tmp_path: Path, mock: MockServer) -> None:
    """`serve` itself (past `run_server`'s checks): the failed bind is the same ConfigError."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings = make_settings(tmp_path / "data", mock.url, **{"server.port": port})
        with pytest.raises(ConfigError, match=rf"^server.port: 127.0.0.1:{port} is already in use; choose another"):
            await serve(settings)


async def test_an_agent_whose_mcp_servers_cannot_start(tmp_path: Path, mock: MockServer) -> None:
    """Refused at start-up rather than failing every run: the `mcp` package missing, or a stdio
    server's command not found (issue #14)."""
    config = tmp_path / "agentos.toml"
    config.write_text(
        '[agents.ops]\ntools = []\n[[agents.ops.mcp_servers]]\nname = "fs"\ncommand = ["agentos-no-such-server"]\n'
    )
    args = ("--config", str(config), "--port", "0", "--data-dir", str(tmp_path / "data"), "--provider-url", mock.url)
    line = await serve_refused(*args)
    assert line == "agentos: agents.ops.mcp_servers.0.command: 'agentos-no-such-server' is not found on PATH"
    line = await serve_refused(*args, python=WITHOUT_MCP)
    assert line == (
        "agentos: agents.ops.mcp_servers: the `mcp` package is not installed;"
        " install it with pip install 'agentos[mcp]'"
    )
