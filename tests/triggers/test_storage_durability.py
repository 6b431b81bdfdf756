"""`accept` returns only after its delivery is committed: a process killed (SIGKILL) the moment
`accept` returned leaves the delivery in `triggers.db` (what a 2xx promises the sender)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from agentos.triggers.sqlite_storage import SqliteTriggerStorage
from tests.conftest import child_env
from tests.triggers.conftest import delivery, trigger

# The child accepts one delivery, says so, and waits to be killed (no close, no clean exit).
CHILD = """
import asyncio, sys
from pathlib import Path
from agentos.triggers.records import DeliveryRow
from agentos.triggers.sqlite_storage import SqliteTriggerStorage

async def main() -> None:
    storage = SqliteTriggerStorage(Path(sys.argv[1]))
    await storage.open()
    row = DeliveryRow(tenant_id="t1", trigger_id=sys.argv[2], webhook_id="msg_1", run_id=sys.argv[3],
                      payload=b'{"n": 1}', received_ms=1000)
    _, new = await storage.accept(row)
    print("accepted" if new else "duplicate", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (a read of procfs: it never blocks)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def test_a_delivery_survives_a_kill_right_after_accept(tmp_path: Path) -> None:
    path, row = tmp_path / "triggers.db", delivery(trigger(), "msg_1", received_ms=1000, body=b'{"n": 1}')
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        str(path),
        row.trigger_id,
        row.run_id,
        stdout=asyncio.subprocess.PIPE,
        env=child_env(),
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 20)
        # Running (not a zombie) right before the kill: the kill is what ends it. Its exit status
        # is not asserted: on Python 3.11 a reaper elsewhere in the test process (a collected
        # Popen's pid reused by this child) can take it first, and asyncio then reports 255.
        state = _process_state(child.pid)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()
    assert line == b"accepted\n"
    assert state in ("S", "R"), state

    storage = SqliteTriggerStorage(path)
    await storage.open()
    try:
        assert await storage.get_delivery("t1", row.trigger_id, "msg_1") == row
        assert await storage.accept(row) == (row, False)
        assert (await storage.backlog()).queued == 1
    finally:
        await storage.close()


async def test_triggers_db_commits_with_synchronous_full(tmp_path: Path) -> None:
    """A kill -9 spares what WAL with NORMAL committed too; a power cut needs FULL (fsync per commit)."""
    storage = SqliteTriggerStorage(tmp_path / "triggers.db")
    await storage.open()
    try:
        level = await storage._writer.submit(apply=lambda db: db.execute("PRAGMA synchronous").fetchone()[0])
        assert level == 2  # FULL
    finally:
        await storage.close()
