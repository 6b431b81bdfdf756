"""The server's signing keys for browser tokens (docs/security.md, "Browser tokens").

Theory of operation. A key is not stored: it is derived from the key pepper (the server's one
secret, `agentos.tenancy.pepper`, which every node of a cluster already shares and checks) and
a *generation*, the number of whole rotation periods since the epoch:

    seed(g) = HKDF-SHA256(pepper, info="agentos browser token key " + g)   -> Ed25519 (EdDSA)

So every node, and the same node after a restart, holds the same keys without a table, a
migration or a private key at rest; the key rotates by itself every `rotation_s`; and the
overlap is the previous generation, which stays valid for one more period. A token lives at most
`MAX_LIFETIME_S`, far less than a period, so a token signed just before a rotation is still
verified after it. `/.well-known/jwks.json` serves the current and the previous public key.
Rotating the pepper (which also invalidates every API key) is the emergency stop.

Time comes from `now_ms` (the registry's clock: tests move it instead of waiting).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentos.errors import ConfigError

# cryptography is imported where a key is derived or encoded, not here: its bindings cost about
# 16 MB of RSS (the bench gate saw it), which a server that never mints a browser token must not pay.
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM = "EdDSA"
DEFAULT_ROTATION_S = 24 * 3600
_INFO = b"agentos browser token key "


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    private: Ed25519PrivateKey

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    def jwk(self) -> dict[str, Any]:
        """The public key as a JWK (RFC 8037: `kty` OKP, `crv` Ed25519)."""
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        raw = self.public.public_bytes(Encoding.Raw, PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": _b64(raw), "kid": self.kid, "alg": ALGORITHM, "use": "sig"}


class SigningKeys:
    """Usage::

    keys = SigningKeys(registry.pepper, now_ms=registry.now_ms)
    key = keys.current()                 # sign with key.private, put key.kid in the header
    keys.verifying(kid)                  # -> SigningKey of the current or previous generation, or None
    """

    def __init__(self, pepper: bytes, *, now_ms: Callable[[], int], rotation_s: int = DEFAULT_ROTATION_S) -> None:
        if rotation_s < 3600:
            raise ConfigError("rotation_s must be at least an hour: a token must outlive one rotation")
        self._pepper = pepper
        self._now_ms = now_ms
        self._rotation_ms = rotation_s * 1000
        self._by_generation: dict[int, SigningKey] = {}  # the two live ones (derived once each)

    def current(self) -> SigningKey:
        return self._key(self._generation())

    def live(self) -> list[SigningKey]:
        """The keys a token may be verified with now: the current one, then the previous one."""
        now = self._generation()
        return [self._key(now), self._key(now - 1)]

    def verifying(self, kid: str) -> SigningKey | None:
        """The live key named `kid`; None for any other (older, future, another server's)."""
        return next((key for key in self.live() if key.kid == kid), None)

    def _generation(self) -> int:
        return self._now_ms() // self._rotation_ms

    def _key(self, generation: int) -> SigningKey:
        key = self._by_generation.get(generation)
        if key is None:
            key = _derive(self._pepper, generation)
            # only the live generations are kept: two entries, whatever the uptime
            self._by_generation = {g: k for g, k in self._by_generation.items() if g >= generation - 1}
            self._by_generation[generation] = key
        return key


def _derive(pepper: bytes, generation: int) -> SigningKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    seed = HKDF(SHA256(), length=32, salt=None, info=_INFO + str(generation).encode()).derive(pepper)
    private = Ed25519PrivateKey.from_private_bytes(seed)
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    # the fingerprint keeps two installations' keys of one generation apart
    return SigningKey(f"bt{generation}-{_b64(hashlib.sha256(raw).digest())[:12]}", private)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
