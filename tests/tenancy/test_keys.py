"""The key format: shape, checksum, entropy, and the keyed hash."""

from __future__ import annotations

import math
import re

import pytest

from agentos.tenancy import keys

_FORMAT = re.compile(r"^aos_[0-9A-Za-z]{12}_[0-9A-Za-z]{36}$")


def test_a_key_has_the_documented_shape_and_parses_back() -> None:
    key = keys.generate()
    assert _FORMAT.match(key), key
    assert len(key) == keys.KEY_CHARS == 53
    parsed = keys.parse(key)
    assert key == f"aos_{parsed.key_id}_{parsed.secret}{key[-6:]}"
    assert len(parsed.secret) == keys.SECRET_CHARS
    assert keys.key_id_of(key) == parsed.key_id
    assert parsed.secret not in repr(parsed)


def test_the_secret_carries_at_least_160_random_bits() -> None:
    assert keys.SECRET_CHARS * math.log2(62) >= 160
    made = [keys.parse(keys.generate()) for _ in range(2000)]
    assert len({p.secret for p in made}) == len(made)
    assert len({p.key_id for p in made}) == len(made)
    assert set("".join(p.secret for p in made)) == set(keys.BASE62)  # the whole alphabet is drawn from


def test_the_checksum_catches_every_single_changed_character() -> None:
    key = keys.generate()
    for i in range(len(key)):
        for replacement in {"0", "z", "Q"} - {key[i]}:
            changed = key[:i] + replacement + key[i + 1 :]
            with pytest.raises(keys.MalformedKey):
                keys.parse(changed)
            assert keys.key_id_of(changed) == ""


def test_the_checksum_catches_swapped_neighbours() -> None:
    key = keys.generate()
    swaps = [key[:i] + key[i + 1] + key[i] + key[i + 2 :] for i in range(4, len(key) - 1) if key[i] != key[i + 1]]
    assert swaps
    for changed in swaps:
        with pytest.raises(keys.MalformedKey):
            keys.parse(changed)


_VALID_BODY = "aos_" + "a" * 12 + "_" + "b" * 30


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "aos_",
        "Bearer x",
        "ghp_" + "a" * 49,
        "aos_" + "a" * 49,
        "aos_abcdefghijkl-" + "a" * 36,
        "aos_ab" + "é" * 47,
        _VALID_BODY + "é" * 6,  # non-ASCII where the checksum goes: refused before compare_digest sees it
        _VALID_BODY + "\udcff" * 6,
    ],
)
def test_anything_else_is_malformed(bad: str) -> None:
    with pytest.raises(keys.MalformedKey):
        keys.parse(bad)


def test_a_key_with_a_recomputed_checksum_is_well_formed_but_still_needs_its_secret() -> None:
    """The checksum is no secret: it proves the shape, never possession (that is the hash's job)."""
    pepper = b"p" * 32
    key = keys.generate()
    parsed = keys.parse(key)
    forged_body = f"aos_{parsed.key_id}_{'A' * 30}"
    forged = keys.parse(forged_body + keys.checksum(forged_body))
    stored = keys.hash_secret(pepper, parsed.secret)
    assert keys.verify(pepper, parsed.secret, stored)
    assert not keys.verify(pepper, forged.secret, stored)
    assert not keys.verify(b"q" * 32, parsed.secret, stored)  # another pepper: another hash
    assert len(stored) == 32 and parsed.secret.encode() not in stored
