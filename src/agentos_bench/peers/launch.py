"""Start a peer against the mock, measure it, stop it; and say what is installed.

Usage (inside a sweep, with its mock and HTTP client)::

    entry = await measure_peer("agno", peers_dir, mock_url, work_dir, http, measure)

`measure(target, pid)` runs the sweep's points against the started peer. The returned entry is
the report's account of the peer: its version and setup, and either measured or the reason it
was not (not installed: with the commands that install it). Nothing here raises for a peer that
is missing or does not start: a sweep with peers always ends with its report.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from agentos_bench.common.processes import BenchSetupError, Child, free_port, stop_child, wait_ready
from agentos_bench.load.targets import samples_of
from agentos_bench.peers.catalog import NOT_BUILT, PEERS, Peer
from agentos_bench.peers.targets import PeerTarget

READY_TIMEOUT_S = 90.0  # a cold start of opencode's binary on a busy machine takes tens of seconds
WARM_TURN_TIMEOUT_S = 60.0
Measure = Callable[[PeerTarget, int], Awaitable[None]]


def peer_entry(peer: Peer, peers_dir: Path) -> dict[str, Any]:
    """What the report and `agentos bench peers` say about a peer before it is measured."""
    version = peer.version(peers_dir)
    return {
        "name": peer.name,
        "title": peer.title,
        "version": version,
        "setup": peer.setup,
        "measured": False,
        "reason": None if version else f"not installed in {peers_dir / peer.name}",
        "install": peer.install(peers_dir),
    }


def peers_status(peers_dir: Path) -> list[dict[str, Any]]:
    """Every peer the bench knows, installed or not, and those without an adapter."""
    known = [peer_entry(peer, peers_dir) for peer in PEERS.values()]
    missing = [{"name": name, "title": why, "version": None, "reason": "no adapter"} for name, why in NOT_BUILT.items()]
    return known + missing


async def measure_peer(
    name: str, peers_dir: Path, mock_url: str, run_dir: Path, http: aiohttp.ClientSession, measure: Measure
) -> dict[str, Any]:
    """Start peer `name` on the mock, `measure` it, stop it; return its report entry."""
    entry = peer_entry(PEERS[name], peers_dir)
    if entry["version"] is None:
        return entry
    try:
        async with start_peer(PEERS[name], peers_dir, mock_url, run_dir, http) as (target, pid):
            await measure(target, pid)
    except BenchSetupError as exc:
        entry["reason"] = str(exc)
        return entry
    entry["measured"] = True
    return entry


def peer_runner(peers_dir: Path) -> Callable[..., Awaitable[dict[str, Any]]]:
    """`measure_peer` for the peers installed in `peers_dir`: the sweep's `SweepPlan.peer_runner`."""

    async def run(name: str, mock_url: str, run_dir: Path, http: aiohttp.ClientSession, measure: Measure) -> Any:
        return await measure_peer(name, peers_dir, mock_url, run_dir, http, measure)

    return run


async def _warm(target: PeerTarget, http: aiohttp.ClientSession, title: str) -> None:
    """One throwaway turn in a throwaway session before the points: a peer's first turn after its
    start pays one-time costs (opencode: 5-8 s, loading its plugins and providers) that would
    otherwise land in the first point's short window. The per-session first-turn costs
    (opencode's title for each new session) stay in the points: they are part of a session.

    Raises:
        BenchSetupError: the peer could not serve that turn.
    """
    try:
        worker = await target.open_worker(http)
    except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
        raise BenchSetupError(f"{title}: no session for the warm-up turn: {exc!r}") from exc
    samples = samples_of(await target.turn(http, worker, WARM_TURN_TIMEOUT_S))
    await target.close_worker(http, worker)
    for sample in samples:
        if not sample.ok:
            raise BenchSetupError(f"{title}: the warm-up turn failed ({sample.failure})")


@contextlib.asynccontextmanager
async def start_peer(
    peer: Peer, peers_dir: Path, mock_url: str, run_dir: Path, http: aiohttp.ClientSession
) -> AsyncIterator[tuple[PeerTarget, int]]:
    """The peer's process, ready, and its target; stopped by pid on the way out.

    Raises:
        BenchSetupError: it exited or was not ready in time, or its event stream did not open.
    """
    port = free_port()
    launch = peer.launch(peers_dir, mock_url, port, run_dir)
    log_path = run_dir / f"peer-{peer.name}.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *launch.argv,
            cwd=launch.cwd,
            env={**os.environ, **launch.env},
            stdout=log,
            stderr=log,
            stdin=asyncio.subprocess.DEVNULL,
        )
    child = Child(name=peer.name, process=process, url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:
        if not await wait_ready(child, READY_TIMEOUT_S, launch.ready_path):
            raise BenchSetupError(f"{peer.title} not ready in {READY_TIMEOUT_S:g} s (see {str(log_path)!r})")
        target = peer.target(child.url)
        try:
            await target.start(http)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BenchSetupError(f"{peer.title}: its event stream did not open: {exc!r}") from exc
        try:
            await _warm(target, http, peer.title)
            yield target, process.pid
        finally:
            await target.stop()
    finally:
        await stop_child(process)
