"""The pepper: configured, else a 0600 file made once, else (store off) in memory."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agentos.errors import ConfigError
from agentos.tenancy.pepper import PEPPER_BYTES, load_pepper, pepper_check, pepper_matches


def test_the_pepper_file_is_made_once_private_and_then_reused(tmp_path: Path) -> None:
    first = load_pepper("", tmp_path)
    path = tmp_path / "key_pepper"
    assert len(first) == PEPPER_BYTES and path.read_bytes() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_pepper("", tmp_path) == first


def test_a_configured_pepper_wins_and_no_file_is_made(tmp_path: Path) -> None:
    assert load_pepper("from-config", tmp_path) == b"from-config"
    assert not (tmp_path / "key_pepper").exists()


def test_with_the_store_off_each_start_has_its_own_pepper() -> None:
    assert load_pepper("", None) != load_pepper("", None)


def test_a_damaged_pepper_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "key_pepper").write_bytes(b"short")
    with pytest.raises(ConfigError, match="not 32 bytes"):
        load_pepper("", tmp_path)


def test_a_pepper_check_tells_the_same_pepper_from_another_and_holds_no_pepper() -> None:
    check = pepper_check(b"s" * 32)
    assert pepper_matches(b"s" * 32, check)
    assert not pepper_matches(b"t" * 32, check)
    assert pepper_check(b"s" * 32) != check  # a new salt each time: equal peppers are not visible as such
    assert (b"s" * 32).hex() not in check


def test_a_malformed_pepper_check_matches_nothing() -> None:
    for bad in ["", "scrypt", "scrypt:x:8:1:00:00", "md5:16384:8:1:00:00", "scrypt:16384:8:1:zz:00"]:
        assert not pepper_matches(b"s" * 32, bad)
