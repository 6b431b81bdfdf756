"""`agentos tenants ...` and `agentos keys ...`: the admin API from a shell, and the bootstrap helpers.

Each command talks to a running server (`--url`) with an admin key, read from `--key-file` or
the environment variable AGENTOS_API_KEY (never from a flag: command lines show in `ps` and in
shell histories), and prints the server's JSON answer. `keys generate` needs no server: it
prints a fresh, well-formed key to use as the server's first admin token (AGENTOS_API_TOKEN or
`agentos serve --api-token-file`).

Exit status: 0 done; 1 the server refused (4xx/5xx; the line names its status and code);
2 a usage mistake (no key, an unreadable key file); 3 the server could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from agentos.client import AdminClient, APIError, ClientError, TransportError
from agentos.errors import ConfigError
from agentos.tenancy import keys
from agentos.tenancy.principal import Scope

DEFAULT_URL = "http://127.0.0.1:8080"
KEY_ENV = "AGENTOS_API_KEY"
Command = Callable[[AdminClient, argparse.Namespace], Awaitable[Any]]


def read_secret_file(path: Path, what: str) -> str:
    """The first line of `path`, stripped (a key or token kept out of the command line).

    Raises:
        ConfigError: unreadable or empty.
    """
    try:
        secret = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not text"
        raise ConfigError(f"{what}: cannot read {str(path)!r} ({reason})") from None
    if not secret:
        raise ConfigError(f"{what}: {str(path)!r} is empty")
    return secret.splitlines()[0].strip()


def run_admin(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Run an admin command (`args.admin`, set by `register`) and print its answer (as JSON, or
    as `args.show` writes it where the command set one)."""
    token = environ.get(KEY_ENV, "") if args.key_file is None else read_secret_file(args.key_file, "--key-file")
    try:
        answer = asyncio.run(_call(args, token or None))
    except APIError as exc:
        print(f"agentos: {exc.status} {exc.code}: {exc.message}{_hint(exc, token)}", file=sys.stderr)
        return 1
    except TransportError as exc:
        print(f"agentos: cannot reach the server at {args.url} ({exc}); is it running?", file=sys.stderr)
        return 3
    except ClientError as exc:
        print(f"agentos: {exc}", file=sys.stderr)
        return 1
    show: Callable[[Any], str] = getattr(args, "show", None) or _as_json
    sys.stdout.write(show(answer))
    return 0


def _as_json(answer: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(answer)).decode() + "\n"


async def _call(args: argparse.Namespace, token: str | None) -> Any:
    command: Command = args.admin
    async with AdminClient(args.url, token=token) as admin:
        return await command(admin, args)


def _hint(exc: APIError, token: str) -> str:
    if exc.status == 401:
        return "; give an admin key with --key-file or AGENTOS_API_KEY" if not token else "; check the key"
    if exc.status == 403:
        return "; this key lacks the admin scope"
    return ""


def generate_key(args: argparse.Namespace) -> int:
    print(keys.generate())
    return 0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]) -> None:
    """Add `tenants` and `keys` to the `agentos` parser."""
    tenants = commands.add_parser("tenants", help="tenants of a running server (admin API)")
    _tenant_commands(tenants.add_subparsers(dest="tenants_command", required=True), environ)
    keys_parser = commands.add_parser("keys", help="API keys of a running server (admin API); generate one")
    _key_commands(keys_parser.add_subparsers(dest="keys_command", required=True), environ)


def _add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    command: Command,
    environ: Mapping[str, str],
) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text)
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})")
    parser.add_argument("--key-file", type=Path, help=f"a file holding an admin key (else env {KEY_ENV})")
    parser.set_defaults(handler=lambda args: run_admin(args, environ), admin=command)
    return parser


def _limits(pairs: list[str] | None, *, clearing: list[str] | None = None) -> dict[str, int | None] | None:
    """`--limit name=value` flags as a dict (`--clear-limit name` maps to None)."""
    if not pairs and not clearing:
        return None
    limits: dict[str, int | None] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        digits = value.removeprefix("-")
        # ASCII only: str.isdigit takes "²", which int() refuses; the server names the maximum
        if not sep or not (digits.isascii() and digits.isdigit() and len(digits) <= 40):
            raise ConfigError(f"--limit: expected name=integer, got {pair[:60]!r}")
        limits[name] = int(value)
    limits.update(dict.fromkeys(clearing or []))
    return limits


def _tenant_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]) -> None:
    create = _add(sub, "create", "create a tenant", _create_tenant, environ)
    create.add_argument("tenant_id")
    create.add_argument("--name", default="")
    create.add_argument("--limit", action="append", metavar="NAME=VALUE", help="override a [tenant_limits] value")
    listing = _add(sub, "list", "list tenants", lambda a, n: a.list_tenants(limit=n.limit, after=n.after), environ)
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--after")
    _add(sub, "show", "show a tenant", lambda a, n: a.get_tenant(n.tenant_id), environ).add_argument("tenant_id")
    update = _add(sub, "update", "change a tenant", _update_tenant, environ)
    update.add_argument("tenant_id")
    update.add_argument("--name")
    update.add_argument("--limit", action="append", metavar="NAME=VALUE")
    update.add_argument("--clear-limit", action="append", metavar="NAME", help="back to the default")
    for name, disabled in (("disable", True), ("enable", False)):
        what = "refuse every key of a tenant" if disabled else "accept a tenant's keys again"
        parser = _add(sub, name, what, _set_disabled(disabled), environ)
        parser.add_argument("tenant_id")


def _create_tenant(admin: AdminClient, args: argparse.Namespace) -> Awaitable[Any]:
    limits = {k: v for k, v in (_limits(args.limit) or {}).items() if v is not None}
    return admin.create_tenant(args.tenant_id, name=args.name, limits=limits)


def _update_tenant(admin: AdminClient, args: argparse.Namespace) -> Awaitable[Any]:
    limits = _limits(args.limit, clearing=args.clear_limit)
    return admin.update_tenant(args.tenant_id, name=args.name, limits=limits)


def _set_disabled(disabled: bool) -> Command:
    return lambda admin, args: admin.update_tenant(args.tenant_id, disabled=disabled)


def _key_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]) -> None:
    create = _add(sub, "create", "create a key (printed once)", _create_key, environ)
    create.add_argument("--tenant", required=True, help="the tenant the key acts for")
    create.add_argument("--name", default="")
    create.add_argument(
        "--scope", action="append", choices=[s.value for s in Scope], help="repeatable; default: all but admin"
    )
    create.add_argument("--expires-in-s", type=int)
    listing = _add(sub, "list", "list keys (never the keys themselves)", _list_keys, environ)
    listing.add_argument("--tenant")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--after")
    _add(sub, "show", "show a key", lambda a, n: a.get_key(n.key_id), environ).add_argument("key_id")
    _add(sub, "revoke", "revoke a key", lambda a, n: a.revoke_key(n.key_id), environ).add_argument("key_id")
    generate = sub.add_parser("generate", help="print a new well-formed key, to use as the first admin token")
    generate.set_defaults(handler=generate_key)


def _create_key(admin: AdminClient, args: argparse.Namespace) -> Awaitable[Any]:
    return admin.create_key(args.tenant, name=args.name, scopes=args.scope, expires_in_s=args.expires_in_s)


def _list_keys(admin: AdminClient, args: argparse.Namespace) -> Awaitable[Any]:
    return admin.list_keys(tenant_id=args.tenant, limit=args.limit, after=args.after)
