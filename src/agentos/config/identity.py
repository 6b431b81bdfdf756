"""`[identity]`: the identity providers whose tokens sign end users in (docs/security.md,
"The identity model").

Usage::

    [identity]
    clock_skew_s = 60

    [[identity.issuers]]
    tenant = "acme"
    issuer = "https://login.example.com/realms/acme"    # the token's `iss`, exactly
    audience = "agentos"                                 # one of the token's `aud`
    # jwks_url = "https://.../certs"                     # empty: discovery at
    #                                                    # <issuer>/.well-known/openid-configuration
    scopes_claim = "scope"                               # "scp" for Entra ID
    default_scopes = ["sessions:read", "sessions:write"]

A token's scopes are its `scopes_claim` (a space-separated string or a list) plus
`default_scopes`, intersected with `allowed_scopes`; the scope `all` makes the user see the
whole tenant (`Principal.tenant_wide`). `admin` is never granted to a user's token.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from agentos.errors import ConfigError

# Asymmetric algorithms only: a verifier that accepted `none` or HS* could be handed a token
# "signed" with nothing, or with the provider's public key as an HMAC secret.
Algorithm = Literal["RS256", "ES256", "EdDSA"]
ALGORITHMS: tuple[Algorithm, ...] = ("RS256", "ES256", "EdDSA")
ALL_SCOPE = "all"  # in a token's scopes: the user sees every resource of the tenant

Seconds = Annotated[float, msgspec.Meta(ge=0, le=86_400)]
PosSeconds = Annotated[float, msgspec.Meta(gt=0, le=7 * 86_400)]


class IssuerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One identity provider trusted for one tenant (`[[identity.issuers]]`)."""

    tenant: str
    issuer: str
    audience: str
    jwks_url: str = ""  # empty: read `jwks_uri` from the issuer's discovery document
    algorithms: list[Algorithm] = msgspec.field(default_factory=lambda: list(ALGORITHMS))
    scopes_claim: str = "scope"
    default_scopes: list[str] = msgspec.field(default_factory=list)
    allowed_scopes: list[str] = msgspec.field(default_factory=list)  # empty: every tenant scope and `all`


class IdentityConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How tokens are checked and their providers' keys kept (`agentos.identity`)."""

    issuers: list[IssuerConfig] = msgspec.field(default_factory=list)
    clock_skew_s: Annotated[float, msgspec.Meta(ge=0, le=300)] = 60.0  # for exp, nbf and iat
    # A key set is kept for its `Cache-Control: max-age`, bounded by these two; past it, a
    # failed refresh leaves the old keys in use until `jwks_stale_s` more have passed.
    jwks_min_ttl_s: PosSeconds = 60.0
    jwks_max_ttl_s: PosSeconds = 86_400.0
    jwks_stale_s: Seconds = 86_400.0
    # An unknown `kid` refetches the key set at most this often, whatever the number of tokens.
    jwks_refetch_interval_s: PosSeconds = 60.0
    jwks_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 5.0
    # Tokens already verified, kept until they expire (or the key set changes): a token
    # reused across requests costs a dict lookup instead of a signature check.
    verified_cache_size: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 10_000
    # The providers' URLs obey `[security]`'s outbound rules; loopback needs this on (tests, a
    # provider on the same host) and is refused otherwise, as for any other outbound URL.
    allow_loopback: bool = False


def check_identity(config: IdentityConfig) -> None:
    """Raises: ConfigError naming `identity.issuers[i]`, for what msgspec's types cannot say
    (scope names are checked where scopes are known, `agentos.identity.issuers`)."""
    seen: set[tuple[str, str]] = set()
    for index, issuer in enumerate(config.issuers):
        where = f"identity.issuers[{index}]"
        if not issuer.issuer or not issuer.audience or not issuer.tenant:
            raise ConfigError(f"{where}: tenant, issuer and audience must not be empty")
        if (issuer.issuer, issuer.audience) in seen:
            raise ConfigError(f"{where}: issuer {issuer.issuer!r} with audience {issuer.audience!r} is listed twice")
        seen.add((issuer.issuer, issuer.audience))
        if not issuer.algorithms:
            raise ConfigError(f"{where}.algorithms: name at least one of {', '.join(ALGORITHMS)}")
    if config.jwks_min_ttl_s > config.jwks_max_ttl_s:
        raise ConfigError("identity.jwks_min_ttl_s must not be above identity.jwks_max_ttl_s")
