"""`agentos bench peers` (which peers are installed, and how to install the others) and the sweep's
`--peers`/`--peers-dir` flags."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentos_bench.peers.catalog import PEERS, PEERS_DIR_ENV, default_peers_dir


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--peers",
        default="",
        help=f"peer servers to measure beside Agent OS on the same mock, comma-separated ({', '.join(PEERS)})",
    )
    p.add_argument(
        "--peers-dir",
        type=Path,
        help=f"where the peers are installed (default: ${PEERS_DIR_ENV} or ~/.cache/agentos-bench/peers)",
    )


def peer_names(text: str) -> list[str]:
    """Raises:
    SystemExit: a name the bench has no adapter for (exit 2, one line).
    """
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PEERS]
    if unknown:
        raise SystemExit(
            f"agentos bench sweep --peers: no adapter for {', '.join(unknown)} (known: {', '.join(PEERS)})"
        )
    return names


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    peers = commands.add_parser("peers", help="which peer servers are installed for `bench sweep --peers`")
    peers.add_argument("--peers-dir", type=Path, help="where they are installed")
    peers.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    from agentos_bench.peers.launch import peers_status

    peers_dir = args.peers_dir or default_peers_dir()
    print(f"peers directory: {peers_dir}")
    for peer in peers_status(peers_dir):
        if peer["reason"] == "no adapter":
            print(f"- {peer['name']}: {peer['title']}")
            continue
        state = f"installed, {peer['version']}" if peer["version"] else f"not installed ({peer['reason']})"
        print(f"- {peer['name']}: {peer['title']}: {state}")
        if not peer["version"]:
            print("".join(f"    {command}\n" for command in peer.get("install") or []), end="")
    return 0
