"""`agentos serve` and `agentos config show`, and the settings flags they share with `agentos db`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentos.config import Settings, load_settings
from agentos.config.toml import dump_toml, to_toml_dict

# CLI flag -> dotted config key. Flags win over env vars, which win over the file.
_FLAG_KEYS = {
    "host": "server.host",
    "port": "server.port",
    "workers": "server.workers",
    "log_level": "log_level",
    "data_dir": "data_dir",
    "provider_url": "provider.url",
    "model": "provider.model",
    "max_in_flight_turns": "kernel.max_in_flight_turns",
    "concurrency_limit": "kernel.concurrency_limit",
    "session_ttl_secs": "kernel.session_ttl_secs",
    "mock_scenario": "mock.scenario",
    "mock_ttft_ms": "mock.ttft_ms",
    "mock_tps": "mock.tps",
    "mock_tokens": "mock.tokens",
    "store_backend": "store.backend",
    "postgres_url": "store.postgres_url",
    "redis_url": "coordination.redis_url",
}


def add_settings_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="TOML config file")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--workers", type=int, help="server processes on this host (needs PostgreSQL + Redis above 1)")
    p.add_argument("--data-dir")
    p.add_argument("--log-level", type=str.lower, choices=("debug", "info", "warning", "error"))
    p.add_argument("--provider-url", help="OpenAI-compatible base URL (…/v1); empty: built-in mock")
    p.add_argument("--model")
    p.add_argument("--max-in-flight-turns", type=int, help="admission gate, 0 = off")
    p.add_argument("--concurrency-limit", type=int, help="concurrent provider streams")
    p.add_argument("--session-ttl-secs", type=float)
    add_store_flags(p)
    mock = p.add_argument_group("built-in mock provider (when no --provider-url)")
    mock.add_argument("--mock-scenario", choices=("plain", "tools"), help="tools: agents get tool calls")
    mock.add_argument("--mock-ttft-ms", type=float, help="delay before the first token")
    mock.add_argument("--mock-tps", type=float, help="tokens per second")
    mock.add_argument("--mock-tokens", type=int, help="tokens per answer")


def add_store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store-backend", choices=("sqlite", "postgres"), help="where sessions and events live")
    p.add_argument("--postgres-url", help="postgresql://user@host:5432/db (store.backend = postgres)")
    p.add_argument("--redis-url", help="redis://host:6379/0: what several nodes share (coordination.redis_url)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {key: getattr(args, flag, None) for flag, key in _FLAG_KEYS.items()}
    flags = {key: "--" + flag.replace("_", "-") for flag, key in _FLAG_KEYS.items()}
    if getattr(args, "api_token_file", None) is not None:
        from agentos.cli.admin import read_secret_file

        overrides["server.api_token"] = read_secret_file(args.api_token_file, "--api-token-file")
        flags["server.api_token"] = "--api-token-file"
    return load_settings(args.config, environ=os.environ, overrides=overrides, flags=flags)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `serve` and `config show` to the `agentos` parser."""
    serve = commands.add_parser("serve", help="run the server")
    add_settings_flags(serve)
    serve.add_argument(
        "--api-token-file", type=Path, help="read the admin token (AGENTOS_API_TOKEN) from this file, not a flag"
    )
    serve.set_defaults(handler=_serve)

    config = commands.add_parser("config", help="configuration")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    show = config_commands.add_parser("show", help="print the effective config")
    add_settings_flags(show)
    show.set_defaults(handler=_config_show)


def _serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if settings.server.workers > 1:
        from agentos.supervisor import run_workers

        return run_workers(settings, [sys.executable, "-m", "agentos.cli.worker"])
    from agentos.mock.builtin import builtin_mock
    from agentos.server import run_server

    return run_server(settings, provider_setup=builtin_mock)


def _config_show(args: argparse.Namespace) -> int:
    sys.stdout.write(dump_toml(to_toml_dict(settings_from_args(args))))
    return 0
