"""The client's errors: every failure a caller can see, mapped once at the HTTP edge.

    ClientError
      APIError(status, code, message, retry_after_s, error_id)   # the server answered with an error
      TransportError                                             # no answer: connection refused, reset, timeout
      StreamError(code, message, error_id)                       # an event stream failed and would not resume
      ProtocolError                                              # an answer this client cannot read

The server's errors are `{"error": {"code", "message"}}` with a 4xx or 5xx status; 429 and 503
carry `Retry-After`, kept here as `retry_after_s`. The client never retries them by itself: when
to try again is the caller's choice.
"""

from __future__ import annotations


class ClientError(Exception):
    """Base of every error the Agent OS client raises."""


class APIError(ClientError):
    """The server answered with an error status.

    Attributes:
        status: the HTTP status (404, 409, 422, 429, 503, ...).
        code: the server's error code (`session_not_found`, `overloaded`, `args_hash_mismatch`, ...);
            `http_error` when the body was not the server's JSON error (a proxy's page).
        message: the server's message.
        retry_after_s: from `Retry-After` (429 and 503), else None.
        error_id: for internal errors (500): the id to quote to the operator, else None.
    """

    def __init__(
        self, status: int, code: str, message: str, *, retry_after_s: float | None = None, error_id: str | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.error_id = error_id


class TransportError(ClientError):
    """No answer from the server: it could not be reached, the connection broke, or it timed out."""


class StreamError(ClientError):
    """An event stream failed on the server's side, or kept breaking, and could not be resumed.

    Attributes:
        code: the server's code from its `error` event, or `stream_broken` when the connection
            kept dropping.
        message: what happened.
        error_id: the id of the server's log entry, when it sent one.
    """

    def __init__(self, code: str, message: str, *, error_id: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.error_id = error_id


class ProtocolError(ClientError):
    """The server's answer is not what this client reads (not JSON, or a shape it does not know):
    most likely a client and server of different versions, or something else on that port."""
