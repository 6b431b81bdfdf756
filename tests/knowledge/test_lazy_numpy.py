"""A server that never embeds or searches never loads numpy (~16 MB of RSS at start, issue 15's
peak memory): the knowledge modules import it with the first collection used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OPEN_A_SERVER = """
import asyncio, sys
from agentos.api.app import create_app
from agentos.config import load_settings
from agentos.services import open_services

async def main():
    settings = load_settings(None, environ={"AGENTOS_DATA_DIR": sys.argv[1], "AGENTOS_STORE_ENABLED": "true",
                                            "AGENTOS_PROVIDER_URL": "http://127.0.0.1:9/v1"})
    services = await open_services(settings)
    create_app(services)
    loaded = "numpy" in sys.modules
    await services.close(1.0)
    print("numpy loaded" if loaded else "no numpy")

asyncio.run(main())
"""


def test_opening_a_server_does_not_import_numpy(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", OPEN_A_SERVER, str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stdout.strip() == "no numpy", result.stderr[-2000:]


def test_the_cli_that_starts_a_server_does_not_import_numpy() -> None:
    """`agentos serve` builds the whole parser (bench commands included) before it serves."""
    script = "import sys; from agentos.cli import build_parser; build_parser(); print('numpy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.strip() == "False", result.stderr[-2000:]
