"""A tenant's identity providers set over the admin API (`PUT /v1/admin/tenants/{id}/issuers`),
held to the rules the config file's `[[identity.issuers]]` obey (docs/security.md).

- Algorithms: RS256, ES256, EdDSA only. `none` and HS* are refused by name: a verifier that
  took them could be handed a token signed with nothing, or with the provider's public key
  used as an HMAC secret.
- Scopes: the tenant's scopes and `all`; `admin` is never granted to a user's token.
- URLs: the JWKS URL (or, without one, the issuer's discovery document) must pass the SSRF rules
  of every outbound request (`agentos.outbound.check_url`) with the identity policy: loopback
  only where `identity.allow_loopback` is on. Checked here so the admin hears of it at once;
  checked again at every fetch (`agentos.identity.fetch`), where names are resolved.
- One (issuer, audience) pair names one tenant: two tenants trusting the same provider each
  have an audience of their own (the verifier picks the tenant by it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import msgspec

from agentos.config.identity import ALGORITHMS, ALL_SCOPE, IssuerConfig
from agentos.errors import BadRequest, ConfigError, Conflict, Forbidden
from agentos.outbound import OutboundPolicy, check_url
from agentos.tenancy.principal import TENANT_SCOPES

MAX_ISSUERS_PER_TENANT = 8  # a tenant has a provider or two (one being replaced); more is a mistake
USER_SCOPES = frozenset(s.value for s in TENANT_SCOPES) | {ALL_SCOPE}


_Text = Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
_Scopes = Annotated[list[Annotated[str, msgspec.Meta(max_length=100)]], msgspec.Meta(max_length=32)]


class IssuerSetting(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One identity provider of a tenant as the admin API takes and shows it: the fields of
    `[[identity.issuers]]` but the tenant, which is the route's."""

    issuer: Annotated[_Text, msgspec.Meta(description="the tokens' `iss`, exactly")]
    audience: Annotated[_Text, msgspec.Meta(description="one of the tokens' `aud`")]
    jwks_url: Annotated[
        str, msgspec.Meta(max_length=2048, description="empty: discovery at <issuer>/.well-known/openid-configuration")
    ] = ""
    algorithms: Annotated[
        list[Annotated[str, msgspec.Meta(max_length=40)]],
        msgspec.Meta(max_length=8, description="of RS256, ES256, EdDSA (none and HS* are refused)"),
    ] = msgspec.field(default_factory=lambda: list(ALGORITHMS))
    scopes_claim: Annotated[str, msgspec.Meta(min_length=1, max_length=100)] = "scope"
    default_scopes: _Scopes = msgspec.field(default_factory=list)
    allowed_scopes: Annotated[_Scopes, msgspec.Meta(description="empty: every tenant scope and `all`")] = msgspec.field(
        default_factory=list
    )

    @classmethod
    def of(cls, config: IssuerConfig) -> IssuerSetting:
        fields = msgspec.structs.asdict(config)
        del fields["tenant"]
        return cls(**fields)


class IssuerRefused(BadRequest):
    """An identity provider the server will not trust (the message says why)."""

    code = "invalid_issuer"


class IssuerTaken(Conflict):
    code = "issuer_taken"

    def __init__(self, issuer: str, audience: str, tenant_id: str) -> None:
        super().__init__(
            f"issuer {issuer!r} with audience {audience!r} already signs users in to tenant {tenant_id!r};"
            " give this tenant an audience of its own"
        )


def user_scope_refusal(names: Sequence[str]) -> str:
    """Why a user may not hold one of `names` ("" when every one is fine)."""
    for name in names:
        if name not in USER_SCOPES:
            known = ", ".join(sorted(USER_SCOPES))
            return f"{name!r} is not a scope a user may hold (admin never is); known: {known}"
    return ""


def check_user_scopes(index: int, config: IssuerConfig) -> None:
    """The config file's check. Raises: ConfigError naming `identity.issuers[index]`."""
    why = user_scope_refusal([*config.allowed_scopes, *config.default_scopes])
    if why:
        raise ConfigError(f"identity.issuers[{index}]: {why}")


def checked_issuers(
    tenant_id: str, wanted: Sequence[IssuerSetting], policy: OutboundPolicy
) -> tuple[IssuerConfig, ...]:
    """`wanted` as the tenant's issuers (each bound to `tenant_id`), if every one may be trusted.

    Raises: IssuerRefused (400): too many, a pair listed twice, an algorithm, a scope or a URL."""
    if len(wanted) > MAX_ISSUERS_PER_TENANT:
        raise IssuerRefused(f"a tenant has at most {MAX_ISSUERS_PER_TENANT} identity providers, got {len(wanted)}")
    seen: set[tuple[str, str]] = set()
    for index, issuer in enumerate(wanted):
        where = f"issuers[{index}]"
        if (issuer.issuer, issuer.audience) in seen:
            raise IssuerRefused(f"{where}: issuer {issuer.issuer!r} with audience {issuer.audience!r} is listed twice")
        seen.add((issuer.issuer, issuer.audience))
        _check_one(where, issuer, policy)
    return tuple(msgspec.convert(msgspec.structs.asdict(i) | {"tenant": tenant_id}, IssuerConfig) for i in wanted)


def _check_one(where: str, issuer: IssuerSetting, policy: OutboundPolicy) -> None:
    refused = [a for a in issuer.algorithms if a not in ALGORITHMS]
    if refused or not issuer.algorithms:
        named = repr(refused[0])[:40] if refused else "none given"
        raise IssuerRefused(
            f"{where}.algorithms: {named} is refused; only the asymmetric {', '.join(ALGORITHMS)}"
            " (never 'none' nor HS*: a public key is not a shared secret)"
        )
    why = user_scope_refusal([*issuer.allowed_scopes, *issuer.default_scopes])
    if why:
        raise IssuerRefused(f"{where}: {why}")
    fetched = issuer.jwks_url or f"{issuer.issuer.rstrip('/')}/.well-known/openid-configuration"
    try:
        check_url(fetched, policy)
    except Forbidden as exc:
        name = "jwks_url" if issuer.jwks_url else "issuer (its discovery document)"
        raise IssuerRefused(f"{where}.{name}: {exc}") from None
