"""This process's name among the nodes: in leases, logs and bus messages.

One id per process, made once: `host-pid-random`. The random part keeps a restarted process
that got the same pid (common in containers, where the server is pid 1) from being taken for
the one that died, whose leases it must not inherit.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket


@functools.cache
def node_id() -> str:
    """This process's node id, e.g. `web-3-4711-9f2c1a`; the same for the process's life."""
    host = socket.gethostname().split(".")[0][:32] or "node"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"
