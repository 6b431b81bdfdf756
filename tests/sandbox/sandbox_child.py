"""The real server, started where the OS lacks a sandbox part: reports what it says about it.

    python -m tests.sandbox.sandbox_child DATA_DIR ALLOW_WEAKER(0|1) [no-mount]

`no-mount`: a seccomp filter first refuses the `mount` syscall to this process and everything it
starts (as a container runtime's default profile does): no mount namespace can be set up.

Starts the services and the HTTP app as `agentos serve` does (its log to stderr), asks
`/readyz`, runs an agent whose model calls `run_command` once, and prints one JSON line:
`{"readyz": {...}, "tool_result": {...}}` (what the model was given).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import json
import logging
import platform
import struct
import sys

import aiohttp

from agentos.config import settings_from_dict
from agentos.providers.base import ChatRequest, Completion
from agentos.services import open_services
from agentos.testing import serve_services
from tests.agents.fakes import ScriptedProvider, answer, call
from tests.agents.test_service import wait_status


def model(request: ChatRequest) -> Completion:
    last = request.messages[-1]
    if last["role"] == "tool":
        return answer(str(last["content"]))
    return call("run_command", {"command": ["sh", "-c", "echo ran"]})


async def main(data_dir: str, allow_weaker: bool) -> None:
    settings = settings_from_dict(
        {"data_dir": data_dir, "sandbox": {"allow_weaker": allow_weaker}, "agents": {"ops": {"tools": ["run_command"]}}}
    )
    services = await open_services(settings, provider=ScriptedProvider(model))
    server = await serve_services(services)
    try:
        url = f"{server.url}/readyz"
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            readyz = {"status_code": r.status, **(await r.json())}
        run_id = await services.runs.start_run("default", "ops", "go")
        info = await wait_status(services.runs, run_id, "completed")
        print(json.dumps({"readyz": readyz, "tool_result": json.loads(str(info["result"]))}), flush=True)
    finally:
        await server.close()


# (audit arch, mount's number) per machine
_MOUNT_SYSCALL = {"x86_64": (0xC000003E, 165), "aarch64": (0xC00000B7, 40)}


def refuse_mount() -> None:
    """A seccomp filter: `mount` fails with EPERM; any other syscall (and other arches) is allowed."""
    arch, number = _MOUNT_SYSCALL[platform.machine()]
    allow, refuse = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    program = [
        (0x20, 0, 0, 4),
        (0x15, 1, 0, arch),
        (0x06, 0, 0, allow),  # load arch; other arch: allow
        (0x20, 0, 0, 0),
        (0x15, 0, 1, number),
        (0x06, 0, 0, refuse),
        (0x06, 0, 0, allow),
    ]
    filters = b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(filters, len(filters))
    fprog = struct.pack("@HP", len(program), ctypes.addressof(buffer))  # struct sock_fprog
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.create_string_buffer(fprog, len(fprog)), 0, 0):
        raise OSError(ctypes.get_errno(), "seccomp")  # PR_SET_NO_NEW_PRIVS; PR_SET_SECCOMP, SECCOMP_MODE_FILTER


if __name__ == "__main__":
    if sys.argv[3:] == ["no-mount"]:
        refuse_mount()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(sys.argv[1], sys.argv[2] == "1"))
