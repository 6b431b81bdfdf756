"""One worker of `agentos serve --workers N`, started by `agentos.supervisor`: `python -m agentos.cli.worker`.

It reads its orders (`agentos.supervisor.WorkerOrder`, one JSON line) on stdin, then serves as
`agentos serve` does (the built-in mock too, when no provider is configured). Stdin stays open:
its end means the supervisor is gone, and the worker drains as on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import msgspec

from agentos.errors import ConfigError


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor forwards a Ctrl-C as SIGTERM
    from agentos.mock.builtin import builtin_mock
    from agentos.server import run_server
    from agentos.supervisor import WorkerOrder

    try:
        order = msgspec.json.decode(sys.stdin.buffer.readline(), type=WorkerOrder)
    except msgspec.DecodeError as exc:  # run by hand: `agentos serve --workers N` starts it
        print(f"agentos: a worker reads its orders on stdin from `agentos serve --workers N` ({exc})", file=sys.stderr)
        return 2
    threading.Thread(target=_stop_when_orphaned, name="supervisor-watch", daemon=True).start()
    try:
        return run_server(order.settings, provider_setup=builtin_mock, worker=order.worker)
    except ConfigError as exc:
        print(f"agentos: {exc}", file=sys.stderr)
        return 2


def _stop_when_orphaned() -> None:
    """Wait for the end of stdin (the supervisor exited, or was killed), then drain."""
    # The file descriptor, not sys.stdin: a daemon thread blocked inside a buffered reader holds
    # its lock, and the interpreter aborts at exit when it cannot take it.
    while os.read(0, 4096):  # the supervisor writes nothing more: this returns at the end
        pass
    os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
