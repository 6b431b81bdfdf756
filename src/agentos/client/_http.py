"""The client's HTTP edge: one aiohttp session, JSON calls, SSE streams, and the single place
where aiohttp's exceptions and the server's error bodies become the client's errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import aiohttp
import msgspec

from agentos.client._errors import APIError, ProtocolError, TransportError
from agentos.providers.sse_parser import SSEEvent, SSEParser

T = TypeVar("T")

Params = Mapping[str, str | int]


def query_params(**values: str | int | None) -> Params:
    """The query parameters given (None: left out, the server's default)."""
    return {name: value for name, value in values.items() if value is not None}


DEFAULT_TIMEOUT_S = 30.0

_JSON = {"Content-Type": "application/json"}
_ACCEPT_JSON = {"Accept": "application/json"}
_ACCEPT_SSE = {"Accept": "text/event-stream"}


class _ErrorBody(msgspec.Struct):
    code: str
    message: str = ""
    error_id: str | None = None


class _ErrorEnvelope(msgspec.Struct):
    error: _ErrorBody


class Transport:
    """The aiohttp session behind one client, opened on first use (inside the running loop, where
    aiohttp wants it) and closed by `aclose`."""

    def __init__(self, base_url: str, *, token: str | None, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self._timeout_s)
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=timeout)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self,
        method: str,
        path: str,
        kind: type[T],
        *,
        body: Any = None,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> T:
        """Send one request (`headers` beside the client's) and decode its JSON answer as `kind`
        (None for an empty answer).

        Raises:
            APIError: the server answered with an error status.
            TransportError: no answer (unreachable, connection broken, `timeout_s` passed).
            ProtocolError: an answer that does not decode as `kind`.
        """
        url = self.base_url + path
        data, content_type = _encode(body)
        try:
            async with self._http().request(
                method, url, data=data, params=params, headers={**_ACCEPT_JSON, **content_type, **(headers or {})}
            ) as response:
                raw = await response.read()
                raise_for_status(response.status, response.headers, raw)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransportError(f"{method} {url}: {_describe(exc)}") from exc
        return decode(raw or b"null", kind)

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        idle_timeout_s: float | None = None,
    ) -> AsyncIterator[AsyncIterator[SSEEvent]]:
        """Open an SSE response; yields its events as they arrive.

        A stream has no overall deadline (a run may wait hours for a human): `timeout_s` bounds
        the connect, `idle_timeout_s` (None: no bound) the silence between two chunks.

        Raises:
            APIError: the server refused the stream (its error status, before any event).
            TransportError: no answer, or the connection broke or fell silent mid-stream.
        """
        url = self.base_url + path
        data, extra = _encode(body)
        timeout = aiohttp.ClientTimeout(total=None, connect=self._timeout_s, sock_read=idle_timeout_s)
        all_headers = {**_ACCEPT_SSE, **extra, **(headers or {})}
        try:
            async with self._http().request(method, url, data=data, headers=all_headers, timeout=timeout) as response:
                if response.status >= 400:
                    raise_for_status(response.status, response.headers, await response.read())
                yield _events(response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransportError(f"{method} {url}: {_describe(exc)}") from exc


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[SSEEvent]:
    parser = SSEParser()
    async for chunk in response.content.iter_any():
        for event in parser.feed(chunk):
            yield event


def raise_for_status(status: int, headers: Mapping[str, str], raw: bytes) -> None:
    """Raises: APIError: `status` is 400 or above (the server's `{"error": {...}}` read when present)."""
    if status < 400:
        return
    retry_after_s = parse_retry_after(headers.get("Retry-After"))
    try:
        error = msgspec.json.decode(raw, type=_ErrorEnvelope).error
    except msgspec.DecodeError:  # not our server's JSON (a proxy's page): keep the start of it
        text = raw[:200].decode("utf-8", "replace").strip()
        raise APIError(status, "http_error", text or f"HTTP {status}", retry_after_s=retry_after_s) from None
    raise APIError(status, error.code, error.message, retry_after_s=retry_after_s, error_id=error.error_id)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header; None when absent or not a number (an HTTP date is not
    sent by Agent OS)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def decode(raw: bytes | str, kind: type[T]) -> T:
    """Raises: ProtocolError: `raw` is not JSON of the shape `kind`."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise ProtocolError(f"unexpected answer from the server ({exc})") from None


def event_data(sse: SSEEvent) -> dict[str, Any]:
    """An SSE event's data, a JSON object. Raises: ProtocolError: it is not one."""
    return decode(sse.data, dict[str, Any])


def url_path(template: str, *parts: str) -> str:
    """`template` with each `{}` replaced by a part, all of it quoted (a `/` in an id is escaped)."""
    return template.format(*(quote(part, safe="") for part in parts))


def _encode(body: Any) -> tuple[bytes | None, Mapping[str, str]]:
    return (None, {}) if body is None else (msgspec.json.encode(body), _JSON)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class HttpClient:
    """What every client of the server shares: its `Transport`, `async with`, `aclose`.

    Args:
        base_url: the server, e.g. `http://127.0.0.1:8080`.
        token: a bearer token (None: no auth).
        timeout_s: the whole of a plain request; the connect of a stream.
    """

    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._http = Transport(base_url, token=token, timeout_s=timeout_s)

    @property
    def base_url(self) -> str:
        return self._http.base_url

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections; the client may be used again afterwards (it reopens them)."""
        await self._http.aclose()
