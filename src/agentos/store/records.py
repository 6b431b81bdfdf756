"""What the store keeps. Every row carries a tenant id from the start.

`tenant_id` is required on sessions, messages and events (no default): whoever makes a record
names its tenant, so no write can fall into the default tenant by omission.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from agentos.kernel import OnBusy

DEFAULT_TENANT = "default"

MessageRole = Literal["user", "assistant", "system", "tool"]
MessageStatus = Literal["completed", "cancelled", "failed"]


class SessionRecord(msgspec.Struct, kw_only=True):
    session_id: str
    tenant_id: str
    agent: str = "default"
    metadata: dict[str, Any] = {}
    created_at_ms: int = 0
    on_busy: OnBusy | None = None  # its turns' default `on_busy`; None: its agent's, else "replace"
    owner: str | None = None  # the end user who made it (`Principal.subject`); None: a tenant key


class MessageRecord(msgspec.Struct, kw_only=True):
    session_id: str
    turn_id: str
    role: MessageRole
    content: str
    status: MessageStatus = "completed"
    tenant_id: str
    created_at_ms: int = 0
    usage: dict[str, int] | None = None
    message_id: int = 0  # assigned by the store


class EventRecord(msgspec.Struct, kw_only=True):
    session_id: str
    turn_id: str
    type: str
    data: dict[str, Any]
    tenant_id: str
    created_at_ms: int = 0
    event_id: int = 0  # assigned by the store
    seq: int = 0  # its place in the turn's stream (`<turn_id>:<seq>`); 0 in rows stored before seqs were


class AccessRecord(msgspec.Struct, kw_only=True, array_like=True):
    ts_ms: int
    method: str
    path: str
    status: int
    duration_ms: float
    remote: str
    tenant_id: str = DEFAULT_TENANT  # "" when the request had no principal (an open route, a 401)
    key_id: str = ""  # the public id of the key presented, never the key; "" if none or malformed
    trace_id: str = ""  # the request's trace ([telemetry]); "" when untraced
    subject: str = ""  # the end user: a user token's `sub`, a browser token's user; "" for a tenant key

    def params(self) -> tuple[str, int, str, str, int, float, str, str, str, str]:
        """The row's values in the order of both stores' `INSERT_ACCESS`."""
        return (
            self.tenant_id,
            self.ts_ms,
            self.method,
            self.path,
            self.status,
            self.duration_ms,
            self.remote,
            self.key_id,
            self.trace_id,
            self.subject,
        )


def access_params(tenant_id: str, session_id: str) -> tuple[str, str, str, str]:
    """The parameters of a deletion of the session's access rows (`DELETE_SESSION_ACCESS`):
    every route of a session is `/v1/sessions/{id}` or below it, and the id range `[p/, p0)`
    holds exactly the paths below `p` (`0` follows `/`)."""
    prefix = f"/v1/sessions/{session_id}"
    return (tenant_id, prefix, f"{prefix}/", f"{prefix}0")
