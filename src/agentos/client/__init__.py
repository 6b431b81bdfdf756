"""A typed Python client of the Agent OS HTTP API, async (`AsyncClient`) and blocking (`Client`).

Usage::

    from agentos.client import AsyncClient

    async with AsyncClient("http://127.0.0.1:8080") as client:
        ref = await client.start_run("ops", "tidy up")
        async for event in client.run_events(ref.run_id):
            if event.name == "human.requested":
                request = event.human_request()
                await client.answer(ref.run_id, request.operation_id, "yes")

See docs/client.md.
"""

from agentos.client._admin import AdminClient
from agentos.client._async import AsyncClient
from agentos.client._automation import Delivery, Schedule, ScheduleFire, ScheduleOptions, Trigger, TriggerSecret
from agentos.client._errors import APIError, ClientError, ProtocolError, StreamError, TransportError
from agentos.client._knowledge import Collection, Document, Hit
from agentos.client._runs import ForkOrigin, HumanRequest, Run, RunEvent, RunRef, RunSteered
from agentos.client._sync import Client
from agentos.client._types import BrowserToken, Message, Page, Session, SessionEvent, TurnEvent, TurnResult

__all__ = [
    "APIError",
    "AdminClient",
    "AsyncClient",
    "BrowserToken",
    "Client",
    "ClientError",
    "Collection",
    "Delivery",
    "Document",
    "ForkOrigin",
    "Hit",
    "HumanRequest",
    "Message",
    "Page",
    "ProtocolError",
    "Run",
    "RunEvent",
    "RunRef",
    "RunSteered",
    "Schedule",
    "ScheduleFire",
    "ScheduleOptions",
    "Session",
    "SessionEvent",
    "StreamError",
    "TransportError",
    "Trigger",
    "TriggerSecret",
    "TurnEvent",
    "TurnResult",
]
