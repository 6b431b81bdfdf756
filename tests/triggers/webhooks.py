"""The sending side of a trigger in tests: a server with an agent that answers at once, and a
sender that signs as a Standard Webhooks library does (`agentos.triggers.signatures.sign` is
checked against the spec's vector in test_signatures.py)."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from agentos.config import settings_from_dict
from agentos.mock.server import MockServer
from agentos.testing import RunningServer, eventually, sse_events, start_server
from agentos.triggers.signatures import decode_secret, sign
from tests.postgres import fresh_schema

# one model call per run, no tools: a run is one mock request
AGENTS: dict[str, dict[str, Any]] = {"echo": {"tools": []}}


async def backends(name: str) -> AsyncIterator[dict[str, Any]]:
    """The settings of a store backend: SQLite files, or a fresh PostgreSQL schema."""
    if name == "sqlite":
        yield {}
        return
    async for config in fresh_schema():
        yield {
            "store": {
                "backend": "postgres",
                "postgres_url": config.postgres_url,
                "postgres_schema": config.postgres_schema,
            }
        }


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """Each test that takes it runs on both store backends (triggers' and schedules' API tests)."""
    async for settings in backends(request.param):
        yield settings


async def serve(data_dir: Path, mock: MockServer, backend: dict[str, Any], **groups: Any) -> RunningServer:
    """The real server: `groups` are settings groups ({"triggers": {...}}) over the test defaults."""
    base: dict[str, Any] = {
        "data_dir": str(data_dir),
        "provider": {"url": mock.url, "retry_budget_s": 2.0},
        "agents": AGENTS,
        "triggers": {"retry_s": 0.05},
        **backend,
    }
    for name, values in groups.items():
        base[name] = {**base.get(name, {}), **values} if isinstance(values, dict) else values
    return await start_server(settings_from_dict(base))


async def create_trigger(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None, **body: Any
) -> dict[str, Any]:
    body.setdefault("agent", "echo")
    async with http.post(f"{url}/v1/triggers", json=body, headers=headers) as r:
        assert r.status == 201, await r.text()
        created: dict[str, Any] = await r.json()
    assert created["secret"].startswith("whsec_")
    return created


@dataclass
class Answer:
    status: int
    body: dict[str, Any]


@dataclass
class Sender:
    """Posts signed deliveries to one trigger's events URL, as its sender would."""

    http: aiohttp.ClientSession
    url: str
    trigger_id: str
    secret: str
    sent: list[str] = field(default_factory=list)

    async def send(
        self,
        payload: Any = None,
        webhook_id: str | None = None,
        *,
        ts: int | None = None,
        secret: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        chunked: bool = False,
    ) -> Answer:
        body = raw if raw is not None else msgspec.json.encode(payload if payload is not None else {"n": 1})
        webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
        ts = int(time.time()) if ts is None else ts
        signature = sign(decode_secret(secret or self.secret), webhook_id, ts, body)
        sent = {"webhook-id": webhook_id, "webhook-timestamp": str(ts), "webhook-signature": signature}
        sent.update(headers or {})
        data: Any = body if len(body) < 65536 else io.BytesIO(body)
        if chunked:  # no Content-Length: the server finds the size as it reads
            data = _chunks(body)
        async with self.http.post(f"{self.url}/v1/triggers/{self.trigger_id}/events", data=data, headers=sent) as r:
            answer = Answer(r.status, await r.json())
        self.sent.append(webhook_id)
        return answer


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), 65536):
        yield body[start : start + 65536]


async def run_outcome(
    http: aiohttp.ClientSession,
    url: str,
    run_id: str,
    headers: dict[str, str] | None = None,
    start_timeout_s: float = 30,
) -> str:
    """The name of the run's terminal event (its events stream ends with it). A delivery's run
    exists once the dispatcher has started it, moments after the 2xx: waited for first (up to
    `start_timeout_s`)."""

    async def exists() -> bool:
        async with http.get(f"{url}/v1/runs/{run_id}", headers=headers) as r:
            return r.status == 200

    await eventually(exists, timeout_s=start_timeout_s, what=f"run {run_id} to start")
    async with http.get(f"{url}/v1/runs/{run_id}/events", headers=headers) as r:
        assert r.status == 200, await r.text()
        async for event in sse_events(r):
            if event.name in ("run.completed", "run.failed", "run.cancelled"):
                return event.name
    raise AssertionError(f"the events of run {run_id} ended without a terminal event")


async def deliveries(
    http: aiohttp.ClientSession, url: str, trigger_id: str, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    async with http.get(f"{url}/v1/triggers/{trigger_id}/deliveries?limit=1000", headers=headers) as r:
        assert r.status == 200, await r.text()
        data: list[dict[str, Any]] = (await r.json())["data"]
        return data


def metric(text: str, name: str) -> float:
    """One sample's value from the Prometheus text format (`name` with its labels, if any)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")
