"""`agentos mock-llm` and `agentos bench ...` (owned by the bench kit)."""

from __future__ import annotations

import argparse


def register_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the bench kit's sub-commands to the `agentos` parser."""
