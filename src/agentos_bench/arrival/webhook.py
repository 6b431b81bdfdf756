"""The sender's side of Standard Webhooks (spec 1.0.0), as any sender of the server's triggers writes it.

Written from the spec, not borrowed from the server's verifier: the bench is a client, and a
delivery it signs this way is also a check that the server accepts what a third party sends.
"""

from __future__ import annotations

import base64
import hmac


def secret_bytes(text: str) -> bytes:
    """The key inside a `whsec_<base64>` secret (the server shows it once, when the trigger is made)."""
    return base64.b64decode(text.removeprefix("whsec_"), validate=True)


def signed_headers(secret: bytes, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """`webhook-id`, `webhook-timestamp` and `webhook-signature` (`v1,<base64 HMAC-SHA256>`) of one delivery."""
    digest = hmac.digest(secret, f"{webhook_id}.{timestamp}.".encode() + body, "sha256")
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }
