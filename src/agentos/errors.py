"""The whole error tree of Agent OS.

    AgentOSError
      ConfigError                  # operator mistake: fail at start-up, naming the key
      RequestError(status, code)   # the client's fault -> 4xx with a JSON body
        BadRequest            400  malformed JSON, bad query parameters
        Unauthorized          401
        BudgetExceeded        402  a budget (tenant, key or run) cannot hold the call's worst case
        Forbidden             403  the caller may not ask for this (a host process, a private URL)
          QuotaExceeded       403  a tenant quota (sessions, tokens per day); may carry retry_after_s
        NotFound              404  SessionNotFound, RunNotFound, AgentNotFound
        NotAcceptable         406
        RequestTimeout        408  the request body did not arrive in time (server.body_timeout_s)
        Conflict              409
          TurnInProgress      409  `on_busy` "reject" in a busy session; carries the running turn_id
        PayloadTooLarge       413
        UnsupportedMediaType  415  a body that is not JSON on a JSON route
        InvalidInput          422  well-formed JSON of the wrong shape
        AdmissionRejected     429  carries retry_after_s; code: overloaded, tenant_concurrent_turns, tenant_active_runs,
                                   turn_queue_full (the session's queue of turns is full)
        RateLimited           429  a rate limit of the caller's key or tenant; carries retry_after_s
        ShuttingDown          503  the server is draining: nothing new starts
      ProviderError(retryable, retry_after_s, code)   # the upstream's fault
        ProviderTimeout  ProviderHTTPError(status_code)  ProviderProtocolError  ProviderUnavailable
        ProviderLimitTimeout  # no provider permit within kernel.permit_wait_timeout_s
        ProviderUnsupported   # the request asks for what the target's wire cannot express
      StoreError                   # a store failed: a bug or a bad row -> 500 with an error_id
        StoreUnavailable      503  the database cannot be reached (refused, dropped, timed out)
                                   or the writer is gone; carries retry_after_s (Retry-After)
        LeaseLost                  a run's lease was taken over by another node: leave the run alone
        StaleTurn             409  a write of a turn refused: a newer turn of its session started
                                   (turn epoch fencing); the turn ends `turn.cancelled` "superseded"

Errors are mapped to HTTP in one place (`agentos.api.errors`), and provider errors become a
`turn.failed` event with the error's `code` as the reason. Anything else is an internal error:
its details stay in the log under a `new_error_id()`; the client gets only the code and that id.
"""

from __future__ import annotations

import secrets
from typing import Any


class AgentOSError(Exception):
    """Base of every error Agent OS raises on purpose.

    A `RequestError` or a `ProviderError` says its HTTP status and its code in its bases, the
    tree above in one line each: `class NotFound(RequestError, status=404, code="not_found")`."""

    def __init_subclass__(cls, *, status: int | None = None, code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in (("status", status), ("code", code)):
            if value is not None:
                setattr(cls, name, value)


class ConfigError(AgentOSError):
    """The configuration is invalid; the message names the offending key."""


class RequestError(AgentOSError, status=400, code="bad_request"):
    """The client's fault: a 4xx (or 503) answer with a JSON body of `code` and the message."""

    status: int
    code: str
    retry_after_s: int | None = None  # set: the answer carries `Retry-After`
    param: str | None = None  # the request field at fault, where known (OpenAI's error `param`)
    turn_id: str | None = None  # the turn the error is about, where one is (`TurnInProgress`)

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class BadRequest(RequestError, status=400, code="bad_request"):
    """Malformed JSON, bad query parameters."""


class Unauthorized(RequestError, status=401, code="unauthorized"):
    """The request carries no valid key."""


class BudgetExceeded(RequestError, status=402, code="budget_exceeded"):
    """A spending budget cannot hold the worst case of the next model call; `budget` names it
    (`tenant:<id>:day`, `key:<id>:month`, `run:<id>`, ...). Inside a run it ends the run with
    this code as the reason."""

    def __init__(self, message: str, *, budget: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.budget = budget
        self.retry_after_s = retry_after_s


class Forbidden(RequestError, status=403, code="forbidden"):
    """The caller may not ask for this (a host process, a private URL)."""


class QuotaExceeded(Forbidden):
    """A tenant quota is used up; `code` names it (`quota_sessions`, `quota_tokens_per_day`).

    A 403, not a 429: waiting a little does not help, except for a quota that renews
    (tokens per day), which says when in `retry_after_s`."""

    def __init__(self, message: str, *, code: str, retry_after_s: int | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class NotFound(RequestError, status=404, code="not_found"):
    """No such thing for this tenant (another tenant's reads the same as a missing one)."""


class SessionNotFound(NotFound, code="session_not_found"):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")


class NotAcceptable(RequestError, status=406, code="not_acceptable"):
    """The answer cannot be given in a media type the request accepts."""


class RequestTimeout(RequestError, status=408, code="request_timeout"):
    """The request body did not arrive in time (server.body_timeout_s)."""


class Conflict(RequestError, status=409, code="conflict"):
    """The request collides with what is there (a taken name, a run not waiting, a reused key)."""


class TurnInProgress(Conflict, code="turn_in_progress"):
    """A turn sent with `on_busy` "reject" while its session runs one; `turn_id` names that one."""

    def __init__(self, session_id: str, running_turn_id: str) -> None:
        super().__init__(f"session {session_id!r} is running turn {running_turn_id!r}")
        self.turn_id = running_turn_id


class PayloadTooLarge(RequestError, status=413, code="payload_too_large"):
    """A body over the limit, as sent or once inflated."""


class UnsupportedMediaType(RequestError, status=415, code="unsupported_media_type"):
    """A body whose Content-Type the route does not take (a JSON route: not JSON)."""


class InvalidInput(RequestError, status=422, code="invalid_input"):
    """Well-formed JSON of the wrong shape."""


class AdmissionRejected(RequestError, status=429, code="overloaded"):
    def __init__(self, retry_after_s: int, *, what: str = "turns", code: str = "overloaded") -> None:
        whose = "" if code == "overloaded" else "of this tenant "
        message = f"too many {what} {whose}in flight; retry after {retry_after_s}s"
        if code == "turn_queue_full":
            message = f"the session's queue of turns is full; retry after {retry_after_s}s"
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class RateLimited(RequestError, status=429):
    """Over a rate limit; `code` names it (`turn_rate_limited`, `run_rate_limited`, ...)."""

    def __init__(self, message: str, *, code: str, retry_after_s: int) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class ShuttingDown(RequestError, status=503, code="shutting_down"):
    """The server is draining: running work finishes, nothing new is started."""

    retry_after_s = 1


def new_error_id() -> str:
    """An id a client can quote for an internal error whose details stay in the server log."""
    return f"err_{secrets.token_hex(8)}"


class ProviderError(AgentOSError, code="provider_error"):
    """The provider failed; `code` is the reason reported in `turn.failed`."""

    code: str

    def __init__(self, message: str, *, retryable: bool = False, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class ProviderTimeout(ProviderError, code="provider_timeout"):
    """The provider did not answer, or stopped streaming, in time."""


class ProviderHTTPError(ProviderError, code="provider_http_error"):
    def __init__(self, status_code: int, message: str, *, retry_after_s: float | None = None) -> None:
        retryable = status_code == 429 or status_code >= 500
        super().__init__(message, retryable=retryable, retry_after_s=retry_after_s)
        self.status_code = status_code
        if status_code == 429:
            self.code = "provider_rate_limited"


class ProviderProtocolError(ProviderError, code="provider_protocol_error"):
    """The provider's stream broke, or is not what its protocol says."""


class ProviderUnavailable(ProviderError, code="provider_unavailable"):
    """The provider cannot be reached."""


class ProviderLimitTimeout(ProviderError, code="provider_limit_timeout"):
    """The turn waited longer than `kernel.permit_wait_timeout_s` for a provider permit."""


class ProviderUnsupported(ProviderError, code="provider_unsupported"):
    """The request asks for something the target's wire cannot express (an image part, `n > 1`,
    a tool that is not a function); the message names the feature. Never retryable: another
    try at the same target would fail the same way."""

    def __init__(self, feature: str, wire: str) -> None:
        super().__init__(f"the {wire} wire cannot express {feature}", retryable=False)
        self.feature = feature


class StoreError(AgentOSError):
    """The store failed to write or read."""


class LeaseLost(StoreError):
    """The run is another node's now (its lease expired and was taken over): this node must
    leave it alone."""


class StoreUnavailable(StoreError):
    """The store cannot be reached right now: nobody's bug, and waiting may help.

    PostgreSQL refused or dropped the connection, or did not answer in time (a pool acquire
    or an awaited write past its bound); a SQLite writer is closed or its thread died. The API
    answers 503 `store_unavailable` with `Retry-After`, never a hang; `/readyz` says so too."""

    status = 503
    code = "store_unavailable"
    retry_after_s = 1  # the same as kernel.retry_after_s's default: the store may be back soon


class StaleTurn(StoreError):
    """PostgreSQL refused a write of a turn: its session's turn epoch moved on (a newer turn
    started on some node, or the turn was cancelled from another node, or the session was
    deleted). The runtime ends the turn `turn.cancelled` with reason "superseded"; it never
    reaches a client as an error."""

    status = 409
    code = "superseded"
