"""Issue 8: the sandbox fails closed. Where the OS lacks a part, `run_command` is refused with a
clear error unless `sandbox.allow_weaker` is set; `/readyz` and the start-up log say which."""

from __future__ import annotations

import asyncio
import json
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from agentos.sandbox import _landlock
from agentos.sandbox.isolation import IdentityKind, TryParts, probe
from tests.conftest import child_env

REPOSITORY = Path(__file__).resolve().parents[2]
SCOPING = list(_landlock.scopes(_landlock.abi_version()))


def os_without(*refused: str) -> TryParts:
    """`try_parts` of an OS that refuses these namespaces ("pid", "net", "mount") or identities ("setuid", "userns")."""

    async def try_parts(namespaces: list[str], identity: IdentityKind | None, landlock: bool) -> str:
        asked = [*namespaces, *([identity] if identity else [])]
        failing = [part for part in asked if part in refused]
        return f"{failing[0]} refused" if failing else ""

    return try_parts


async def test_an_os_with_every_part_is_strict() -> None:
    status = await probe(os_without(), root=True, landlock_abi=3, allow_weaker=False)
    assert (status.mode, status.missing, status.identity, status.namespaces) == (
        "strict",
        (),
        "setuid",
        ("pid", "net", "mount"),
    )
    assert status.to_dict() == {"mode": "strict", "missing": [], "landlock_scoping": []}
    scoped = await probe(os_without(), root=True, landlock_abi=6, allow_weaker=False, scoping=("signal",))
    assert scoped.to_dict()["landlock_scoping"] == ["signal"] and "Landlock scoping: signal" in scoped.summary()


async def test_a_missing_part_refuses_commands_unless_weaker_is_allowed() -> None:
    refused = await probe(os_without("net"), root=True, landlock_abi=3, allow_weaker=False)
    assert refused.to_dict() == {"mode": "refused", "missing": ["network_namespace"], "landlock_scoping": []}
    assert "a network namespace" in refused.refusal() and "sandbox.allow_weaker" in refused.refusal()
    weaker = await probe(os_without("net"), root=True, landlock_abi=3, allow_weaker=True)
    assert (weaker.mode, weaker.missing, weaker.namespaces, weaker.identity) == (
        "weaker",
        ("network_namespace",),
        ("pid", "mount"),
        "setuid",
    )
    no_landlock = await probe(os_without(), root=False, landlock_abi=0, allow_weaker=False)
    assert no_landlock.missing == ("landlock",) and no_landlock.identity == "userns"
    no_mount = await probe(os_without("mount"), root=True, landlock_abi=6, allow_weaker=True, scoping=("signal",))
    assert (no_mount.mode, no_mount.missing, no_mount.namespaces) == ("weaker", ("mount_namespace",), ("pid", "net"))
    assert no_mount.scoping == ("signal",)  # Landlock still scopes what it can


async def test_root_that_cannot_change_uid_maps_itself_in_a_user_namespace() -> None:
    status = await probe(os_without("setuid"), root=True, landlock_abi=3, allow_weaker=False)
    assert (status.mode, status.identity) == ("strict", "userns")
    nothing = await probe(os_without("setuid", "userns"), root=True, landlock_abi=3, allow_weaker=False)
    assert nothing.missing == ("identity",) and nothing.identity is None


async def serve_without_mounts(data_dir: Path) -> tuple[dict[str, Any], str]:
    """The real server under a seccomp filter that refuses `mount` (tests/sandbox/sandbox_child.py)."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the seccomp filter knows mount's number on x86_64 and aarch64 only")
    child = [sys.executable, "-m", "tests.sandbox.sandbox_child", str(data_dir), "0", "no-mount"]
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(*child, env=child_env(), cwd=REPOSITORY, stdout=pipe, stderr=pipe)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out), err.decode()


async def test_without_a_mount_namespace_commands_are_refused(tmp_path: Path) -> None:
    """Issue 14: where no mount namespace can be set up, no command runs (unless weaker is allowed)."""
    report, log = await serve_without_mounts(tmp_path / "data")
    sandbox = report["readyz"]["sandbox"]
    if "mount_namespace" not in sandbox["missing"] or sandbox["missing"] != ["mount_namespace"]:
        pytest.skip(f"this OS lacks more than a mount namespace: {sandbox}")
    assert sandbox["mode"] == "refused"
    assert report["tool_result"] == {
        "error": "run_command is refused: this server cannot give commands a mount namespace, "
        "and its administrator has not allowed a weaker sandbox (sandbox.allow_weaker)"
    }
    assert "sandbox: run_command is refused: this OS cannot give commands a mount namespace" in log
    assert "sandbox: a mount namespace is unavailable: sandbox set-up failed: [Errno 1] mount /: " in log  # why


async def serve_without_an_identity(data_dir: Path, allow_weaker: bool) -> tuple[dict[str, object], str]:
    """The real server in a user namespace where root cannot change uid (other uids are unmapped)
    and no further user namespace may be made: no identity of its own for commands."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make an OS without the identity part")
    limit = "echo 0 > /proc/sys/user/max_user_namespaces"
    child = f"{limit} && exec {sys.executable} -m tests.sandbox.sandbox_child {data_dir} {int(allow_weaker)}"
    proc = await asyncio.create_subprocess_exec(
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        child,
        env=child_env(),
        cwd=REPOSITORY,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    if proc.returncode != 0 and b"unshare failed" in err:
        pytest.skip(f"this OS does not let us make a user namespace: {err.decode().strip()}")
    assert proc.returncode == 0, err.decode()
    return json.loads(out), err.decode()


async def test_commands_are_refused_and_readyz_and_the_log_say_why(tmp_path: Path) -> None:
    report, log = await serve_without_an_identity(tmp_path / "data", allow_weaker=False)
    assert report["readyz"] == {
        "status_code": 200,
        "status": "ready",
        "store": "ok",
        "sandbox": {"mode": "refused", "missing": ["identity"], "landlock_scoping": SCOPING},
    }
    assert report["tool_result"] == {
        "error": "run_command is refused: this server cannot give commands an identity of its own, "
        "and its administrator has not allowed a weaker sandbox (sandbox.allow_weaker)"
    }
    assert "sandbox: run_command is refused: this OS cannot give commands an identity of its own" in log


async def test_allow_weaker_runs_commands_and_says_so(tmp_path: Path) -> None:
    report, log = await serve_without_an_identity(tmp_path / "data", allow_weaker=True)
    assert report["readyz"] == {
        "status_code": 200,
        "status": "ready",
        "store": "ok",
        "sandbox": {"mode": "weaker", "missing": ["identity"], "landlock_scoping": SCOPING},
    }
    result = report["tool_result"]
    assert isinstance(result, dict) and (result["exit_code"], result["stdout"]) == (0, "ran\n")
    assert "sandbox: WEAKER, allowed by sandbox.allow_weaker: commands run without an identity of its own" in log
