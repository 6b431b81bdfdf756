"""Issue 8: commands that try to break out of the strict sandbox, with the real fork server.

Every test here needs the strict sandbox (a PID namespace, an identity of the workspace's own,
a network namespace, Landlock) and is skipped, saying which part is missing, on an OS without
it. Before a test sends `kill -9 -1` or starts a fork bomb it first proves, harmlessly, that a
command cannot signal a process outside the sandbox: run against a sandbox without a PID
namespace (the code before issue 8, as root), that check fails the test instead of letting the
command kill every process on the machine.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agentos.config import SandboxConfig, Settings, settings_from_dict
from agentos.config.agents import CommandLimits
from agentos.providers.base import ChatRequest, Completion
from agentos.sandbox.isolation import SandboxStatus
from agentos.sandbox.sandbox import Sandbox
from agentos.services import open_services
from agentos.testing import RunningServer, eventually, serve_services
from tests.agents.fakes import ScriptedProvider, answer, call
from tests.api.helpers import new_session, turn_events
from tests.sandbox.test_sandbox import processes_in, spawn

LIMITS = CommandLimits(timeout_s=10, output_max_bytes=4000)


@pytest.fixture(params=["fresh", "ready"])
async def strict(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    """The strict sandbox, twice: each command started fresh, and the first command of each
    test taken by a ready sandbox (confined ahead of time: `agentos.sandbox._ready`)."""
    sandbox = await started_sandbox(ready=request.param == "ready")
    yield sandbox
    await sandbox.close()


async def started_sandbox(*, ready: bool) -> Sandbox:
    """The strict sandbox, started; with `ready`, once two ready sandboxes wait (else skipped)."""
    sandbox = Sandbox(SandboxConfig(ready_sandboxes=2 if ready else 0))
    status = await sandbox.start()
    if status.mode != "strict":
        await sandbox.close()
        pytest.skip(f"this OS cannot give the strict sandbox: missing {', '.join(status.missing)}")
    if ready and status.identity != "setuid":
        await sandbox.close()
        pytest.skip("ready sandboxes need the server to run as root (identity by setuid)")
    if ready:
        await asyncio.wait_for(sandbox.wait_ready(2), 10)
    return sandbox


@pytest.fixture
async def victim() -> AsyncIterator[asyncio.subprocess.Process]:
    """A process of the server's user, outside every sandbox."""
    proc = await asyncio.create_subprocess_exec("sleep", "60")
    yield proc
    if proc.returncode is None:
        proc.kill()
    await proc.wait()


def started(sandbox: Sandbox) -> SandboxStatus:
    """What the started `sandbox` found."""
    status = sandbox.status()
    assert status is not None
    return status


def searchable(directory: Path) -> None:
    """Searchable by every uid (pytest makes its directories 0700)."""
    directory.chmod(0o711)


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


async def assert_cannot_signal(sandbox: Sandbox, pid: int, workdir: Path) -> None:
    """A command cannot even test whether `pid` exists (`kill -0`): it is outside its PID namespace."""
    result = await sandbox.run(["sh", "-c", f"kill -0 {pid} && echo REACHED; echo $$"], workdir, LIMITS)
    assert "REACHED" not in result.stdout, f"a command can signal process {pid}: {result}"
    assert result.stdout == "1\n"  # the command is the init of a PID namespace of its own


async def test_kill_all_reaches_only_its_own_tree(
    strict: Sandbox, tmp_path: Path, victim: asyncio.subprocess.Process
) -> None:
    zygote = strict._forks._proc  # the fork server, reached into to watch it survive
    assert zygote is not None
    await assert_cannot_signal(strict, victim.pid, tmp_path / "a")
    neighbour_dir = tmp_path / "b"
    script = "echo started > started; while [ ! -e go ]; do sleep 0.05; done; echo neighbour-ok"
    neighbour = asyncio.ensure_future(strict.run(["sh", "-c", script], neighbour_dir, LIMITS))
    await eventually(lambda: (neighbour_dir / "started").exists(), 5.0, "the neighbour command to start")
    targets = f"{os.getpid()} {zygote.pid} {victim.pid}"
    attack = f"sleep 30 & kill -9 -1; kill -9 {targets}; kill -9 -1; echo survived"
    result = await strict.run(["sh", "-c", attack], tmp_path / "a", LIMITS)
    assert result.exit_code == 0 and result.stdout == "survived\n"
    assert victim.returncode is None and zygote.poll() is None
    (neighbour_dir / "go").touch()
    assert (await neighbour).stdout == "neighbour-ok\n"
    assert (await strict.run(["echo", "next"], tmp_path / "a", LIMITS)).stdout == "next\n"


async def test_another_runs_workspace_is_unreadable(strict: Sandbox, tmp_path: Path) -> None:
    searchable(tmp_path)  # only the workspaces' own owners and modes stand in the way
    a, b = tmp_path / "a", tmp_path / "b"
    written = await strict.run(["sh", "-c", "echo secret-a > secret; mkdir sub; echo secret-s > sub/f"], a, LIMITS)
    assert written.exit_code == 0
    snoop = f"cat ../a/secret {a}/secret ../a/sub/f; ls ../a {a}; echo end"
    result = await strict.run(["sh", "-c", snoop], b, LIMITS)
    assert "secret" not in result.stdout and result.stdout == "end\n"
    assert result.stderr.count("No such file or directory") == 5  # its own root holds its own workspace only
    assert (await strict.run(["cat", "secret", "sub/f"], a, LIMITS)).stdout == "secret-a\nsecret-s\n"  # its own


async def test_workspaces_belong_to_their_own_identity(strict: Sandbox, tmp_path: Path) -> None:
    """The identity layer on its own, Landlock aside: another workspace's uid cannot read it."""
    searchable(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    inside = set()
    for workdir in (a, b):
        result = await strict.run(["sh", "-c", "echo mine > f; id -u; id -G"], workdir, LIMITS)
        uid, groups = result.stdout.split()
        assert uid == groups and uid != "0"  # its workspace's uid, no other group, never root
        inside.add(uid)
    assert len(inside) == 2
    assert {os.stat(w).st_mode & 0o777 for w in (a, b)} == {0o700}
    if started(strict).identity != "setuid":
        pytest.skip("a user namespace maps every workspace to the server's uid: Landlock alone keeps them apart")
    assert {str(os.stat(a).st_uid), str(os.stat(b).st_uid)} == inside == {str(os.stat(w / "f").st_uid) for w in (a, b)}
    uid_b = os.stat(b).st_uid
    request = {
        "argv": ["sh", "-c", "cat ../a/f; echo end"],
        "cwd": str(b),
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": [],
        "namespaces": ["pid"],
        "identity": {"how": "setuid", "uid": uid_b, "gid": uid_b},
        "landlock": None,
    }
    exit_code, output = await spawn(request)
    assert (exit_code, output) == (0, "cat: ../a/f: Permission denied\nend\n")


async def test_cannot_write_outside_its_workspace(strict: Sandbox, tmp_path: Path) -> None:
    searchable(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    assert (await strict.run(["true"], a, LIMITS)).exit_code == 0
    marker = f"agentos-escape-{uuid.uuid4().hex}"
    targets = ["../escape", f"{tmp_path}/escape", "../a/planted", f"{a}/planted"]
    targets += [f"/tmp/{marker}", f"/dev/shm/{marker}"]
    script = "; ".join(f"echo x > {t}" for t in targets) + "; mkdir ../d; ln -s / ../link; echo end"
    result = await strict.run(["sh", "-c", script], b, LIMITS)
    assert result.stdout == "end\n"
    assert names(tmp_path) == [a.name, b.name] and names(a) == [".tmp"]
    assert marker not in names(Path("/tmp")) + names(Path("/dev/shm"))


async def test_cannot_read_the_servers_environment(
    strict: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTOS_ESCAPE_SECRET", "hunter2")
    server = os.getpid()
    script = f"cat /proc/{server}/environ; cat /proc/{server}/cmdline; ls /proc; cat /proc/1/environ; echo end"
    result = await strict.run(["sh", "-c", script], tmp_path / "w", LIMITS)
    assert "hunter2" not in result.stdout + result.stderr and result.stdout == "end\n"
    if started(strict).identity != "setuid":
        return
    # Without Landlock, the identity still keeps it out: another uid may not read a process's environ.
    uid = os.stat(tmp_path / "w").st_uid
    request = {
        "argv": ["sh", "-c", f"cat /proc/{server}/environ; echo end"],
        "cwd": str(tmp_path / "w"),
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": [],
        "namespaces": ["pid"],
        "identity": {"how": "setuid", "uid": uid, "gid": uid},
        "landlock": None,
    }
    exit_code, output = await spawn(request)
    assert "hunter2" not in output and "Permission denied" in output and output.endswith("end\n")


async def test_cannot_connect_to_the_servers_port(strict: Sandbox, tmp_path: Path) -> None:
    connections: list[object] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer.get_extra_info("peername"))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
        result = await strict.run(["python3", "-c", probe], tmp_path / "w", LIMITS)
        assert result.exit_code != 0 and "connected" not in result.stdout
        assert "Network is unreachable" in result.stderr or "Connection refused" in result.stderr
        assert connections == []
    finally:
        server.close()
        await server.wait_closed()


# The classic bomb in the background, then a loop that forks (keeping every child) until a
# fork fails, says so in `limit`, and waits for `go`.
BOMB = """(f(){ f | f & }; f) & exec python3 -c '
import os, signal, time
forked = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        signal.pause()
    forked += 1
open("limit", "w").close()
while not os.path.exists("go"):
    time.sleep(0.02)
print(forked)
'"""


async def test_a_fork_bomb_is_contained(strict: Sandbox, tmp_path: Path, victim: asyncio.subprocess.Process) -> None:
    await assert_cannot_signal(strict, victim.pid, tmp_path / "a")
    who = await strict.run(["id", "-u"], tmp_path / "a", LIMITS)
    assert who.stdout.strip() not in ("", "0"), "RLIMIT_NPROC does not bind root: no fork bomb as root"
    limits = CommandLimits(timeout_s=20, cpu_s=20, max_processes=40)
    running = asyncio.ensure_future(strict.run(["sh", "-c", BOMB], tmp_path / "a", limits))
    await eventually(lambda: (tmp_path / "a" / "limit").exists(), 10.0, "the bomb to reach its limit")
    assert len(processes_in(tmp_path / "a")) <= limits.max_processes + 1  # + the supervisor, outside
    neighbour = await strict.run(["echo", "neighbour"], tmp_path / "b", LIMITS)  # another uid: its own budget
    assert neighbour.stdout == "neighbour\n"
    (tmp_path / "a" / "go").touch()
    result = await running
    assert result.exit_code == 0 and int(result.stdout) < limits.max_processes
    await eventually(lambda: not processes_in(tmp_path / "a"), 5.0, "the bomb to die with its namespace")
    assert (await strict.run(["echo", "next"], tmp_path / "a", LIMITS)).stdout == "next\n"


async def test_the_timeout_kills_processes_that_left_the_group(strict: Sandbox, tmp_path: Path) -> None:
    """`setsid` escapes the process group the timeout kills, but not the PID namespace."""
    limits = CommandLimits(timeout_s=0.5)
    result = await strict.run(["sh", "-c", "setsid sleep 30 & sleep 30"], tmp_path / "w", limits)
    assert result.timed_out
    await eventually(lambda: not processes_in(tmp_path / "w"), 5.0, "the escaped sleep to die")


async def test_a_run_that_kills_everything_leaves_the_server_serving(
    tmp_path: Path, http: aiohttp.ClientSession, victim: asyncio.subprocess.Process
) -> None:
    """End to end: an agent's command runs `kill -9 -1` and `kill -9 <server pid>`; the run
    completes, and the next chat turn is served."""
    guard = Sandbox(SandboxConfig())
    try:
        if (status := await guard.start()).mode != "strict":
            pytest.skip(f"this OS cannot give the strict sandbox: missing {', '.join(status.missing)}")
        await assert_cannot_signal(guard, victim.pid, tmp_path / "guard")
    finally:
        await guard.close()
    attack: dict[str, object] = {"command": ["sh", "-c", f"kill -9 -1; kill -9 {os.getpid()}; echo survived"]}

    def model(request: ChatRequest) -> Completion:
        if not request.tools:  # a plain chat turn
            return answer("pong")
        last = request.messages[-1]
        return answer(str(last["content"])) if last["role"] == "tool" else call("run_command", attack)

    settings = settings_from_dict({"data_dir": str(tmp_path / "data"), "agents": {"ops": {"tools": ["run_command"]}}})
    server = await start(settings, ScriptedProvider(model))
    try:
        async with http.get(f"{server.url}/readyz") as r:
            sandbox = (await r.json())["sandbox"]
            assert sandbox == {"mode": "strict", "missing": [], "landlock_scoping": list(started(guard).scoping)}
        events = await turn_events(http, server.url, await new_session(http, server.url, agent="ops"), "attack")
        assert events[-1].name == "turn.completed"
        assert json.loads(events[-1].data["result"])["stdout"] == "survived\n"
        chat = await turn_events(http, server.url, await new_session(http, server.url), "ping")
        assert chat[-1].name == "turn.completed"
        assert "".join(e.data["delta"] for e in chat if e.name == "token") == "pong"
        assert victim.returncode is None
    finally:
        await server.close()


async def start(settings: Settings, provider: ScriptedProvider) -> RunningServer:
    return await serve_services(await open_services(settings, provider=provider))


async def test_cannot_reach_the_hosts_abstract_unix_sockets(strict: Sandbox, tmp_path: Path) -> None:
    name = f"agentos-escape-{uuid.uuid4().hex}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"\0{name}")
    listener.listen()
    try:
        probe = f"import socket; socket.socket(socket.AF_UNIX).connect('\\0{name}'); print('connected')"
        result = await strict.run(["python3", "-c", probe], tmp_path / "w", LIMITS)
        assert result.exit_code != 0 and "Connection refused" in result.stderr
    finally:
        listener.close()


async def test_cannot_regain_privileges(strict: Sandbox, tmp_path: Path) -> None:
    """No capabilities (it cannot become root) and no new privileges (setuid binaries give none)."""
    probe = """
import ctypes, os
print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))  # PR_GET_NO_NEW_PRIVS
for attempt in (lambda: os.setuid(0), lambda: os.setgroups([0]), lambda: os.chroot(".")):
    try:
        attempt()
        print("allowed")
    except OSError:  # EPERM; EINVAL for an id a user namespace does not map
        print("refused")
"""
    result = await strict.run(["python3", "-c", probe], tmp_path / "w", LIMITS)
    assert result.stdout == "1\nrefused\nrefused\nrefused\n", result


async def test_cannot_see_the_hosts_system_v_ipc(strict: Sandbox, tmp_path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    key = uuid.uuid4().int & 0x7FFFFFFF
    shm = libc.shmget(key, 4096, 0o1000 | 0o666)  # IPC_CREAT, readable and writable by everyone
    assert shm >= 0, os.strerror(ctypes.get_errno())
    try:
        probe = f"import ctypes; print(ctypes.CDLL(None).shmget({key}, 0, 0))"
        assert (await strict.run(["python3", "-c", probe], tmp_path / "w", LIMITS)).stdout == "-1\n"
    finally:
        libc.shmctl(shm, 0, None)  # IPC_RMID


async def test_a_workspace_made_before_is_handed_to_its_identity(strict: Sandbox, tmp_path: Path) -> None:
    """A workspace an earlier version made (owned by the server's user) becomes the run's own,
    whole, once; a symbolic link in it is not followed out of it."""
    workdir, outside = make_old_workspace(tmp_path)
    result = await strict.run(["sh", "-c", "echo more >> notes; echo x > sub/new; cat notes"], workdir, LIMITS)
    assert (result.exit_code, result.stdout) == (0, "old\nmore\n"), result
    uid = os.stat(workdir).st_uid
    assert {
        os.stat(p, follow_symlinks=False).st_uid for p in (workdir / "notes", workdir / "sub", workdir / "link")
    } == {uid}
    assert os.stat(outside).st_uid == os.getuid()


def make_old_workspace(tmp_path: Path) -> tuple[Path, Path]:
    workdir, outside = tmp_path / "w", tmp_path / "outside"
    (workdir / "sub").mkdir(parents=True)
    (workdir / "notes").write_text("old\n")
    outside.write_text("the server's\n")
    (workdir / "link").symlink_to(outside)
    return workdir, outside
