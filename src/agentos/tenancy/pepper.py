"""The pepper: the server-side secret every key hash is keyed with (`agentos.tenancy.keys`).

Where it comes from, first match wins:
1. `security.key_pepper` in the config (or AGENTOS_SECURITY_KEY_PEPPER): for several servers
   sharing one `tenants.db`, or a pepper kept in a secret manager;
2. the file `<data_dir>/key_pepper`: 32 random bytes, created 0600 on the first start;
3. with `store.enabled = false`: random bytes in memory (the registry is in memory too).

The pepper is kept apart from `tenants.db` so that a copy of the database alone cannot test
guessed keys. Losing it invalidates every key: back it up with the data directory.
"""

from __future__ import annotations

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
