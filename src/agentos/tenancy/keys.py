"""API keys: their format, their checksum, and the keyed hash that is all the server stores.

A key reads `aos_<key_id>_<secret><checksum>` (GitHub's token format, base62 throughout):

    aos_                 a fixed prefix, so a leaked key is recognisable (secret scanners, greps)
    key_id   12 chars    public and random (71 bits): the registry's lookup key, logged, listed
    _
    secret   30 chars    178 bits from `secrets`: what proves possession; never stored
    checksum  6 chars    CRC32 of everything before it, base62: a scanner (or this server) can
                         tell a real key from a typo or a look-alike offline, without any lookup

The server keeps `HMAC-SHA256(pepper, secret)` per key_id and compares with
`hmac.compare_digest`. A fast keyed hash, not a password KDF: the secret has 178 bits of
entropy, so there is nothing to stretch, and a KDF would cost every request milliseconds. The
pepper lives outside the database (`agentos.tenancy.pepper`), so a stolen `tenants.db` alone
cannot even confirm a guessed key.

Pure and stdlib-only: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib
from dataclasses import dataclass

PREFIX = "aos_"
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
KEY_ID_CHARS = 12
SECRET_CHARS = 30  # 30 * log2(62) = 178.6 bits
CHECKSUM_CHARS = 6  # 62**6 > 2**32: every CRC32 fits
KEY_CHARS = len(PREFIX) + KEY_ID_CHARS + 1 + SECRET_CHARS + CHECKSUM_CHARS
_ALPHABET = frozenset(BASE62)


class MalformedKey(ValueError):
    """Not a key of this format: wrong prefix, length, alphabet or checksum."""


@dataclass(frozen=True, slots=True)
class ParsedKey:
    key_id: str
    secret: str

    def __repr__(self) -> str:  # never the secret, whatever prints it
        return f"ParsedKey(key_id={self.key_id!r}, secret='**********')"


def _random_base62(n: int) -> str:
    return "".join(secrets.choice(BASE62) for _ in range(n))


def checksum(body: str) -> str:
    """CRC32 of `body` (the key up to its checksum) as 6 base62 characters, zero-padded."""
    value = zlib.crc32(body.encode("ascii"))
    chars = []
    for _ in range(CHECKSUM_CHARS):
        value, digit = divmod(value, 62)
        chars.append(BASE62[digit])
    return "".join(reversed(chars))


def generate(key_id: str | None = None) -> str:
    """A new key; its key_id is random unless given (`new_key_id()`)."""
    body = f"{PREFIX}{key_id or new_key_id()}_{_random_base62(SECRET_CHARS)}"
    return body + checksum(body)


def new_key_id() -> str:
    return _random_base62(KEY_ID_CHARS)


def parse(key: str) -> ParsedKey:
    """Split a key into its id and secret, after checking its shape and checksum.

    Raises:
        MalformedKey: wrong prefix, length, separator, alphabet or checksum.
    """
    if len(key) != KEY_CHARS or not key.startswith(PREFIX):
        raise MalformedKey("not an Agent OS key")
    id_end = len(PREFIX) + KEY_ID_CHARS
    if key[id_end] != "_":
        raise MalformedKey("not an Agent OS key")
    key_id, secret, check = key[len(PREFIX) : id_end], key[id_end + 1 : -CHECKSUM_CHARS], key[-CHECKSUM_CHARS:]
    if not (_ALPHABET.issuperset(key_id) and _ALPHABET.issuperset(secret) and _ALPHABET.issuperset(check)):
        raise MalformedKey("not an Agent OS key")  # also keeps non-ASCII text from compare_digest
    if not hmac.compare_digest(checksum(key[:-CHECKSUM_CHARS]), check):
        raise MalformedKey("the key's checksum does not match (a typo, or not a key)")
    return ParsedKey(key_id, secret)


def key_id_of(key: str) -> str:
    """The key_id of a well-formed key, else "" (for the access log of a refused request)."""
    try:
        return parse(key).key_id
    except MalformedKey:
        return ""


def hash_secret(pepper: bytes, secret: str) -> bytes:
    """What the registry stores for a key: HMAC-SHA256(pepper, secret)."""
    return hmac.new(pepper, secret.encode("ascii"), hashlib.sha256).digest()


def verify(pepper: bytes, secret: str, stored: bytes) -> bool:
    """Whether `secret` hashes to `stored`, in time independent of where they differ."""
    return hmac.compare_digest(hash_secret(pepper, secret), stored)
