"""The pepper: the server-side secret every key hash is keyed with (`agentos.tenancy.keys`).

Where it comes from, first match wins:
1. `security.key_pepper` in the config (or AGENTOS_SECURITY_KEY_PEPPER): for several servers
   sharing one `tenants.db`, or a pepper kept in a secret manager;
2. the file `<data_dir>/key_pepper`: 32 random bytes, created 0600 on the first start;
3. with `store.enabled = false`: random bytes in memory (the registry is in memory too).

With `store.backend = "postgres"` every node must use the same pepper: the database keeps a
check value of it (`pepper_check`) and a node whose pepper differs refuses to start
(`agentos.tenancy.pg_tables`), rather than refusing every key made on another node.

The pepper is kept apart from `tenants.db` so that a copy of the database alone cannot test
guessed keys. Losing it invalidates every key: back it up with the data directory.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from agentos.errors import ConfigError

PEPPER_BYTES = 32
PEPPER_FILE = "key_pepper"


def load_pepper(configured: str, data_dir: Path | None) -> bytes:
    """The pepper (see the module docstring); `data_dir` None: the store is off, keep it in memory.

    Raises:
        ConfigError: the pepper file cannot be read or created, or has the wrong size.
    """
    if configured:
        return configured.encode()
    if data_dir is None:
        return secrets.token_bytes(PEPPER_BYTES)
    return _pepper_file(data_dir / PEPPER_FILE)


def _pepper_file(path: Path) -> bytes:
    try:
        return _create(path)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"data_dir: cannot create the key pepper {str(path)!r} ({exc.strerror})") from None
    try:
        pepper = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"data_dir: cannot read the key pepper {str(path)!r} ({exc.strerror})") from None
    if len(pepper) != PEPPER_BYTES:
        raise ConfigError(f"data_dir: the key pepper {str(path)!r} is not {PEPPER_BYTES} bytes; restore it")
    return pepper


def _create(path: Path) -> bytes:
    """Write a new pepper with O_EXCL and mode 0600 (never readable by others, not even briefly)."""
    pepper = secrets.token_bytes(PEPPER_BYTES)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, pepper)
        os.fsync(fd)
    finally:
        os.close(fd)
    return pepper


# -- several nodes, one database: they must all hash with the same pepper ----------------------
# The database keeps a check value of the pepper its keys were hashed with. It is scrypt (slow
# and memory-hard), not a plain HMAC: whoever copies the database can test guesses of the
# pepper against it, and scrypt makes each guess cost ~50 ms (a long random pepper, like the
# generated one, is out of reach either way).
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def pepper_check(pepper: bytes, salt: bytes | None = None) -> str:
    """A check value of `pepper` (`"scrypt:N:r:p:salt:digest"`, hex); a new random salt by default.
    CPU-bound (~50 ms): call it in a thread from async code."""
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(pepper, salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32)
    return f"scrypt:{_SCRYPT_N}:{_SCRYPT_R}:{_SCRYPT_P}:{salt.hex()}:{digest.hex()}"


def pepper_matches(pepper: bytes, check: str) -> bool:
    """Whether `check` (from `pepper_check`) was made from `pepper`; False for a malformed one."""
    try:
        kind, n, r, p, salt, digest = check.split(":")
        again = hashlib.scrypt(pepper, salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=32)
    except ValueError:
        return False
    return kind == "scrypt" and hmac.compare_digest(again.hex(), digest)
