"""Browser tokens: short-lived JWTs the server mints for a web page (`POST /v1/tokens`) and
verifies itself (docs/security.md, "Browser tokens").

A browser token is a tenant key's grant, or a signed-in end user's, narrowed: a few resources
(sessions, runs), a subset of the parent's scopes, a lifetime of minutes. Its claims:

    iss  ISSUER (the server's own: the auth middleware dispatches on it)   aud  AUDIENCE
    tid  the tenant          pk   the parent key's id ("" for a user's)   sub  the end user
    pu   1: minted by the end user `sub` with their identity provider's token (sees only theirs)
    scope  space-separated scopes   res  [[kind, id], ...]   iat, exp, jti

Verification (`authenticate`, memory only, no I/O): the signature with a live signing key
(`agentos.tenancy.signing`, picked by `kid`; EdDSA only, so no `alg: none` or HMAC confusion),
`iss`, `aud`, `exp` and `iat` with a small leeway, then the parent key *as it is now*: a revoked,
expired or deleted key, or a disabled tenant, refuses its browser tokens at once. The scopes are
those of the token that the parent still has. A user's token has no key behind it: its browser
tokens live out their minutes unless the tenant is disabled, and see only that user's resources.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from agentos.config.tenants import TenantLimits
from agentos.errors import InvalidInput
from agentos.tenancy.entries import Refused
from agentos.tenancy.principal import Principal, Scope, Via
from agentos.tenancy.records import KeyNotFound
from agentos.tenancy.registry import TenantRegistry
from agentos.tenancy.signing import ALGORITHM, SigningKeys

ISSUER = "urn:agentos:server"
AUDIENCE = "agentos"
# What a page may be granted: a session's turns and streams, a run's events and answers.
BROWSER_SCOPES = frozenset({Scope.SESSIONS_READ, Scope.SESSIONS_WRITE, Scope.RUNS_READ, Scope.RUNS_WRITE})
RESOURCE_KINDS = ("session", "run")
DEFAULT_LIFETIME_S = 300
MAX_LIFETIME_S = 3600
MAX_RESOURCES = 32  # sessions and runs together (the API takes 16 of each)
LEEWAY_S = 5  # the nodes' clocks differ a little; the lifetime is minutes
_MAX_CACHED = 4096  # verified tokens whose signature is not checked again
# The times are checked on the registry's clock (`_timely`), not by pyjwt on the system's.
_CHECKS: Any = {
    "require": ["iss", "aud", "exp", "iat", "tid", "pk", "scope", "res"],
    "verify_exp": False,
    "verify_iat": False,
    "verify_nbf": False,
}


@dataclass(frozen=True, slots=True)
class Grant:
    """What a token is for: `resources` as (kind, id) pairs, `subject` the end user (None: none)."""

    tenant_id: str
    parent_key_id: str
    scopes: frozenset[Scope]
    resources: frozenset[tuple[str, str]]
    subject: str | None = None
    lifetime_s: int = DEFAULT_LIFETIME_S
    by_user: bool = False  # minted by the end user `subject` (parent_key_id ""): sees only theirs
    issuer: str | None = None  # by_user: the identity provider that signed the user in


@dataclass(frozen=True, slots=True)
class Minted:
    token: str
    expires_ms: int


def is_browser_token(token: str) -> bool:
    """Whether `token` claims to be one of ours (its unverified `iss`), so that the middleware
    sends it here rather than to an identity provider's verifier. Proves nothing by itself: a
    routing peek (a few microseconds), the signature is checked by `authenticate`."""
    return _segment(token, 1).iss == ISSUER


class _Peeked(msgspec.Struct):
    """What is read of a token before its signature is checked: where to send it (`iss`, of the
    payload) and which key checks it (`kid`, of the header). pyjwt then checks all of it."""

    iss: str | None = None
    kid: str | None = None


_peek = msgspec.json.Decoder(_Peeked).decode
_NOTHING = _Peeked()
_MAX_SEGMENT_CHARS = 8192


def _segment(token: str, index: int) -> _Peeked:
    """The unverified `iss` and `kid` of one segment of a JWS compact token (0: the header,
    1: the payload); nothing for anything else."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[index]) > _MAX_SEGMENT_CHARS:
        return _NOTHING
    try:
        return _peek(base64.urlsafe_b64decode(parts[index] + "=" * (-len(parts[index]) % 4)))
    except (ValueError, msgspec.DecodeError):  # binascii.Error is a ValueError
        return _NOTHING


class BrowserTokens:
    """Usage::

    tokens = BrowserTokens(SigningKeys(registry.pepper, now_ms=registry.now_ms), registry)
    minted = tokens.mint(Grant("acme", key_id, frozenset({Scope.SESSIONS_WRITE}), {("session", sid)}))
    tokens.authenticate(minted.token)   # -> Principal (via BROWSER), or Refused
    """

    def __init__(
        self, keys: SigningKeys, registry: TenantRegistry, trusts: Callable[[str, str], bool] | None = None
    ) -> None:
        self.keys = keys
        self._registry = registry
        # (tenant, issuer): whether the tenant still trusts the provider that signed a user in
        # (`UserTokens.trusts`); None: no provider is trusted at all.
        self._trusts = trusts
        # A page presents one token many times; its signature is checked once. Only tokens that
        # verified are kept (a forged one costs its full check every time), and the time and the
        # parent key are checked on every use.
        self._verified_claims: dict[str, dict[str, Any]] = {}

    def mint(self, grant: Grant) -> Minted:
        """Sign `grant`. Raises: InvalidInput (a lifetime or resource count out of bounds)."""
        check_grant(grant)
        now_s = self._registry.now_ms() // 1000
        expires_s = now_s + grant.lifetime_s
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "tid": grant.tenant_id,
            "pk": grant.parent_key_id,
            "scope": " ".join(sorted(grant.scopes)),
            "res": [list(r) for r in sorted(grant.resources)],
            "iat": now_s,
            "exp": expires_s,
            "jti": secrets.token_urlsafe(12),
        }
        if grant.subject is not None:
            claims["sub"] = grant.subject
        if grant.by_user:
            claims["pu"] = 1
            claims["pi"] = grant.issuer or ""
        import jwt  # here: it loads cryptography (agentos.tenancy.signing says why)

        key = self.keys.current()
        token = jwt.encode(claims, key.private, algorithm=ALGORITHM, headers={"kid": key.kid})
        return Minted(token, expires_s * 1000)

    def authenticate(self, token: str) -> Principal | Refused:
        """The principal of a browser token, or why it is refused (module docstring). No I/O."""
        claims = self._verified(token)
        if isinstance(claims, Refused):
            return claims
        parent = str(claims["pk"])
        by_user = claims.get("pu") == 1 and isinstance(claims.get("sub"), str)
        tenant_id = str(claims["tid"])
        why = self._user_refusal(tenant_id, claims.get("pi")) if by_user else self._parent_refusal(parent, tenant_id)
        if why:
            return Refused(parent, why)
        try:
            return self._principal(claims)
        except (ValueError, TypeError):  # well signed by us, yet not our shape (a newer version's)
            return Refused(parent, "malformed claims")

    def _verified(self, token: str) -> dict[str, Any] | Refused:
        claims = self._verified_claims.get(token)
        if claims is None:
            checked = self._checked(token)
            if isinstance(checked, Refused):
                return checked
            if len(self._verified_claims) >= _MAX_CACHED:
                del self._verified_claims[next(iter(self._verified_claims))]  # the oldest
            claims = self._verified_claims[token] = checked
        return _timely(claims, self._registry.now_ms() / 1000)

    def _checked(self, token: str) -> dict[str, Any] | Refused:
        """The claims of a token signed by a live key of ours, its times not yet checked."""
        import jwt  # here: it loads cryptography (agentos.tenancy.signing says why)

        try:
            kid = _segment(token, 0).kid  # pyjwt parses the token again, and checks it whole
            key = self.keys.verifying(kid) if kid is not None else None
            if key is None:
                return Refused("", "unknown signing key (rotated out, or not this server's)")
            claims: dict[str, Any] = jwt.decode(
                token,
                key.public,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                options=_CHECKS,
            )
        except jwt.InvalidTokenError as exc:
            return Refused("", f"invalid token ({type(exc).__name__})")
        return claims

    def _user_refusal(self, tenant_id: str, issuer: object) -> str:
        """Why a user's browser token is refused now ("" when it is not): its tenant is gone or
        disabled, or no longer trusts the identity provider that signed its user in (removing a
        provider revokes what its users minted, as revoking a key revokes its tokens)."""
        if not self._registry.is_enabled(tenant_id):
            return "the tenant is disabled"
        if not isinstance(issuer, str) or self._trusts is None or not self._trusts(tenant_id, issuer):
            return "the tenant no longer trusts the identity provider of the token's user"
        return ""

    def _parent_refusal(self, key_id: str, tenant_id: str) -> str:
        """Why the parent key no longer vouches for its tokens ("" when it does)."""
        try:
            record = self._registry.key(key_id)
        except KeyNotFound:
            return "the parent key no longer exists"
        if record.tenant_id != tenant_id:
            return "the parent key is not the token's tenant's"
        if record.status(self._registry.now_ms()) != "active":
            return "the parent key was revoked or has expired"
        if not self._registry.is_enabled(tenant_id):
            return "the tenant is disabled"
        return ""

    def _limits(self, tenant_id: str) -> TenantLimits:
        try:
            return self._registry.limits_of(tenant_id)
        except InvalidInput:  # a row written by a newer version: the defaults, as for its keys
            return self._registry.defaults

    def _principal(self, claims: dict[str, Any]) -> Principal:
        tenant_id, key_id = str(claims["tid"]), str(claims["pk"])
        wanted = frozenset(Scope(s) for s in str(claims["scope"]).split())
        resources = frozenset(_resource(r) for r in claims["res"])
        subject = claims.get("sub")
        by_user = claims.get("pu") == 1 and isinstance(subject, str)
        if by_user:  # the user's scopes were intersected when it was minted; no key to ask now
            scopes = wanted & BROWSER_SCOPES
        else:
            parent_scopes = frozenset(Scope(s) for s in self._registry.key(key_id).scopes if s in _SCOPE_NAMES)
            scopes = wanted & _effective(parent_scopes) & BROWSER_SCOPES
        return Principal(
            tenant_id,
            None if by_user else key_id,
            scopes,
            self._limits(tenant_id),
            subject=subject if isinstance(subject, str) else None,
            # a key's grant sees the tenant, narrowed by `resources`; a user's also only its own
            tenant_wide=not by_user,
            resources=resources,
            via=Via.BROWSER,
        )


_SCOPE_NAMES = frozenset(s.value for s in Scope)


def _timely(claims: dict[str, Any], now_s: float) -> dict[str, Any] | Refused:
    """`claims` if they are valid at `now_s` (with `LEEWAY_S` either way), else why not."""
    expires_s, issued_s = claims["exp"], claims["iat"]
    if not isinstance(expires_s, int | float) or not isinstance(issued_s, int | float):
        return Refused("", "invalid token (exp and iat must be numbers)")
    if now_s >= expires_s + LEEWAY_S:
        return Refused("", "the token has expired")
    if issued_s > now_s + LEEWAY_S:
        return Refused("", "the token was issued in the future")
    return claims


def _effective(scopes: frozenset[Scope]) -> frozenset[Scope]:
    """`admin` implies every other scope (`Principal.allows`)."""
    return frozenset(Scope) if Scope.ADMIN in scopes else scopes


def granted_scopes(parent: Principal, asked: Iterable[Scope] | None) -> frozenset[Scope]:
    """The scopes a token minted by `parent` gets: those asked (default: every browser scope)
    that the parent has. Raises: InvalidInput (a scope a browser token never has)."""
    wanted = BROWSER_SCOPES if asked is None else frozenset(asked)
    if beyond := wanted - BROWSER_SCOPES:
        names = ", ".join(sorted(beyond))
        raise InvalidInput(f"scopes: a browser token may have only {', '.join(sorted(BROWSER_SCOPES))}; not {names}")
    return wanted & _effective(parent.scopes)


def check_grant(grant: Grant) -> None:
    """Raises: InvalidInput (a lifetime, resource count or resource kind out of bounds)."""
    if not 1 <= grant.lifetime_s <= MAX_LIFETIME_S:
        raise InvalidInput(f"expires_in_s must be from 1 to {MAX_LIFETIME_S}, got {grant.lifetime_s}")
    if not 1 <= len(grant.resources) <= MAX_RESOURCES:
        raise InvalidInput(f"a browser token names from 1 to {MAX_RESOURCES} resources, got {len(grant.resources)}")
    for kind, _ in grant.resources:
        if kind not in RESOURCE_KINDS:
            raise InvalidInput(f"resource kind must be one of {RESOURCE_KINDS}, got {kind!r}")


def _resource(raw: object) -> tuple[str, str]:
    if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(part, str) for part in raw)):
        raise ValueError("a resource is [kind, id]")
    return raw[0], raw[1]
