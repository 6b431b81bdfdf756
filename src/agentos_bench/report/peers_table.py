"""The sweep report's account of the peers (`--peers`): what ran, which version, and what was not measured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_COMPARABLE = (
    "Same machine, same mock process and settings, same load generator, points and window, one "
    "session per worker (sessions == concurrency), turns streamed. Not the same work: each server "
    "does what it does per turn (its own storage, its own prompt to the model), so a row measures "
    "that server as installed, not a like-for-like kernel. Peers run after Agent OS, so a machine "
    "that got busier in between moves their rows."
)


def peers_section(peers: Sequence[dict[str, Any]]) -> list[str]:
    """`## Peers`: one line per peer asked for; nothing when none was."""
    if not peers:
        return []
    lines = ["", "## Peers", "", _COMPARABLE, "", "| peer | version | set-up | measured |", "|---|---|---|---|"]
    for peer in peers:
        lines.append(
            f"| {peer['title']} (`{peer['name']}`) | {peer['version'] or '–'} | {peer['setup']} | {_status(peer)} |"
        )
    return lines


def _status(peer: dict[str, Any]) -> str:
    if peer["measured"]:
        return "yes"
    how = "; ".join(f"`{command}`" for command in peer.get("install") or [])
    if peer["version"] is None and how:
        return f"not measured ({peer['reason']}; install: {how})"
    return f"not measured ({peer['reason']})"
