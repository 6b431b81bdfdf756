"""Who a request acts for: a tenant, the key or token it presented, its scopes, and (for an end
user's token) the user and the resources it may touch.

The auth middleware sets `request[PRINCIPAL]` on every request it lets through; handlers read it
with `require(request, scope)`, which also checks the scope, and ask `may_see(...)` of every
resource they load or list. The tenant is always derived from the credential, never from anything
else the client sends (OWASP API3); so is the user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from aiohttp import web

from agentos.config.tenants import TenantLimits
from agentos.errors import Forbidden
from agentos.store.records import DEFAULT_TENANT


class Via(StrEnum):
    """What kind of credential a principal came from (docs/security.md, "The identity model")."""

    OPEN = "open"  # no auth configured, loopback only
    KEY = "key"  # a tenant API key (or the single server token)
    USER = "user"  # a JWT from the tenant's identity provider (OIDC)
    BROWSER = "browser"  # a short-lived token minted by POST /v1/tokens


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
    subject: the end user (a JWT's `sub`, or the user a browser token was minted for); recorded
        as the owner of what the request creates. None for a tenant key.
    tenant_wide: whether the principal sees every resource of the tenant (a tenant key, or a
        user token with the `all` scope) or only those its subject owns.
    resources: for a browser token, the only resources it may touch, as (kind, id) pairs such as
        ("session", "s_...") or ("run", "r_..."); None: no narrowing beyond the owner rule.
    via: the kind of credential (key, user token, browser token).
    issuer: for an end user, the identity provider (`iss`) that signed them in; a browser token a
        user minted carries it on, and is refused once the tenant no longer trusts that provider.
    """

    tenant_id: str
    key_id: str | None
    scopes: frozenset[Scope]
    limits: TenantLimits = field(default_factory=TenantLimits)
    subject: str | None = None
    tenant_wide: bool = True
    resources: frozenset[tuple[str, str]] | None = None
    via: Via = Via.KEY
    issuer: str | None = None

    @property
    def is_admin(self) -> bool:
        return Scope.ADMIN in self.scopes

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or Scope.ADMIN in self.scopes

    def may_see(self, kind: str, resource_id: str, owner: str | None) -> bool:
        """Whether this principal may see (and, with the scope, act on) one resource of its
        tenant. The caller has already checked the tenant; a False answers 404, as another
        tenant's resource does, so that ids cannot be probed.

        `owner` is the subject recorded when the resource was made (None: made by a tenant key,
        visible to tenant-wide principals only)."""
        if self.resources is not None and (kind, resource_id) not in self.resources:
            return False
        return self.tenant_wide or (owner is not None and owner == self.subject)


# No keys and no token configured, on a loopback bind: today's single-user behaviour.
OPEN_PRINCIPAL = Principal(DEFAULT_TENANT, None, ALL_SCOPES, via=Via.OPEN)

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
