"""Typed keys for what the application holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from agentos.config import Settings
    from agentos.metrics import Metrics
    from agentos.runtime.runtime import Runtime

RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime")
SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
MAX_BODY_BYTES: web.AppKey[int] = web.AppKey("max_body_bytes", int)
