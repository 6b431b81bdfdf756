"""Ready sandboxes (`agentos.sandbox._ready`): confined ahead of time, one command each.

The escape and mount tests run against them too (their `strict` fixture has a "ready" case);
these hold what is the pool's own: it serves bursts, each sandbox once, the workspace as the
host resolves it, the `/tmp` a request asks for, and it ends with the fork server. They need a
server running as root with the strict sandbox, and are skipped, saying why, elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from agentos.config import SandboxConfig
from agentos.config.agents import CommandLimits
from agentos.sandbox.forkserver import ForkServer
from agentos.sandbox.metrics import SandboxCollector
from agentos.sandbox.sandbox import Sandbox
from agentos.testing import eventually
from tests.sandbox.test_sandbox import dead
from tests.sandbox.test_sandbox_escape import searchable, started_sandbox

LIMITS = CommandLimits(timeout_s=10, output_max_bytes=4000)


@pytest.fixture
async def ready() -> AsyncIterator[Sandbox]:
    sandbox = await started_sandbox(ready=True)
    yield sandbox
    await sandbox.close()


def members(sandbox: Sandbox) -> list[int]:
    """The fork server's children: its ready sandboxes while no command runs."""
    zygote = sandbox._forks._proc  # a test reaches in for the fork server's pid
    assert zygote is not None
    return [int(pid) for pid in Path(f"/proc/{zygote.pid}/task/{zygote.pid}/children").read_text().split()]


async def test_a_burst_is_served_by_ready_sandboxes_then_they_are_made_again(ready: Sandbox, tmp_path: Path) -> None:
    searchable(tmp_path)
    script = "echo $$ > pid; id -u; echo made > out"
    results = await asyncio.gather(*(ready.run(["sh", "-c", script], tmp_path / f"w{i}", LIMITS) for i in range(2)))
    for i, result in enumerate(results):
        workspace = tmp_path / f"w{i}"
        assert result.exit_code == 0, result
        assert int(result.stdout) == workspace.stat().st_uid != 0  # the workspace's own identity
        assert (workspace / "pid").read_text() == "1\n"  # PID 1 of a namespace of its own
        assert (workspace / "out").read_text() == "made\n"  # written through to the host's directory
    assert ready.statistics().from_ready == 2
    await asyncio.wait_for(ready.wait_ready(2), 10)  # made again once the burst is over


async def test_each_ready_sandbox_serves_one_command(ready: Sandbox, tmp_path: Path) -> None:
    """A second command in the same workspace gets a new sandbox: a new /tmp, a new PID space."""
    first = await ready.run(["sh", "-c", "echo left > /tmp/mark; sleep 30 & echo $!"], tmp_path / "w", LIMITS)
    assert first.exit_code == 0 and first.stdout.strip().isdigit()
    await asyncio.wait_for(ready.wait_ready(1), 10)
    background = first.stdout.strip()
    second = await ready.run(["sh", "-c", f"cat /tmp/mark; kill -0 {background} || echo gone"], tmp_path / "w", LIMITS)
    assert "No such file" in second.stderr and second.stdout == "gone\n", second
    assert ready.statistics().from_ready == 2


async def test_the_workspace_is_resolved_as_the_host_resolves_it(ready: Sandbox, tmp_path: Path) -> None:
    """Through an absolute symbolic link: the fork server opens the path on the host's side."""
    real = tmp_path / "real"
    real.mkdir()
    searchable(real)
    searchable(tmp_path)
    (tmp_path / "link").symlink_to(real)
    result = await ready.run(["sh", "-c", "echo through > f; pwd"], tmp_path / "link" / "w", LIMITS)
    assert result.exit_code == 0, result
    assert (real / "w" / "f").read_text() == "through\n"
    assert ready.statistics().from_ready == 1


async def test_a_request_gets_the_tmp_size_it_asks_for(ready: Sandbox, tmp_path: Path) -> None:
    size = "python3 -c \"import os; s = os.statvfs('/tmp'); print(s.f_blocks * s.f_frsize)\""
    default = await ready.run(["sh", "-c", size], tmp_path / "a", LIMITS)
    await asyncio.wait_for(ready.wait_ready(2), 10)
    other = await ready.run(["sh", "-c", size], tmp_path / "b", CommandLimits(timeout_s=10, file_size_mb=3))
    assert int(default.stdout) == CommandLimits().file_size_mb << 20
    assert int(other.stdout) == 3 << 20
    assert ready.statistics().from_ready == 2


async def test_ready_sandboxes_end_with_the_fork_server(ready: Sandbox) -> None:
    waiting = members(ready)
    assert len(waiting) == 2
    await ready.close()
    await eventually(lambda: all(dead(pid) for pid in waiting), 5.0, "the ready sandboxes to end")


async def test_ready_sandboxes_end_when_the_fork_server_is_killed(ready: Sandbox) -> None:
    waiting = members(ready)
    zygote = ready._forks._proc
    assert zygote is not None
    zygote.send_signal(signal.SIGKILL)
    await asyncio.to_thread(zygote.wait)
    await eventually(lambda: all(dead(pid) for pid in waiting), 5.0, "the ready sandboxes to end")


async def test_failing_ready_sandboxes_are_given_up_and_commands_start_fresh(tmp_path: Path) -> None:
    sandbox = await started_sandbox(ready=False)
    forks: ForkServer = sandbox._forks
    namespaces = list((await sandbox.start()).namespaces)
    await forks.keep_ready(namespaces, 2, -1)  # a /tmp of -1 MB: every one fails its set-up
    await eventually(lambda: forks.statistics().ready_size == 0, 10.0, "the pool to be given up")
    result = await sandbox.run(["echo", "fresh"], tmp_path / "w", LIMITS)
    assert (result.exit_code, result.stdout, forks.statistics().from_ready) == (0, "fresh\n", 0)
    await sandbox.close()


def test_the_pool_size_is_bounded() -> None:
    assert SandboxConfig(ready_sandboxes=1024).ready_sandboxes == 1024
    for bad in (-1, 1025):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"ready_sandboxes": bad}, SandboxConfig)


async def test_without_ready_sandboxes_none_are_made(tmp_path: Path) -> None:
    sandbox = await started_sandbox(ready=False)
    assert (await sandbox.run(["true"], tmp_path / "w", LIMITS)).exit_code == 0
    assert members(sandbox) == [] and sandbox.statistics().ready == 0
    await sandbox.close()


def test_the_zygote_helpers_stay_stdlib_only() -> None:
    """The fork server runs with `-I -S`: its helpers must import nothing of the project's."""
    here = Path(__file__).parents[2] / "src" / "agentos" / "sandbox"
    for name in ("_zygote.py", "_ready.py", "_confine.py", "_mountns.py"):
        imports = [line for line in (here / name).read_text().splitlines() if line.startswith(("import ", "from "))]
        assert not [line for line in imports if "agentos" in line], name
    assert os.path.exists(here / "_ready.py")


async def test_a_workspace_that_cannot_be_copied_spends_no_ready_sandbox(ready: Sandbox, tmp_path: Path) -> None:
    """The copy is made before a ready sandbox is taken: the request starts fresh and fails
    there with the reason (exit 126), and both ready sandboxes still wait."""
    missing = str(tmp_path / "gone")
    status = await ready.start()
    waiting = members(ready)
    request = {
        "argv": ["true"],
        "cwd": missing,
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": [],
        "namespaces": list(status.namespaces),
        "identity": {"how": "setuid", "uid": 2_000_000_001, "gid": 2_000_000_001},
        "landlock": None,
        "mount": {"workspace": missing, "tmp_mb": 1},
    }
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    forks = ready._forks  # a test reaches in: Sandbox.run makes every workspace before it asks
    pid = await forks.spawn(request, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    assert await asyncio.wait_for(forks.wait(pid), 10) == 126
    stderr = await asyncio.to_thread(os.read, err_r, 4096)
    os.close(out_r)
    os.close(err_r)
    assert b"No such file" in stderr, stderr
    assert forks.statistics().from_ready == 0
    assert sorted(members(ready)) == sorted(waiting)  # the same two, not killed and made again


async def test_the_metrics_count_commands_fresh_and_ready(ready: Sandbox, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    registry.register(SandboxCollector(ready.statistics))
    assert (await ready.run(["true"], tmp_path / "w", LIMITS)).exit_code == 0
    await asyncio.wait_for(ready.wait_ready(2), 10)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("agentos_sandbox_commands_started_total", how="ready") == 1
    assert value("agentos_sandbox_commands_started_total", how="fresh") == 1  # the start-up probe
    assert value("agentos_sandbox_ready") == 2
    assert value("agentos_sandbox_commands_running") == 0
