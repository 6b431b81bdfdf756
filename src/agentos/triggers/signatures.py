"""Standard Webhooks (spec 1.0.0) signing and verification, and where a trigger's secrets come from.

A sender signs `f"{webhook-id}.{webhook-timestamp}."` + the raw body with HMAC-SHA256 and sends
`webhook-signature: v1,<base64>` (several, space separated, while a secret is being rotated).
We verify the raw bytes (never re-serialized JSON), compare in constant time against every
secret still valid, and refuse a timestamp further than the tolerance from now either way (a
captured request cannot be replayed later; a redelivery is signed again with a new timestamp).

A trigger's secret is never stored: `derive_secret(pepper, trigger_id, nonce)` makes it again
from the server's key pepper and the random nonce its row keeps, so a copy of the database
alone cannot sign a delivery.

Every refusal is an `Unauthorized` whose message names what was wrong, never what was sent
(no body, no signature): hostile input (malformed base64, no comma, a huge header, a body
that is not UTF-8) ends in the same 401s, never in another exception.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence

from agentos.errors import Unauthorized

SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24  # the spec's bounds
MAX_SECRET_BYTES = 64
# A header longer than this is refused unread: a few rotated signatures fit many times over.
MAX_SIGNATURE_HEADER = 4096
MAX_SIGNATURES = 16  # entries looked at in one header
_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # Unix seconds; `int()` alone takes "1_0", " 1", "١"
_DERIVATION_LABEL = b"agentos-trigger-secret\0"


def derive_secret(pepper: bytes, trigger_id: str, nonce: str) -> bytes:
    """The 32-byte signing secret of one `SecretRow` (its `nonce`) of `trigger_id`."""
    message = _DERIVATION_LABEL + trigger_id.encode() + b"\0" + nonce.encode()
    return hmac.new(pepper, message, hashlib.sha256).digest()


def encode_secret(secret: bytes) -> str:
    """`whsec_<base64>`: the form a sender's Standard Webhooks library takes."""
    return SECRET_PREFIX + base64.b64encode(secret).decode()


def decode_secret(text: str) -> bytes:
    """The bytes of a `whsec_<base64>` secret (the prefix is optional, as in the spec's libraries).

    Raises:
        ValueError: not base64, or not 24 to 64 bytes.
    """
    raw = text.removeprefix(SECRET_PREFIX)
    try:
        secret = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is whsec_ and base64") from None
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise ValueError(f"a webhook secret has {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes")
    return secret


def _mac(secret: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    # surrogatepass: any str encodes (aiohttp keeps undecodable header bytes as surrogates)
    signed = msg_id.encode("utf-8", "surrogatepass") + b"." + timestamp.encode() + b"." + body
    return hmac.new(secret, signed, hashlib.sha256).digest()


def sign(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` entry `v1,<base64>` of one delivery (what a sender sends)."""
    return "v1," + base64.b64encode(_mac(secret, msg_id, str(timestamp), body)).decode()


def verify(secrets: Sequence[bytes], headers: Mapping[str, str], body: bytes, now_s: float, tolerance_s: int) -> None:
    """Check a delivery's Standard Webhooks headers against `secrets` (any one may match).

    Raises:
        Unauthorized: `missing_signature` (a header is absent or empty),
            `timestamp_out_of_tolerance` (not an integer, or more than `tolerance_s` from
            `now_s`), `invalid_signature` (no `v1` entry matches any secret).
    """
    msg_id = headers.get("webhook-id", "")
    timestamp = headers.get("webhook-timestamp", "")
    given = headers.get("webhook-signature", "")
    if not msg_id or not timestamp or not given:
        raise Unauthorized("missing webhook-id, webhook-timestamp or webhook-signature", code="missing_signature")
    if _TIMESTAMP.fullmatch(timestamp) is None or abs(int(timestamp) - now_s) > tolerance_s:
        raise Unauthorized(
            f"webhook-timestamp must be Unix seconds within {tolerance_s}s of the server's time",
            code="timestamp_out_of_tolerance",
        )
    candidates = _v1_signatures(given)
    expected = [_mac(secret, msg_id, timestamp, body) for secret in secrets]
    matched = False
    for candidate in candidates:  # every comparison runs: the time says nothing about which failed
        for mac in expected:
            matched |= hmac.compare_digest(mac, candidate)
    if not matched:
        raise Unauthorized("no webhook-signature entry matches the trigger's secret", code="invalid_signature")


def _v1_signatures(header: str) -> list[bytes]:
    """The decoded `v1,<base64>` entries of a `webhook-signature` header; other versions
    (`v1a` is ed25519) and malformed entries are skipped."""
    if len(header) > MAX_SIGNATURE_HEADER:
        return []
    found: list[bytes] = []
    for entry in header.split(" ")[:MAX_SIGNATURES]:
        version, comma, value = entry.partition(",")
        if version != "v1" or not comma:
            continue
        try:
            found.append(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            continue
    return found
