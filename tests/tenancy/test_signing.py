"""The browser tokens' signing keys: derived from the pepper, the same after a restart and on
every node, rotating by the clock with one period of overlap. Sync, with the time passed in."""

from __future__ import annotations

import jwt
import pytest

from agentos.errors import ConfigError
from agentos.tenancy.signing import DEFAULT_ROTATION_S, SigningKeys

PEPPER = b"p" * 32
PERIOD_MS = DEFAULT_ROTATION_S * 1000


class Wall:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def test_the_keys_are_the_same_after_a_restart_and_on_another_node() -> None:
    wall = Wall(20_000 * PERIOD_MS)
    first, second = SigningKeys(PEPPER, now_ms=wall), SigningKeys(PEPPER, now_ms=wall)
    assert first.current().jwk() == second.current().jwk()
    token = jwt.encode({"a": 1}, first.current().private, algorithm="EdDSA")
    assert jwt.decode(token, second.current().public, algorithms=["EdDSA"]) == {"a": 1}


def test_another_pepper_makes_other_keys_with_other_ids() -> None:
    wall = Wall(20_000 * PERIOD_MS)
    ours, theirs = SigningKeys(PEPPER, now_ms=wall).current(), SigningKeys(b"q" * 32, now_ms=wall).current()
    assert ours.kid != theirs.kid and ours.jwk()["x"] != theirs.jwk()["x"]
    assert SigningKeys(PEPPER, now_ms=wall).verifying(theirs.kid) is None


def test_a_key_verifies_for_its_period_and_the_next_only() -> None:
    wall = Wall(20_000 * PERIOD_MS + 5)
    keys = SigningKeys(PEPPER, now_ms=wall)
    signed_with = keys.current()
    assert [k.kid for k in keys.live()][0] == signed_with.kid
    wall.now_ms += PERIOD_MS  # rotated: the previous key still verifies
    assert keys.current().kid != signed_with.kid
    assert keys.verifying(signed_with.kid) == signed_with
    wall.now_ms += PERIOD_MS  # two rotations on: gone
    assert keys.verifying(signed_with.kid) is None
    wall.now_ms -= 3 * PERIOD_MS  # the period before: a key of a later period is not live yet
    assert keys.verifying(signed_with.kid) is None
    assert SigningKeys(PEPPER, now_ms=Wall(20_000 * PERIOD_MS - 1)).verifying(signed_with.kid) is None


def test_the_public_jwk_holds_no_private_part() -> None:
    jwk = SigningKeys(PEPPER, now_ms=Wall(0)).current().jwk()
    assert set(jwk) == {"kty", "crv", "x", "kid", "alg", "use"} and jwk["crv"] == "Ed25519"


def test_a_rotation_shorter_than_an_hour_is_refused() -> None:
    with pytest.raises(ConfigError):
        SigningKeys(PEPPER, now_ms=Wall(0), rotation_s=60)
