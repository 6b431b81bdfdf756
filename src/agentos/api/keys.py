"""Typed keys for what the application holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from agentos.agents.service import RunService
    from agentos.config import Settings
    from agentos.metrics import Metrics
    from agentos.runtime.runtime import Runtime
    from agentos.tenancy.registry import TenantRegistry

RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime")
RUNS: web.AppKey[RunService] = web.AppKey("runs")
TENANTS: web.AppKey[TenantRegistry] = web.AppKey("tenants")
SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
MAX_BODY_BYTES: web.AppKey[int] = web.AppKey("max_body_bytes", int)
# How often an idle event stream (a run waiting for a human) gets a comment line.
SSE_KEEPALIVE_S: web.AppKey[float] = web.AppKey("sse_keepalive_s", float)
