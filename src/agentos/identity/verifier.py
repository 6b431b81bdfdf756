"""End users' tokens from the tenants' identity providers: `Authorization: Bearer <JWT>` to a
`Principal(via=Via.USER)`.

Theory of operation:
- The token's `iss` (read before any check, only to choose) names the configured issuers that
  may have signed it; its `aud` picks the one (several tenants may trust one provider, each
  with its own audience). No issuer, no audience: refused.
- Its header's `alg` must be one the issuer allows (RS256, ES256, EdDSA at most; never `none`
  nor HS*), and the key its `kid` names must be of that algorithm: an RS256 key offered as an
  HMAC secret never verifies anything.
- pyjwt checks the signature, `iss`, `aud`, `exp`, `nbf` and `iat` (with `clock_skew_s` of
  leeway) and that `exp`, `iat` and `sub` are present.
- The verified answer is kept (by the token string) until the token's `exp`, or until the
  issuer's key set or the tenant changes: a token reused across requests costs a dict lookup.
  The cache is bounded (`verified_cache_size`, oldest out first).
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from agentos.config.identity import ALL_SCOPE, IdentityConfig, IssuerConfig
from agentos.config.tenants import TenantLimits
from agentos.errors import ConfigError, InvalidInput
from agentos.identity.fetch import Fetcher
from agentos.identity.issuers import USER_SCOPES, check_user_scopes
from agentos.identity.jwks import KeySource
from agentos.outbound import OutboundPolicy
from agentos.tenancy.entries import Refused
from agentos.tenancy.principal import Principal, Scope, Via
from agentos.tenancy.records import Tenant
from agentos.tenancy.registry import TenantRegistry

if TYPE_CHECKING:  # imported where a token is checked: it loads cryptography (~16 MB of RSS)
    import jwt

log = logging.getLogger("agentos.identity")
MAX_TOKEN_BYTES = 16 * 1024  # a signed-in user's token is 1-2 KiB; parsing more is work for nobody
MAX_SUBJECT_CHARS = 255  # `sub` is stored as the owner of what the user makes
_REQUIRED = ["exp", "iat", "sub"]
_JSON = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class _Issuer:
    config: IssuerConfig
    keys: KeySource
    allowed: frozenset[str]
    default: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Verified:
    principal: Principal
    expires_s: float  # the token's `exp` (wall clock)
    keys: KeySource
    generation: int
    tenant: Tenant  # the registry's row when verified: a change of it rebuilds the answer


@dataclass(frozen=True, slots=True)
class UserTokenStatistics:
    issuers: int
    cached: int  # verified tokens held (`verified_cache_size` at most)
    verified: int  # signatures checked (a cached token's later requests are not)
    refused: int
    jwks_fetches: int  # requests for discovery documents and key sets


class UserTokens:
    """Usage::

    users = UserTokens(settings.identity, registry, fetcher)
    found = await users.authenticate(token)     # Principal, or Refused
    await users.close()
    """

    def __init__(
        self,
        config: IdentityConfig,
        registry: TenantRegistry,
        fetcher: Fetcher,
        *,
        now_s: Callable[[], float] = time.time,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._registry = registry
        self._fetcher = fetcher
        self._now_s = now_s
        self._monotonic_s = monotonic_s
        self._by_issuer: dict[str, list[_Issuer]] = {}
        for index, issuer in enumerate(config.issuers):
            self._add(_issuer(index, issuer, config, fetcher, monotonic_s))
        self._by_tenant: dict[str, list[_Issuer]] = {}  # those set over the admin API, by tenant
        self._retired: list[KeySource] = []  # their key sources, closed with the rest
        self._verified: dict[str, _Verified] = {}
        self._counts = {"verified": 0, "refused": 0}
        # Every change of a tenant (here, or on another node) comes through the registry's
        # watchers, now for every tenant and after each change: its issuers follow it.
        registry.watch_limits(lambda tenant_id, _limits: self._tenant_changed(tenant_id))

    @property
    def policy(self) -> OutboundPolicy:
        """The outbound rules the providers' URLs obey (`agentos.identity.issuers` checks with them)."""
        return self._fetcher.policy

    def issues(self, issuer: str) -> bool:
        """Whether a token with this `iss` is one of ours to check."""
        return issuer in self._by_issuer

    def has_issuers(self) -> bool:
        """Whether any identity provider is trusted (the config file's, or a tenant's)."""
        return bool(self._by_issuer)

    def trusts(self, tenant_id: str, issuer: str) -> bool:
        """Whether `issuer` still signs in users of `tenant_id` (the config file's or the admin API's)."""
        return any(i.config.tenant == tenant_id for i in self._by_issuer.get(issuer, ()))

    def tenant_of(self, issuer: str, audience: str) -> str | None:
        """The tenant whose users a token of (`issuer`, `audience`) signs in; None: no one's."""
        found = (i for i in self._by_issuer.get(issuer, ()) if i.config.audience == audience)
        return next((i.config.tenant for i in found), None)

    def _tenant_changed(self, tenant_id: str) -> None:
        """Take the tenant's issuers as its row has them now; an issuer unchanged keeps its keys."""
        tenant = self._registry.tenant_or_none(tenant_id)
        wanted = tenant.issuers if tenant is not None else ()
        held = self._by_tenant.pop(tenant_id, [])
        if not wanted and not held:
            return
        kept = {msgspec.json.encode(i.config): i for i in held}
        now: list[_Issuer] = []
        for config in wanted:
            found = kept.pop(msgspec.json.encode(config), None)
            if found is None and (found := self._made(tenant_id, config)) is not None:
                self._add(found)
            if found is not None:
                now.append(found)
        for gone in kept.values():
            others = [i for i in self._by_issuer[gone.config.issuer] if i is not gone]
            if others:
                self._by_issuer[gone.config.issuer] = others
            else:
                del self._by_issuer[gone.config.issuer]
            self._retired.append(gone.keys)
        if now:
            self._by_tenant[tenant_id] = now

    def _made(self, tenant_id: str, config: IssuerConfig) -> _Issuer | None:
        try:
            return _issuer(0, config, self._config, self._fetcher, self._monotonic_s)
        except ConfigError as exc:  # checked when set; a row from a newer version may still hold one
            log.warning("tenant %r: identity provider %r is not trusted: %s", tenant_id, config.issuer, exc)
            return None

    def _add(self, issuer: _Issuer) -> None:
        self._by_issuer.setdefault(issuer.config.issuer, []).append(issuer)

    async def authenticate(self, token: str) -> Principal | Refused:
        """The token's principal, or why it is refused. A verified token costs a dict lookup."""
        hit = self._verified.get(token)
        if hit is not None and self._still_good(hit):
            return hit.principal
        found = await self._verify(token)
        self._counts["refused" if isinstance(found, Refused) else "verified"] += 1
        return found

    def statistics(self) -> UserTokenStatistics:
        counts = self._counts
        return UserTokenStatistics(
            len(self._by_issuer), len(self._verified), counts["verified"], counts["refused"], self._fetcher.fetches
        )

    async def close(self) -> None:
        for issuers in self._by_issuer.values():
            for issuer in issuers:
                await issuer.keys.close()
        for keys in self._retired:
            await keys.close()
        await self._fetcher.close()

    def _still_good(self, hit: _Verified) -> bool:
        return (
            self._now_s() < hit.expires_s
            and hit.generation == hit.keys.generation
            and self._registry.tenant_or_none(hit.principal.tenant_id) is hit.tenant
        )

    async def _verify(self, token: str) -> Principal | Refused:
        if len(token) > MAX_TOKEN_BYTES:
            return Refused("", "the token is too large")
        parts = _unverified_parts(token)
        if parts is None:
            return Refused("", "malformed token: not a JWS of JSON objects")
        header, claims = parts
        issuer = self._issuer_of(claims)
        if isinstance(issuer, Refused):
            return issuer
        alg = header.get("alg")
        if alg not in issuer.config.algorithms:
            return Refused("", f"algorithm {repr(alg)[:40]} is not allowed")
        kid = header.get("kid")
        key = await issuer.keys.key(kid if isinstance(kid, str) else None)
        named = repr(kid)[:80]  # the client's text, in a message: bounded
        if key is None:
            return Refused("", f"no signing key {named} at the issuer")
        if key.algorithm_name != alg:
            return Refused("", f"key {named} is not an {alg} key")
        return self._checked(token, issuer, key, alg)

    def _issuer_of(self, claims: dict[str, Any]) -> _Issuer | Refused:
        issuer = claims.get("iss")
        candidates = self._by_issuer.get(issuer) if isinstance(issuer, str) else None
        if not candidates:
            return Refused("", "unknown issuer")
        audience = claims.get("aud")  # a string or a list of them; anything else names no audience
        listed = audience if isinstance(audience, list) else [audience]
        audiences = {a for a in listed if isinstance(a, str)}
        found = next((i for i in candidates if i.config.audience in audiences), None)
        return found if found is not None else Refused("", "wrong audience")

    def _checked(self, token: str, issuer: _Issuer, key: jwt.PyJWK, alg: str) -> Principal | Refused:
        import jwt  # here, not at the top: a server without an identity provider never loads it

        config = issuer.config
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=config.audience,
                issuer=config.issuer,
                leeway=self._config.clock_skew_s,
                options={"require": _REQUIRED},
            )
        except jwt.InvalidTokenError as exc:
            return Refused("", str(exc) or type(exc).__name__)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not 0 < len(subject) <= MAX_SUBJECT_CHARS:
            return Refused("", f"sub must be a string of 1 to {MAX_SUBJECT_CHARS} characters")
        tenant = self._registry.tenant_or_none(config.tenant)
        if tenant is None or tenant.disabled:
            return Refused("", "the token's tenant is disabled")
        granted = (_claimed_scopes(claims.get(config.scopes_claim)) | issuer.default) & issuer.allowed
        principal = Principal(
            config.tenant,
            None,
            frozenset(Scope(s) for s in granted if s != ALL_SCOPE),
            self._limits(config.tenant),
            subject=subject,
            tenant_wide=ALL_SCOPE in granted,
            via=Via.USER,
            issuer=config.issuer,
        )
        self._remember(token, _Verified(principal, float(claims["exp"]), issuer.keys, issuer.keys.generation, tenant))
        return principal

    def _limits(self, tenant_id: str) -> TenantLimits:
        try:
            return self._registry.limits_of(tenant_id)
        except InvalidInput:  # a row written by a newer version: the defaults, as for keys
            return self._registry.defaults

    def _remember(self, token: str, verified: _Verified) -> None:
        limit = self._config.verified_cache_size
        if limit == 0:
            return
        while len(self._verified) >= limit:  # oldest out first: dicts keep insertion order
            del self._verified[next(iter(self._verified))]
        self._verified[token] = verified


def _issuer(
    index: int, config: IssuerConfig, identity: IdentityConfig, fetcher: Fetcher, now_s: Callable[[], float]
) -> _Issuer:
    """Raises: ConfigError, for a scope no user may hold."""
    check_user_scopes(index, config)
    allowed = frozenset(config.allowed_scopes) or USER_SCOPES
    keys = KeySource(config, identity, fetcher, now_s=now_s)  # monotonic: ages must not jump with the wall clock
    return _Issuer(config, keys, allowed, frozenset(config.default_scopes))


def _claimed_scopes(value: object) -> frozenset[str]:
    """A scope claim: "a b c" (OAuth 2.0, Keycloak, Auth0, Entra's `scp`) or ["a", "b"]."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def _unverified_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A JWS's header and claims, unchecked: only to choose the issuer and the key; pyjwt then
    verifies the token whole. (pyjwt's own unverified decode costs half a verification.)"""
    head, _, rest = token.partition(".")
    body, _, _ = rest.partition(".")
    try:
        header, claims = _JSON.decode(_b64(head)), _JSON.decode(_b64(body))
    except (ValueError, binascii.Error, msgspec.DecodeError):
        return None
    return (header, claims) if isinstance(header, dict) and isinstance(claims, dict) else None


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def unverified_issuer(token: str) -> str | None:
    """A JWT's `iss`, unchecked: only to choose who verifies it. None: not a readable JWT."""
    parts = _unverified_parts(token)
    issuer = None if parts is None else parts[1].get("iss")
    return issuer if isinstance(issuer, str) else None


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts, the first a JSON object's base64 (`eyJ`): not an `aos_` key."""
    return token.startswith("eyJ") and token.count(".") == 2


__all__ = ["UserTokenStatistics", "UserTokens", "looks_like_jwt", "unverified_issuer"]
