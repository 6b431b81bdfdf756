"""This process's node id: who owns a run's lease (`agentos.agents.leases`)."""

from __future__ import annotations

import functools
import os
import secrets
import socket


@functools.cache
def node_id() -> str:
    """`hostname-pid-random`, unique per process (a restarted process is a new node), cached."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
