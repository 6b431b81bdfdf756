"""What one request of each load does, against the fixture the run created.

Each sender raises `Failed` naming how a request failed (`http_429`, `turn_failed`, ...); the
dispatcher times it. Success is what a client would call success:

- `api_read`: an authenticated list (agents, sessions, collections, triggers in turn): `200`;
- `chat_stream`: a turn over the session's WebSocket to `turn.completed` (first token timed);
  every fifth is cancelled after its first token and succeeds with `turn.cancelled`;
- `agent_run`: `POST /v1/agents/{name}/runs`, its events followed to `run.completed`, the human
  answered at once (the bench's run client);
- `rag_query`: `POST /v1/collections/{name}/query`: `200`;
- `ingest`: a document upload: `202` (acceptance; how fast the indexer drains its queue is not
  this measurement);
- `trigger_fire`: a signed webhook delivery: `202`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from agentos_bench.arrival.dispatch import Attempt, Failed
from agentos_bench.arrival.schedule import Offer
from agentos_bench.arrival.webhook import signed_headers
from agentos_bench.runs.client import RunTarget, drive_run

_LISTS = ("/v1/agents", "/v1/sessions?limit=20", "/v1/collections", "/v1/triggers?limit=20")
_WORDS = ("orbit", "lantern", "quartz", "meadow", "signal", "harbor", "cobalt", "ember", "tundra", "velvet")


@dataclass(slots=True)
class Fixture:
    """What the run created for its loads (`fixture.py`). The key lives here only, never on disk."""

    url: str
    key: str
    agent: str
    collection: str
    trigger_id: str
    trigger_secret: bytes
    tenant_id: str = ""
    key_id: str = ""
    idle_sessions: list[str] = field(default_factory=list)  # sessions with no turn running
    urls: tuple[str, ...] = ()  # the nodes taking the load in turn; () = `url` alone

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def text_of(n: int, words: int = 60) -> str:
    """A deterministic text (document n, or the query about it)."""
    return " ".join(_WORDS[(n * 7 + i * i) % len(_WORDS)] for i in range(words)) + f" item{n}"


class Loads:
    """The senders, bound to the fixture and two HTTP clients: the tenant's (its key in every
    request) and a webhook sender's (no key: a delivery's signature is its credential)."""

    def __init__(
        self, http: aiohttp.ClientSession, anonymous: aiohttp.ClientSession, fixture: Fixture, *, run_timeout_s: float
    ) -> None:
        self._http = http
        self._webhooks = anonymous
        self._fx = fixture
        self._run_timeout_s = run_timeout_s
        self._lists = itertools.cycle(_LISTS)
        self._nodes = itertools.cycle(fixture.urls or (fixture.url,))
        self._senders: dict[str, Callable[[Offer, Attempt], Coroutine[Any, Any, None]]] = {
            "api_read": self.api_read,
            "chat_stream": self.chat_stream,
            "agent_run": self.agent_run,
            "rag_query": self.rag_query,
            "ingest": self.ingest,
            "trigger_fire": self.trigger_fire,
        }

    async def send(self, offer: Offer, attempt: Attempt) -> None:
        await self._senders[offer.kind](offer, attempt)

    def _node(self) -> str:
        """The next node: each request goes to the next one in turn, as a round-robin balancer."""
        return next(self._nodes)

    async def api_read(self, offer: Offer, attempt: Attempt) -> None:
        async with self._http.get(self._node() + next(self._lists)) as response:
            await response.read()
            _expect(response, 200)

    async def rag_query(self, offer: Offer, attempt: Attempt) -> None:
        body = {"query": text_of(offer.index, 8), "top_k": 5}
        url = f"{self._node()}/v1/collections/{self._fx.collection}/query"
        async with self._http.post(url, json=body) as response:
            await response.read()
            _expect(response, 200)

    async def ingest(self, offer: Offer, attempt: Attempt) -> None:
        body = {"content": text_of(offer.index, 200), "content_type": "text/plain", "title": f"load {offer.index}"}
        url = f"{self._node()}/v1/collections/{self._fx.collection}/documents"
        async with self._http.post(url, json=body) as response:
            await response.read()
            _expect(response, 202)

    async def trigger_fire(self, offer: Offer, attempt: Attempt) -> None:
        body = msgspec.json.encode({"event": "load", "n": offer.index})
        webhook_id = f"load-{offer.index}-{time.time_ns()}"
        headers = {
            "Content-Type": "application/json",
            **signed_headers(self._fx.trigger_secret, webhook_id, int(time.time()), body),
        }
        url = f"{self._node()}/v1/triggers/{self._fx.trigger_id}/events"
        async with self._webhooks.post(url, data=body, headers=headers) as response:
            await response.read()
            _expect(response, 202)

    async def agent_run(self, offer: Offer, attempt: Attempt) -> None:
        target = RunTarget(self._node(), agent=self._fx.agent, run_input=f"load run {offer.index}")
        outcome = await drive_run(self._http, target, answer_delay_s=0.0, timeout_s=self._run_timeout_s)
        if not outcome.ok:
            raise Failed(outcome.failure or "run_not_completed")

    async def chat_stream(self, offer: Offer, attempt: Attempt) -> None:
        session_id = await self._session()
        url = f"{self._node()}/v1/sessions/{session_id}/ws"
        try:
            async with self._http.ws_connect(url) as ws:
                await ws.send_str(msgspec.json.encode({"type": "turn", "input": text_of(offer.index, 8)}).decode())
                await _follow_turn(ws, attempt, cancel=offer.cancel)
        except aiohttp.WSServerHandshakeError as exc:
            raise Failed(f"http_{exc.status}") from None
        self._fx.idle_sessions.append(session_id)  # only a session whose turn ended is reused

    async def _session(self) -> str:
        if self._fx.idle_sessions:
            return self._fx.idle_sessions.pop()
        async with self._http.post(f"{self._node()}/v1/sessions", json={}) as response:
            data = await response.read()
            _expect(response, 201)
        return str(msgspec.json.decode(data)["id"])


async def _follow_turn(ws: aiohttp.ClientWebSocketResponse, attempt: Attempt, *, cancel: bool) -> None:
    async for message in ws:
        if message.type is not aiohttp.WSMsgType.TEXT:
            break
        frame = msgspec.json.decode(message.data)
        kind = frame.get("type")
        if kind == "token":
            attempt.first_token()
            if cancel:
                cancel = False
                await ws.send_str('{"type": "cancel"}')
        elif kind == "turn.completed":
            return
        elif kind == "turn.cancelled":
            if frame.get("data", {}).get("reason") == "cancelled":
                return  # the cancel this request sent
            raise Failed("turn_cancelled")
        elif kind == "turn.failed":
            raise Failed("turn_failed")
        elif kind == "error":
            raise Failed(f"error_{frame.get('error', {}).get('code', 'unknown')}")
    raise Failed("stream_break")


def _expect(response: aiohttp.ClientResponse, status: int) -> None:
    if response.status != status:
        raise Failed(f"http_{response.status}")
