"""Ids for turns, runs and streams: unique, cheap, and not guessable across restarts."""

from __future__ import annotations

import itertools
import uuid

_ID_PREFIX = uuid.uuid4().hex[:16]  # random per process: ids stay unique across restarts
_id_counter = itertools.count(1)


def new_id(prefix: str) -> str:
    """Unique ids without a syscall per id (uuid4 reads the kernel's random pool each time)."""
    return f"{prefix}_{_ID_PREFIX}{next(_id_counter):08x}"
