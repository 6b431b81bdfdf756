"""The trace store of the telemetry tests: one Arize Phoenix per test session (tests/telemetry/phoenix.py).

Session-scoped: Phoenix takes 9 to 48 s to start (measured here) and holds ~450 MB, so it
starts once, in the worker that runs the first test asking for it. The tests that use it live in
one file (test_trace_store.py): `--dist loadfile` sends them all to that one worker, so one
Phoenix serves the whole run. Stopped by its PID when the session ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.telemetry.phoenix import Phoenix, phoenix_python, start_phoenix


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    python = phoenix_python()  # skips (or fails, TEST_TRACES_REQUIRED=1) without Phoenix's venv
    store = start_phoenix(python, tmp_path_factory.mktemp("phoenix"))
    try:
        yield store
    finally:
        store.stop()
