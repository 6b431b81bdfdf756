"""What leaving no readable copy of a deleted session in SQLite's free pages costs, per delete.

A `sessions.db`-like file (WAL, `synchronous=NORMAL`, the store's messages table) holds
`--sessions` sessions of `--messages` messages each; `--deletes` of them are then deleted one
transaction each (as `DELETE /v1/sessions/{id}` does), in three modes:

- `plain`: SQLite's default: the deleted cells stay readable in their pages and free pages;
- `secure_delete`: `PRAGMA secure_delete=ON`: SQLite zeroes the deleted content as it deletes;
- `incremental_vacuum`: `auto_vacuum=INCREMENTAL` and `PRAGMA incremental_vacuum` after each
  delete: the free pages are given back to the file system, but a page that keeps other rows
  keeps the deleted cell's bytes too.

Each delete is followed by `wal_checkpoint(TRUNCATE)` in every mode (the WAL holds the original
inserts' frames otherwise), and the report says whether a marker of a deleted session is still
in the database file. Run it small; the numbers are per delete, median and p95:

    .venv/bin/python bench/scripts/free_pages.py --sessions 10000 --messages 4 --deletes 200 [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

_SCHEMA = """
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, tenant_id TEXT, created_at_ms INTEGER);
CREATE TABLE messages (message_id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT, session_id TEXT,
  turn_id TEXT, role TEXT, content TEXT, status TEXT, usage TEXT, created_at_ms INTEGER, UNIQUE (turn_id, role));
CREATE INDEX messages_by_tenant ON messages (tenant_id, session_id, message_id);
"""
MODES = ("plain", "secure_delete", "incremental_vacuum")


def build(path: Path, mode: str, sessions: int, messages: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    if mode == "incremental_vacuum":
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # before the first table: no VACUUM needed
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(_SCHEMA)
    conn.execute("BEGIN")
    for s in range(sessions):
        conn.execute("INSERT INTO sessions VALUES (?, 'default', 0)", (f"ses_{s:06d}",))
        for m in range(messages):
            text = f"MARKER-{s:06d}-{m} " + "lorem ipsum dolor sit amet " * 8
            params = ("default", f"ses_{s:06d}", f"turn_{s}_{m // 2}", ("user", "assistant")[m % 2], text)
            conn.execute(
                "INSERT INTO messages (tenant_id, session_id, turn_id, role, content, status, created_at_ms)"
                " VALUES (?, ?, ?, ?, ?, 'completed', 0)",
                params,
            )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def delete_all(path: Path, mode: str, doomed: list[int]) -> tuple[list[float], list[float]]:
    """(ms per delete, ms per checkpoint after it)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    # Explicit both ways: some builds (Debian's) compile SQLite with secure_delete on by default.
    conn.execute(f"PRAGMA secure_delete={'ON' if mode == 'secure_delete' else 'OFF'}")
    costs, checkpoints = [], []
    for s in doomed:
        start = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute("DELETE FROM messages WHERE tenant_id = 'default' AND session_id = ?", (f"ses_{s:06d}",))
        conn.execute("DELETE FROM sessions WHERE session_id = ?", (f"ses_{s:06d}",))
        conn.execute("COMMIT")
        if mode == "incremental_vacuum":
            conn.execute("PRAGMA incremental_vacuum")
        deleted = time.perf_counter()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        costs.append((deleted - start) * 1000)
        checkpoints.append((time.perf_counter() - deleted) * 1000)
    conn.close()
    return costs, checkpoints


def traces(path: Path, doomed: list[int]) -> int:
    data = path.read_bytes()
    return sum(1 for s in doomed if f"MARKER-{s:06d}-".encode() in data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=4)
    parser.add_argument("--deletes", type=int, default=200)
    parser.add_argument("--dir", default=None, help="where the files go (/dev/shm: without the disk's fsync noise)")
    args = parser.parse_args()
    step = max(1, args.sessions // args.deletes)
    doomed = list(range(0, args.sessions, step))[: args.deletes]
    print(f"{args.sessions} sessions x {args.messages} messages, {len(doomed)} deletes")
    for mode in MODES:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            path = Path(tmp) / "sessions.db"
            build(path, mode, args.sessions, args.messages)
            costs, checkpoints = delete_all(path, mode, doomed)
            size_kib = path.stat().st_size // 1024
            found = traces(path, doomed)
            print(
                f"{mode:20s} delete {_spread(costs)}  checkpoint {_spread(checkpoints)}  "
                f"file {size_kib} KiB  deleted sessions still readable: {found}/{len(doomed)}"
            )


def _spread(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"median {statistics.median(ms):6.3f} ms p95 {ms[int(len(ms) * 0.95) - 1]:6.3f} ms"


if __name__ == "__main__":
    main()
