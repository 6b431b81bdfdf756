"""Ids for sessions, turns and streams: unguessable, and sorted by creation time.

`<prefix>_<12 hex digits of wall-clock ms><24 hex digits of randomness>`: 96 random bits make an
id impossible to guess from another (a caller who knows one session's id learns nothing about
the next), and the time prefix keeps cursor pagination (ordered by id) in creation order across
restarts. One `os.urandom` call costs about 0.5 us.
"""

from __future__ import annotations

import os
import re
import time

# What `new_id("ses")` makes: a string of this form may name a session (whether it does is the store's).
SESSION_ID = re.compile(r"ses_[0-9a-f]{36}")
# What `new_id("turn")` makes, on whichever node: a string of another form names no turn.
TURN_ID = re.compile(r"turn_[0-9a-f]{36}")


def new_id(prefix: str) -> str:
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(12).hex()}"


def new_run_id() -> str:
    """A run's id: `run_` and 80 random bits (runs page by creation time, not by id)."""
    return f"run_{os.urandom(10).hex()}"
