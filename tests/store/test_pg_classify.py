"""`classify`: what a failed PostgreSQL operation is to the API (503 or 500)."""

from __future__ import annotations

from agentos.errors import StoreError, StoreUnavailable
from agentos.store.pg_health import classify


class DriverConnectionError(Exception):
    """Stands for a driver error that means the database is away (`connection_errors()`)."""


def test_a_driver_connection_error_is_unavailability_and_a_bad_statement_is_not() -> None:
    assert type(classify(DriverConnectionError(), (DriverConnectionError,), "read")) is StoreUnavailable
    assert type(classify(ValueError("bad statement"), (DriverConnectionError,), "read")) is StoreError


def test_an_outage_another_write_met_stays_an_outage() -> None:
    # A turn's epoch bump first waits for the node's earlier writes of the session; when those
    # failed on the outage, the bump used to wrap their StoreUnavailable into a StoreError and
    # the turn ended `internal_error` (agentos bench faults --cluster, the PostgreSQL restart).
    earlier = StoreUnavailable("messages: database unreachable (CannotConnectNowError)")
    error = classify(earlier, (DriverConnectionError,), "start a turn (turn epoch)")
    assert type(error) is StoreUnavailable and error.__cause__ is earlier
