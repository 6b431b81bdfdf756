"""Typed keys for what the application holds. The console hub's and the rate limiters' keys
live beside their classes (`console_stream.CONSOLE`, `ratelimit.LIMITERS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from agentos.agents.service import RunService
    from agentos.config import Settings
    from agentos.identity import UserTokens
    from agentos.knowledge.service import KnowledgeService
    from agentos.metrics import Metrics
    from agentos.runtime.runtime import Runtime
    from agentos.schedules.service import ScheduleService
    from agentos.tenancy.quotas import Quotas
    from agentos.tenancy.registry import TenantRegistry
    from agentos.triggers.service import TriggerService

RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime")
RUNS: web.AppKey[RunService] = web.AppKey("runs")
TENANTS: web.AppKey[TenantRegistry] = web.AppKey("tenants")
SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
TRACE_ID = web.RequestKey("trace_id", str)  # the request's trace id ([telemetry]), for the access log
MAX_BODY_BYTES: web.AppKey[int] = web.AppKey("max_body_bytes", int)
# How often an idle event stream (a run waiting for a human) gets a comment line.
SSE_KEEPALIVE_S: web.AppKey[float] = web.AppKey("sse_keepalive_s", float)
QUOTAS: web.AppKey[Quotas] = web.AppKey("quotas")
KNOWLEDGE: web.AppKey[KnowledgeService] = web.AppKey("knowledge")
TRIGGERS: web.AppKey[TriggerService] = web.AppKey("triggers")
SCHEDULES: web.AppKey[ScheduleService] = web.AppKey("schedules")
USERS: web.AppKey[UserTokens] = web.AppKey("users")  # end users' tokens: their identity providers
