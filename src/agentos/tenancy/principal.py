"""Who a request acts for: a tenant, the key it presented, and that key's scopes.

The auth middleware sets `request[PRINCIPAL]` on every request it lets through; handlers read it
with `require(request, scope)`, which also checks the scope. The tenant is always derived from
the key, never from anything else the client sends (OWASP API3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from aiohttp import web

from agentos.config.tenants import TenantLimits
from agentos.errors import Forbidden
from agentos.store.records import DEFAULT_TENANT


class Scope(StrEnum):
    SESSIONS_READ = "sessions:read"  # sessions, their messages and events, turn streams
    SESSIONS_WRITE = "sessions:write"  # create/delete sessions, send and cancel turns
    RUNS_READ = "runs:read"
    RUNS_WRITE = "runs:write"  # start, cancel, terminate, answer
    AGENTS_READ = "agents:read"
    AGENTS_WRITE = "agents:write"
    KNOWLEDGE_READ = "knowledge:read"  # collections, documents and queries
    KNOWLEDGE_WRITE = "knowledge:write"  # create and delete collections, upload and delete documents
    TRIGGERS_READ = "triggers:read"
    TRIGGERS_WRITE = "triggers:write"  # create, rotate and delete triggers (deliveries are signed, not keyed)
    SCHEDULES_READ = "schedules:read"
    SCHEDULES_WRITE = "schedules:write"  # create, pause, resume and delete schedules (their runs start on their own)
    ADMIN = "admin"  # tenants and keys of every tenant; agents that start host processes


TENANT_SCOPES = frozenset(s for s in Scope if s is not Scope.ADMIN)
ALL_SCOPES = frozenset(Scope)


@dataclass(frozen=True, slots=True)
class Principal:
    """Attributes:
    tenant_id: every resource the request reads or makes belongs to this tenant.
    key_id: the public id of the key presented (None: no auth configured, loopback only);
        logged, never the key itself.
    scopes: what the key may do; `admin` implies every other scope.
    limits: the tenant's effective limits (its own row over the config's defaults).
    """

    tenant_id: str
    key_id: str | None
    scopes: frozenset[Scope]
    limits: TenantLimits = field(default_factory=TenantLimits)

    @property
    def is_admin(self) -> bool:
        return Scope.ADMIN in self.scopes

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or Scope.ADMIN in self.scopes


# No keys and no token configured, on a loopback bind: today's single-user behaviour.
OPEN_PRINCIPAL = Principal(DEFAULT_TENANT, None, ALL_SCOPES)

PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


def principal(request: web.Request) -> Principal:
    """The request's principal. Fails closed: a request the middleware did not see has none."""
    try:
        return request[PRINCIPAL]
    except KeyError:
        raise Forbidden("no principal on this request", code="unauthenticated") from None


def require(request: web.Request, scope: Scope) -> Principal:
    """The request's principal, if its key has `scope`; else 403 `insufficient_scope`."""
    who = principal(request)
    if not who.allows(scope):
        raise Forbidden(f"this key lacks the {scope.value!r} scope", code="insufficient_scope")
    return who
