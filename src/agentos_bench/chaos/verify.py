"""What the clients saw, compared with what the cluster kept (read back through the API, from
PostgreSQL), each finding attributed to the phase (fault) in which its turn began, or to every phase its run
was open in.

- **lost / duplicated turns**: a turn whose client saw `turn.completed` must have exactly one
  completed answer (an assistant message with its `turn_id`) in its session's transcript.
- **stale writes**: a session's turns are sent one after another, so in the transcript (ordered
  by the store's message id, the order of the writes) every message of turn k must come before
  any message of a turn the user sent later. A message of an earlier turn written after a later
  turn's is a stale write (a node that went on writing for a turn whose successor had started).
- **repeated steps**: in a run's journal no tool call (its id) may have two results, and across
  every node's workspace of the run (a run taken over goes on in the new node's data dir) no line
  of the `tools` scenario's `effects.log` may appear twice.
- **lost steps**: every `tool.result` a client saw (its sequence number) is in the journal.
- **unfinished runs**: every run started must end (`completed`) once the campaign drained.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.chaos.clients import Ledger, Run, Turn
from agentos_bench.runs.client import stored_events

_PARALLEL = 16


async def verify(
    http: aiohttp.ClientSession, url: str, ledger: Ledger, data_dirs: Sequence[Path]
) -> dict[str, Counter[str]]:
    """Per finding, per phase: how many (and under `unfinished`, each unfinished run's id: the
    phases are the keys' values only for the counters)."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    by_session: dict[str, list[Turn]] = defaultdict(list)
    for turn in ledger.turns:
        by_session[turn.session_id].append(turn)
    gate = asyncio.Semaphore(_PARALLEL)

    async def session(session_id: str, turns: list[Turn]) -> None:
        async with gate:
            messages = await _messages(http, url, session_id)
        _check_session(turns, messages, found)

    async def run(item: Run) -> None:
        async with gate:
            journal, status = await _journal(http, url, item.run_id), await _status(http, url, item.run_id)
        _check_run(item, journal, status, _effects(data_dirs, item.run_id), found)

    await asyncio.gather(*(session(s, t) for s, t in by_session.items()), *(run(r) for r in ledger.runs.values()))
    return found


def _check_session(turns: list[Turn], messages: list[dict[str, Any]], found: dict[str, Counter[str]]) -> None:
    by_text = {t.text: t for t in turns}
    index_of_turn_id: dict[str, Turn] = {}
    for m in messages:
        if m["role"] == "user" and (turn := by_text.get(str(m.get("content")))) is not None:
            index_of_turn_id[m["turn_id"]] = turn
    for t in turns:
        if t.turn_id is not None:
            index_of_turn_id.setdefault(t.turn_id, t)
    answers = Counter(m["turn_id"] for m in messages if m["role"] == "assistant" and m.get("status") == "completed")
    for t in turns:
        if t.outcome == "completed":
            count = answers[t.turn_id] if t.turn_id else 0
            found["lost_turns"][t.phase] += count == 0
            found["duplicated_turns"][t.phase] += count > 1
    latest = 0
    for m in messages:
        turn = index_of_turn_id.get(m["turn_id"])
        if turn is None:
            continue
        if turn.index < latest:
            found["stale_writes"][turn.phase] += 1
        latest = max(latest, turn.index)


def _check_run(
    item: Run,
    journal: list[tuple[int, str, dict[str, Any]]],
    status: str | None,
    effects: list[str],
    found: dict[str, Counter[str]],
) -> None:
    seqs = {seq: name for seq, name, _ in journal}
    results = Counter(_call_id(data) for _, name, data in journal if name == "tool.result")
    counts = {
        "lost_steps": sum(1 for seq, name in item.acknowledged.items() if seqs.get(seq) != name),
        "repeated_steps": sum(n - 1 for call, n in results.items() if call and n > 1),
        "repeated_effects": sum(n - 1 for n in Counter(effects).values() if n > 1),
        "runs": 1,
        "unfinished_runs": int(status != "completed"),
    }
    if status != "completed":  # by its id, for a look at its journal and the nodes' logs
        found["unfinished"][f"{item.run_id} status={status} seen={item.end_seen}"] += 1
    for phase in item.open_in:  # a run taken over during a fault is that fault's too
        for name, count in counts.items():
            found[name][phase] += count


def _call_id(data: dict[str, Any]) -> str:
    return str(data.get("call_id") or data.get("tool_call_id") or data.get("id") or "")


def _effects(data_dirs: Sequence[Path], run_id: str) -> list[str]:
    lines: list[str] = []
    for data_dir in data_dirs:
        path = data_dir / "workspaces" / run_id / "effects.log"
        with contextlib.suppress(OSError):
            lines += path.read_text().splitlines()
    return lines


async def _messages(http: aiohttp.ClientSession, url: str, session_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after: Any = None
    for _ in range(1000):  # bounded: a page holds 1000 messages
        params = {"limit": "1000"} | ({"after": str(after)} if after else {})
        async with http.get(f"{url}/v1/sessions/{session_id}/messages", params=params) as response:
            page = await response.json()
        found += page["data"]
        after = page.get("next_cursor")
        if not after or not page["data"]:
            break
    return found


async def _status(http: aiohttp.ClientSession, url: str, run_id: str) -> str | None:
    async with http.get(f"{url}/v1/runs/{run_id}") as response:
        return str((await response.json())["status"]) if response.status == 200 else None


async def _journal(http: aiohttp.ClientSession, url: str, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(seq, type, data) of the run's stored events (the faults bench's reader)."""
    return await stored_events(http, url, run_id)
