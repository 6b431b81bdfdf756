"""JSON log lines of a worker (`agentos serve --workers N`) say which worker and pid wrote them."""

from __future__ import annotations

import json
import logging

from agentos.telemetry.logs import JsonLineFormatter


def _line(formatter: JsonLineFormatter) -> dict[str, object]:
    record = logging.LogRecord("agentos", logging.INFO, __file__, 1, "turn %s", ("t1",), None)
    parsed: dict[str, object] = json.loads(formatter.format(record))
    return parsed


def test_a_workers_lines_carry_its_number_and_pid() -> None:
    line = _line(JsonLineFormatter({"worker": 2, "pid": 4711}))
    assert (line["message"], line["worker"], line["pid"]) == ("turn t1", 2, 4711)


def test_a_single_servers_lines_have_no_worker_field() -> None:
    assert "worker" not in _line(JsonLineFormatter())
