"""run_command's confinement, with real processes."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentos.config import SandboxConfig
from agentos.config.agents import CommandLimits
from agentos.errors import InvalidInput
from agentos.sandbox import _landlock
from agentos.sandbox.command import check_argv
from agentos.sandbox.forkserver import ForkServer
from agentos.sandbox.sandbox import Sandbox
from agentos.testing import eventually

LIMITS = CommandLimits(timeout_s=5, output_max_bytes=1000)


@pytest.fixture(params=["fresh", "ready"])
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    """What a command sees, on any OS: a weaker sandbox where this one lacks a part
    (tests/sandbox/test_sandbox_escape.py holds the strict sandbox to its promises); each
    command started fresh, then the first command of each test taken by a ready sandbox."""
    ready = request.param == "ready"
    sandbox = Sandbox(SandboxConfig(allow_weaker=True, ready_sandboxes=2 if ready else 0))
    if ready:
        status = await sandbox.start()
        if status.identity != "setuid" or not status.namespaces:
            await sandbox.close()
            pytest.skip("ready sandboxes need the server to run as root, with a namespace")
        await asyncio.wait_for(sandbox.wait_ready(2), 10)
    yield sandbox
    await sandbox.close()


def test_a_string_command_is_rejected() -> None:
    with pytest.raises(InvalidInput, match="argv array"):
        check_argv("rm -rf /")
    for bad in ([], [1, 2], None, ["a\x00b"]):
        with pytest.raises(InvalidInput):
            check_argv(bad)
    assert check_argv(["ls", "-l"]) == ["ls", "-l"]


async def test_runs_in_its_own_directory(sandbox: Sandbox, tmp_path: Path) -> None:
    result = await sandbox.run(
        ["sh", "-c", "pwd; echo hi > f.txt; cat f.txt; echo oops >&2; exit 3"], tmp_path / "w", LIMITS
    )
    assert result.exit_code == 3 and not result.timed_out
    assert result.stdout == f"{tmp_path / 'w'}\nhi\n" and result.stderr == "oops\n"
    assert (tmp_path / "w" / "f.txt").read_text() == "hi\n"


async def test_a_relative_workdir_can_be_written(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 1 of issue 13: a relative workdir's Landlock rule was opened after `chdir`, failed,
    and was skipped without a word: every write in the workspace was then denied."""
    monkeypatch.chdir(tmp_path)
    result = await sandbox.run(["sh", "-c", "echo x > f; cat f"], Path("data/w"), LIMITS)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "x\n", "")
    assert (tmp_path / "data" / "w" / "f").read_text() == "x\n"


def test_the_policy_requires_the_workdir_rule_and_an_absolute_workdir() -> None:
    """The policy builder: only system paths may be skipped; the workspace rule must apply."""
    policy = _landlock.policy("/srv/agentos/data/workspaces/r1", abi=3)
    required = [path for path, _, must in policy["rules"] if must]
    assert required == ["/srv/agentos/data/workspaces/r1"]
    assert policy["rules"][-1][1] == policy["handled"]  # the workspace gets every handled right
    optional = {path for path, _, must in policy["rules"] if not must}
    assert {"/usr", "/lib64", "/dev/null"} <= optional
    with pytest.raises(ValueError, match="absolute"):
        _landlock.policy("data/workspaces/r1", abi=3)


async def spawn(request: dict[str, Any]) -> tuple[int, str]:
    """Run a raw fork-server request (a policy built here, not by `Sandbox.run`): exit code, output."""
    forks = ForkServer()
    out_r, out_w = os.pipe()
    try:
        pid = await forks.spawn(request, out_w, out_w)
    finally:
        os.close(out_w)
    try:
        exit_code = await asyncio.wait_for(forks.wait(pid), 10)
    finally:
        await forks.close()
    with os.fdopen(out_r, "rb") as out:  # the command has exited: its output is all in the pipe
        return exit_code, (await asyncio.to_thread(out.read)).decode()


def landlock_abi() -> int:
    abi = _landlock.abi_version()
    if not abi:
        pytest.skip("Landlock is not available on this kernel: the fork server applies no rules to test")
    return abi


async def test_a_rule_that_cannot_be_applied_fails_the_command(tmp_path: Path) -> None:
    """The workspace rule names a directory that is not there: the command does not run at all
    (before, the rule was skipped and the command ran under another policy)."""
    missing = tmp_path / "gone"
    request = {
        "argv": ["sh", "-c", "echo ran; echo ran > marker"],
        "cwd": str(tmp_path),
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": [],
        "namespaces": [],
        "identity": None,
        "landlock": _landlock.policy(str(missing), landlock_abi()),
    }
    exit_code, output = await spawn(request)
    assert exit_code == 126
    assert output == f"sandbox set-up failed: the Landlock rule for {missing} cannot be applied (it does not exist)\n"
    assert not (tmp_path / "marker").exists()


async def test_a_missing_system_directory_is_skipped(tmp_path: Path) -> None:
    """An optional rule (a system directory this OS lacks, like /lib64 on some) does not stop the command."""
    policy = _landlock.policy(str(tmp_path), landlock_abi())
    policy["rules"].insert(0, ["/no-such-system-directory", 1, False])
    request = {
        "argv": ["sh", "-c", "echo ran > marker; cat marker"],
        "cwd": str(tmp_path),
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": [],
        "namespaces": [],
        "identity": None,
        "landlock": policy,
    }
    assert await spawn(request) == (0, "ran\n")


async def test_cannot_read_the_servers_environment(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTOS_TEST_SECRET", "hunter2")
    server_env = f"/proc/{os.getpid()}/environ"
    script = f"env; cat /proc/$PPID/environ; cat /proc/1/environ; cat /proc/self/environ; cat {server_env}"
    result = await sandbox.run(["sh", "-c", script], tmp_path / "w", LIMITS)
    assert "hunter2" not in result.stdout + result.stderr
    assert "AGENTOS_TEST_SECRET" not in result.stdout
    names = {line.split("=")[0] for line in result.stdout.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "TMPDIR", "LANG", "PWD"}


async def test_the_operation_id_is_given(sandbox: Sandbox, tmp_path: Path) -> None:
    result = await sandbox.run(["sh", "-c", "echo $AGENTOS_OPERATION_ID"], tmp_path / "w", LIMITS, operation_id="r:2")
    assert result.stdout == "r:2\n"


async def test_cannot_write_outside_its_directory(sandbox: Sandbox, tmp_path: Path) -> None:
    if sandbox.statistics().landlock_abi == 0:
        pytest.skip("Landlock is not available on this kernel")
    outside = tmp_path / "outside.txt"
    script = f"echo x > {outside}; echo y > ../escape.txt; touch /tmp/agentos-escape-$$; mkdir ../d; echo done"
    result = await sandbox.run(["sh", "-c", script], tmp_path / "w", LIMITS)
    assert result.stdout == "done\n"
    assert not outside.exists() and not (tmp_path / "escape.txt").exists() and not (tmp_path / "d").exists()
    assert "Permission denied" in result.stderr


async def test_has_no_network(sandbox: Sandbox, tmp_path: Path) -> None:
    await sandbox.run(["true"], tmp_path / "w", LIMITS)  # the probe runs on first use
    if "network_namespace" in sandbox.statistics().missing:
        pytest.skip("this OS refuses network namespaces")
    probe = "import socket; socket.create_connection(('127.0.0.1', 9), timeout=1)"
    result = await sandbox.run(["python3", "-c", probe], tmp_path / "w", LIMITS)
    assert result.exit_code != 0
    assert "unreachable" in result.stderr or "refused" in result.stderr or "Errno" in result.stderr


@pytest.mark.slow
async def test_killed_at_its_timeout_with_its_children(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = CommandLimits(timeout_s=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    run = asyncio.ensure_future(sandbox.run(["sh", "-c", "sleep 30 & sleep 30"], tmp_path / "w", limits))
    await eventually(lambda: len(processes_in(tmp_path / "w")) >= 3, 5.0, "sh and both sleeps")  # pid ns: + its parent
    result = await run
    assert result.timed_out and result.exit_code is None
    assert loop.time() - started < 5
    await eventually(lambda: not processes_in(tmp_path / "w"), 2.0, "the background child to die with its group")


def processes_in(workdir: Path) -> list[int]:
    """The host pids of the live processes whose working directory is `workdir` (a command's
    own `$$` is its pid inside its PID namespace: 1)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "cwd") == str(workdir) and not dead(int(entry.name)):
                pids.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return pids


def dead(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


async def test_output_is_truncated_and_marked(sandbox: Sandbox, tmp_path: Path) -> None:
    result = await sandbox.run(["sh", "-c", "yes | head -c 100000; yes e | head -c 5000 >&2"], tmp_path / "w", LIMITS)
    assert result.exit_code == 0
    assert result.stdout_truncated and result.stderr_truncated
    assert result.stdout.endswith("[output truncated]") and len(result.stdout) < 1100


async def test_file_size_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = CommandLimits(file_size_mb=1)
    result = await sandbox.run(["sh", "-c", "head -c 3000000 /dev/zero > big"], tmp_path / "w", limits)
    assert result.exit_code != 0  # SIGXFSZ or EFBIG
    assert (tmp_path / "w" / "big").stat().st_size <= 1024 * 1024


async def test_a_command_killed_by_a_signal_reports_it(sandbox: Sandbox, tmp_path: Path) -> None:
    """The command is PID 1 of its namespace, behind a supervisor: its death by a signal still
    reaches the server as that signal, and leaves no core file."""
    result = await sandbox.run(["python3", "-c", "import ctypes; ctypes.string_at(0)"], tmp_path / "w", LIMITS)
    assert result.exit_code == -11
    assert not any(name.startswith("core") for name in os.listdir(tmp_path / "w"))


async def test_a_command_killed_from_outside_reports_the_signal(sandbox: Sandbox, tmp_path: Path) -> None:
    """What the OOM killer does: SIGKILL to the command alone (not to its supervisor, where a
    user namespace needs one outside its PID namespace)."""
    status = await sandbox.start()
    if "pid_namespace" in status.missing:
        pytest.skip("no PID namespace on this OS")
    supervised = status.identity == "userns"
    run = asyncio.ensure_future(sandbox.run(["sleep", "30"], tmp_path / "w", LIMITS))
    count = 2 if supervised else 1
    await eventually(lambda: len(processes_in(tmp_path / "w")) == count, 5.0, f"{count} processes")
    pids = processes_in(tmp_path / "w")
    command = next(pid for pid in pids if parent_pid(pid) in pids) if supervised else pids[0]
    os.kill(command, signal.SIGKILL)
    result = await run
    assert (result.exit_code, result.stderr) == (-9, "")


async def test_as_root_the_command_is_born_pid_1_with_nothing_outside(sandbox: Sandbox, tmp_path: Path) -> None:
    """As root (identity by setuid) the command is cloned into its namespaces: its parent is the
    fork server itself, it is PID 1 inside, and no supervisor process waits outside for it."""
    status = await sandbox.start()
    if status.identity != "setuid" or "pid_namespace" in status.missing:
        pytest.skip("needs root and a PID namespace")
    run = asyncio.ensure_future(sandbox.run(["sleep", "30"], tmp_path / "w", LIMITS))
    await eventually(lambda: len(processes_in(tmp_path / "w")) == 1, 5.0, "the command")
    [command] = processes_in(tmp_path / "w")
    parent = proc_file(parent_pid(command), "cmdline").split("\0")
    assert any(arg.endswith("_zygote.py") for arg in parent), parent
    nspid = next(line for line in proc_file(command, "status").splitlines() if line.startswith("NSpid"))
    assert nspid.split()[-1] == "1"
    os.killpg(command, signal.SIGKILL)
    assert (await run).exit_code == -9


def proc_file(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_text()


def parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


async def test_a_missing_program(sandbox: Sandbox, tmp_path: Path) -> None:
    result = await sandbox.run(["no-such-program-xyz"], tmp_path / "w", LIMITS)
    assert result.exit_code == 127 and "no-such-program-xyz" in result.stderr


async def test_many_commands_at_once(sandbox: Sandbox, tmp_path: Path) -> None:
    """More requests than the fork server's socket buffer holds: senders queue, none is lost."""
    results = await asyncio.gather(
        *(sandbox.run(["sh", "-c", f"echo {i}"], tmp_path / f"w{i}", LIMITS) for i in range(150))
    )
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(150)]


async def test_the_fork_server_comes_back_after_it_dies(sandbox: Sandbox, tmp_path: Path) -> None:
    assert (await sandbox.run(["true"], tmp_path / "w", LIMITS)).exit_code == 0
    zygote = sandbox._forks._proc  # a test reaches in to kill it
    assert zygote is not None
    zygote.kill()
    await asyncio.to_thread(zygote.wait)
    results = [await sandbox.run(["echo", "back"], tmp_path / "w", LIMITS) for _ in range(2)]
    assert [r.stdout for r in results] == ["back\n", "back\n"]


async def test_commands_die_with_the_server_side(tmp_path: Path) -> None:
    """Closing (or losing) the server's end of the fork server kills the commands still running."""
    sandbox = Sandbox(SandboxConfig(allow_weaker=True))
    run = asyncio.ensure_future(sandbox.run(["sh", "-c", "sleep 30"], tmp_path / "w", LIMITS))
    await eventually(lambda: bool(processes_in(tmp_path / "w")), 5.0, "the command to start")
    sandbox._forks._detach(ConnectionError("simulated loss of the server"))  # what a crash looks like to it
    await eventually(lambda: not processes_in(tmp_path / "w"), 5.0, "the command to die")
    with pytest.raises(ConnectionError):
        await run
    await sandbox.close()
