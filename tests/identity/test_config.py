"""`[identity]` refuses at start-up what would weaken the checks: HS* or `none` as an algorithm,
`admin` (or an unknown scope) for a user, an issuer listed twice, an empty audience."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentos.config import settings_from_dict
from agentos.errors import ConfigError
from agentos.services import open_users
from agentos.tenancy.registry import TenantRegistry

ISSUER = {"tenant": "acme", "issuer": "https://login.example.com", "audience": "agentos"}


def settings(*issuers: dict[str, Any]) -> Any:
    return settings_from_dict({"identity": {"issuers": list(issuers)}})


@pytest.mark.parametrize("alg", ["HS256", "none", "RS384", "PS256"])
def test_only_the_asymmetric_algorithms_are_accepted(alg: str) -> None:
    with pytest.raises(ConfigError, match="algorithms"):
        settings(ISSUER | {"algorithms": ["RS256", alg]})


@pytest.mark.parametrize(
    "issuers",
    [
        [ISSUER, ISSUER],  # the same issuer and audience twice: which tenant?
        [ISSUER | {"audience": ""}],
        [ISSUER | {"algorithms": []}],
    ],
)
def test_an_ambiguous_or_empty_issuer_stops_start_up(issuers: list[dict[str, Any]]) -> None:
    with pytest.raises(ConfigError, match=r"identity\.issuers\[\d\]"):
        settings(*issuers)


@pytest.mark.parametrize("field", ["default_scopes", "allowed_scopes"])
@pytest.mark.parametrize("scope", ["admin", "sessions:everything"])
async def test_a_scope_no_user_may_hold_stops_start_up(tmp_path: Path, field: str, scope: str) -> None:
    registry = TenantRegistry(None, b"p" * 32)
    with pytest.raises(ConfigError, match=scope):
        open_users(settings(ISSUER | {field: ["sessions:read", scope]}), registry)


def test_two_tenants_may_trust_one_provider_with_their_own_audiences() -> None:
    found = settings(ISSUER, ISSUER | {"tenant": "bravo", "audience": "agentos-bravo"})
    assert [i.tenant for i in found.identity.issuers] == ["acme", "bravo"]
