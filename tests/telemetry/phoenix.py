"""Arize Phoenix on loopback: the real trace store the telemetry tests send to, and what it
stored, read back over its REST API.

Phoenix lives in a venv of its own (`.ci/phoenix` installs it: into ours it would downgrade
two of our packages). `start_phoenix` runs `phoenix serve` from that venv on 127.0.0.1 and a
free port, its database in a fresh working directory, and returns once `/readyz` answers (its
database is up); `Phoenix.stop` ends that process, by its PID. Without that venv the tests are
skipped with the reason, unless TEST_TRACES_REQUIRED=1 (CI sets it: a skip there would hide a
failure), as tests/postgres.py does for PostgreSQL.

What Phoenix 20.26.1 keeps of an OTLP span, and so what a test can read back: trace and span
ids, the parent's span id, name, start and end, status code and message, attributes (lists as
lists) and events with their attributes. To the attributes it adds OpenInference ones of its own
derived from the GenAI ones (`llm.model_name`, `llm.token_count.prompt`, `llm.finish_reason`):
compare a GenAI span's attributes key by key, not as a whole. It does NOT keep span links, the
span kind, nor resource attributes (`service.name`): `phoenix/trace/otel.py` `decode_otlp_span`
drops them. A link is proven on the wire (tests/telemetry/otlp_sink.py), not here.

Usage::

    stored = await phoenix.trace(http, trace_id, at_least=3)
    (turn,) = stored.named("turn")
    assert stored.parent(turn).name == "POST /v1/sessions/{session_id}/turns"
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentos.testing import eventually

REPO = Path(__file__).resolve().parents[2]
VERSION = "20.26.1"  # .ci/phoenix installs this one
VENV = Path(os.environ.get("TEST_PHOENIX_VENV") or REPO / ".venv-phoenix")
REQUIRED = os.environ.get("TEST_TRACES_REQUIRED") == "1"
# Measured on this 2-core machine, shared: 40-48 s from exec to /readyz under a load of 10
# (22 s of it importing), 9-25 s under less. Bounded well above: one that never answers fails.
START_TIMEOUT_S = 150.0
PROJECT = "default"  # where spans without an `openinference.project.name` resource go


@dataclass(frozen=True)
class StoredEvent:
    name: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class StoredSpan:
    """One span as Phoenix stored it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    status: str  # OK | ERROR | UNSET
    status_message: str
    attributes: dict[str, Any]
    events: tuple[StoredEvent, ...]

    def event(self, name: str) -> StoredEvent:
        """The one event named `name`."""
        found = [e for e in self.events if e.name == name]
        assert len(found) == 1, (name, [e.name for e in self.events])
        return found[0]

    @property
    def event_names(self) -> list[str]:
        return [e.name for e in self.events]


def _stored(row: dict[str, Any]) -> StoredSpan:
    return StoredSpan(
        trace_id=row["context"]["trace_id"],
        span_id=row["context"]["span_id"],
        parent_id=row.get("parent_id"),
        name=row["name"],
        status=row["status_code"],
        status_message=row.get("status_message") or "",
        attributes=dict(row.get("attributes") or {}),
        events=tuple(StoredEvent(e["name"], dict(e.get("attributes") or {})) for e in row.get("events") or ()),
    )


@dataclass
class StoredTrace:
    """The spans of one trace, with their relations."""

    trace_id: str
    spans: list[StoredSpan]

    def named(self, name: str) -> list[StoredSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> StoredSpan:
        found = self.named(name)
        assert len(found) == 1, (name, self.names())
        return found[0]

    def parent(self, span: StoredSpan) -> StoredSpan | None:
        """The parent stored in this trace (None for a root, or a parent in the caller's process)."""
        return next((s for s in self.spans if s.span_id == span.parent_id), None)

    def children(self, span: StoredSpan) -> list[StoredSpan]:
        return [s for s in self.spans if s.parent_id == span.span_id]

    def names(self) -> list[str]:
        return sorted(s.name for s in self.spans)

    def edges(self) -> set[tuple[str, str]]:
        """(parent name, child name) of every span whose parent is in this trace: the tree's shape."""
        return {(parent.name, s.name) for s in self.spans if (parent := self.parent(s)) is not None}


@dataclass
class Phoenix:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log_path: Path
    started_in_s: float  # from exec to /readyz answering

    @property
    def otlp_endpoint(self) -> str:
        """Where an OTLP/HTTP exporter sends traces (`[telemetry] endpoint`)."""
        return f"{self.url}/v1/traces"

    async def spans_where(
        self,
        http: aiohttp.ClientSession,
        *,
        trace_id: str = "",
        name: str = "",
        attributes: dict[str, str | int | bool] | None = None,
        at_least: int = 1,
        timeout_s: float = 15.0,
    ) -> list[StoredSpan]:
        """The stored spans matching every filter given (Phoenix filters them), once at least
        `at_least` of them have arrived; bounded: fails after `timeout_s`.

        The exporter sends from a background thread and Phoenix inserts in batches: a span the
        server has ended shows up here a moment later, so this polls (another process's state)."""
        params: list[tuple[str, str]] = [("limit", "1000")]
        if trace_id:
            params.append(("trace_id", trace_id))
        if name:
            params.append(("name", name))
        for key, value in (attributes or {}).items():
            params.append(("attribute", f"{key}:{json.dumps(value)}"))  # JSON: a string stays a string
        found: list[StoredSpan] = []

        async def arrived() -> bool:
            nonlocal found
            async with http.get(f"{self.url}/v1/projects/{PROJECT}/spans", params=params) as response:
                if response.status == 404:  # no span stored yet: the project does not exist
                    return False
                assert response.status == 200, await response.text()
                found = [_stored(row) for row in (await response.json())["data"]]
            return len(found) >= at_least

        what = f"{at_least} span(s) in Phoenix where {params[1:]}; got {[s.name for s in found]}"
        await eventually(arrived, timeout_s=timeout_s, what=what)
        return found

    async def trace(
        self, http: aiohttp.ClientSession, trace_id: str, *, at_least: int, timeout_s: float = 15.0
    ) -> StoredTrace:
        """The spans of `trace_id`, once at least `at_least` have arrived (bounded)."""
        spans = await self.spans_where(http, trace_id=trace_id, at_least=at_least, timeout_s=timeout_s)
        return StoredTrace(trace_id, spans)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """End the Phoenix this test session started: SIGTERM to its PID, SIGKILL if it lingers."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)


def phoenix_python() -> Path:
    """The Python of Phoenix's venv; skips (or fails, TEST_TRACES_REQUIRED=1) without one."""
    python = VENV / "bin" / "python"
    if not (VENV / f".arize-phoenix-{VERSION}").is_file() or not python.exists():
        reason = f"Arize Phoenix {VERSION} not installed at {VENV} (bash .ci/phoenix installs it)"
        if REQUIRED:
            pytest.fail(f"{reason}; TEST_TRACES_REQUIRED=1 asks for the trace store tests to run")
        pytest.skip(f"{reason}; CI runs these with TEST_TRACES_REQUIRED=1")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_phoenix(python: Path, working_dir: Path) -> Phoenix:
    """`phoenix serve` on 127.0.0.1 and a free port, its SQLite database in `working_dir`;
    returns once it answers `/readyz`, or fails (with its log) after START_TIMEOUT_S."""
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(working_dir),
        "PHOENIX_WORKING_DIR": str(working_dir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": "0",  # OTLP over gRPC: unused here, on a port of the system's choice
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",  # no request of its own to the internet
    }
    log_path = working_dir / "phoenix.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(python), "-m", "phoenix.server.main", "serve"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=working_dir,
        )
    phoenix = Phoenix(f"http://127.0.0.1:{port}", process, log_path, 0.0)
    deadline = started + START_TIMEOUT_S
    while not _ready(phoenix.url):
        try:  # waits on the process's exit, a tenth of a second at a time between polls
            code = process.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            if time.monotonic() < deadline:
                continue
            phoenix.stop()
            raise AssertionError(
                f"Phoenix did not answer /readyz within {START_TIMEOUT_S:g}s:\n{phoenix.log_tail()}"
            ) from None
        raise AssertionError(f"Phoenix exited with {code} before it was ready:\n{phoenix.log_tail()}")
    phoenix.started_in_s = time.monotonic() - started
    return phoenix
