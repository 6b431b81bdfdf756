"""What a caller sends for a run, checked before anything is journaled; and the workspace clean-up."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from agentos.errors import Conflict, InvalidInput

_ANSWER_KINDS = ("question", "approval", "uncertain")


def check_answer(request: dict[str, Any], answer: str, approve: bool | None, args_hash: str | None) -> dict[str, Any]:
    kind = request["kind"]
    assert kind in _ANSWER_KINDS, kind
    if kind == "approval":
        if approve is None or args_hash is None:
            raise InvalidInput("an approval needs both 'approve' (true or false) and 'args_hash'")
        if args_hash != request["args_hash"]:
            raise Conflict("args_hash does not match the arguments awaiting approval", code="args_hash_mismatch")
    if kind == "uncertain" and answer not in ("retry", "skip"):
        raise InvalidInput("an uncertain step is answered with 'retry' or 'skip'")
    return {"answer": answer, "approve": approve}


def remove_dirs(paths: list[Path]) -> None:
    """Remove run workspaces (blocking: call it in a thread)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
