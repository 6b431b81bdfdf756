"""Where reports go, and file names that a second run never overwrites.

By default reports go to `bench-out/` under the current directory, which `.gitignore` ignores: a
run leaves nothing to commit by accident. `--out-dir bench/results` is the explicit way to commit
a result. Every stem carries the UTC time to the second (`result_stem` in `machine.py`), and
`claim_stem` adds `-2`, `-3`, ... when that stem's JSON already exists, so two runs in the same
second still write different files.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_OUT_DIR = Path("bench-out")


def claim_stem(out_dir: Path, stem: str) -> str:
    """Create `out_dir` and claim a stem no report there uses yet, by creating its empty `.json` exclusively.

    The caller then writes the report over that `.json`. Exclusive creation makes the claim hold
    even when two runs finish at the same moment.

    Raises:
        OSError: `out_dir` cannot be created or written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for attempt in itertools.count(1):
        candidate = stem if attempt == 1 else f"{stem}-{attempt}"
        try:
            (out_dir / f"{candidate}.json").open("x").close()
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable: itertools.count never ends")  # pragma: no cover


def write_json(path: Path, report: dict[str, Any]) -> None:
    """The report's data, indented (diffable), over the `.json` that `claim_stem` created."""
    import msgspec  # here, so that importing DEFAULT_OUT_DIR stays free

    path.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")


def write_json_and_markdown(
    report: dict[str, Any], out_dir: Path, stem: str, markdown: Callable[[dict[str, Any]], str]
) -> list[Path]:
    """`<stem>.json` and `<stem>.md` (`markdown(report)`) under a claimed stem; their paths.

    Raises:
        OSError: `out_dir` cannot be created or written.
    """
    stem = claim_stem(out_dir, stem)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_json(json_path, report)
    md_path.write_text(markdown(report))
    return [json_path, md_path]
