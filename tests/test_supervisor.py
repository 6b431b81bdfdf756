"""The supervisor's restart policy and exit status (`agentos.supervisor`), with stand-in workers.

The real workers (whole `agentos serve` processes on PostgreSQL and Redis) are in
tests/coordination/test_workers.py; here a worker is a few lines of Python that speaks the same
protocol (reads its order on stdin, prints the listening line) and then exits as the test needs,
so the policy is seen without waiting for servers to start.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agentos.config import Settings, load_settings
from agentos.errors import ConfigError
from agentos.supervisor import RESTARTS, Supervisor, check_workers

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


CLUSTER = {
    "store.backend": "postgres",
    "store.postgres_url": "postgresql://a@127.0.0.1/a",
    "coordination.redis_url": "redis://r",
}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "server.workers: 2 workers need the PostgreSQL store and Redis coordination"),
        ({"store.backend": "postgres", "store.postgres_url": "postgresql://a@127.0.0.1/a"}, "coordination.redis_url"),
        (CLUSTER | {"server.port": 9001, "server.worker_port_base": 9000}, "ports 9000-9001 include server.port 9001"),
        (CLUSTER | {"server.worker_port_base": 65535}, "65535 + 2 workers runs past port 65535"),
    ],
)
def test_workers_refuse_what_cannot_keep_their_guarantees_or_ports(overrides: dict[str, object], message: str) -> None:
    settings = load_settings(None, environ={}, overrides={"server.workers": 2, **overrides})
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_workers(settings)


def test_one_worker_needs_nothing_more_and_the_cluster_path_passes() -> None:
    check_workers(_settings(1))
    check_workers(load_settings(None, environ={}, overrides={"server.workers": 8, **CLUSTER}))
