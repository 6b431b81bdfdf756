"""End users signed in by their tenant's identity provider (OIDC): tokens verified against the
provider's published keys (docs/security.md, "The identity model")."""

from agentos.identity.fetch import Fetcher, identity_policy
from agentos.identity.verifier import UserTokens, UserTokenStatistics, looks_like_jwt, unverified_issuer

__all__ = ["Fetcher", "UserTokenStatistics", "UserTokens", "identity_policy", "looks_like_jwt", "unverified_issuer"]
