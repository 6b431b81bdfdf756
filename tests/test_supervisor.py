"""The supervisor's restart policy and exit status (`agentos.supervisor`), with stand-in workers.

The real workers (whole `agentos serve` processes on PostgreSQL and Redis) are in
tests/coordination/test_workers.py; here a worker is a few lines of Python that speaks the same
protocol (reads its order on stdin, prints the listening line) and then exits as the test needs,
so the policy is seen without waiting for servers to start.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentos.config import Settings, load_settings
from agentos.supervisor import RESTARTS, Supervisor

pytestmark = pytest.mark.timeout(60)

LISTENS_THEN_EXITS = """
import sys
order = sys.stdin.readline()
open(sys.argv[1], "a").write("started\\n")
print("agentos listening on http://127.0.0.1:4321", flush=True)
sys.exit(5)
"""

NEVER_LISTENS = "import sys; sys.stdin.readline(); sys.exit(2)"


def _settings(workers: int) -> Settings:
    return load_settings(None, environ={}, overrides={"server.workers": workers})


async def test_workers_that_keep_dying_are_restarted_a_bounded_number_of_times(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    command = [sys.executable, "-c", LISTENS_THEN_EXITS, str(starts)]
    supervisor = Supervisor(
        load_settings(None, environ={}, overrides={"server.workers": 2}), command, restart_delay_s=0
    )
    assert await supervisor.run() == 1  # gave up
    assert starts.read_text().count("started") == 2 + RESTARTS


async def test_a_worker_that_cannot_start_gives_its_status(tmp_path: Path) -> None:
    supervisor = Supervisor(
        load_settings(None, environ={}, overrides={"server.workers": 3}), [sys.executable, "-c", NEVER_LISTENS]
    )
    assert await supervisor.run() == 2
