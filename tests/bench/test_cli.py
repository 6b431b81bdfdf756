"""The bench CLI: flag/env precedence, `agentos mock-llm` as a real process, `--sessions` rule."""

from __future__ import annotations

import asyncio
import sys

import pytest

from agentos.bench.cli import mock_settings_from
from agentos.bench.mock_check import check_tools_contract
from agentos.bench.mock_llm import MockSettings
from agentos.bench.processes import start_mock_process, stop_child
from agentos.cli import build_parser, main


def test_flags_win_over_env_which_win_over_defaults() -> None:
    args = build_parser().parse_args(["mock-llm", "--tps", "50", "--fail-every", "3", "--scenario", "tools"])
    settings = mock_settings_from(args, {"MOCK_TTFT_MS": "7", "MOCK_TPS": "999", "MOCK_TOKENS": ""})
    assert settings == MockSettings(ttft_ms=7.0, tps=50.0, fail_every=3, scenario="tools")


def test_mock_check_subcommand_parses() -> None:
    args = build_parser().parse_args(["mock-llm", "check", "--url", "http://127.0.0.1:1/v1"])
    assert args.url == "http://127.0.0.1:1/v1"
    assert build_parser().parse_args(["bench", "check-mock", "--url", "u"]).url == "u"


def test_sessions_must_equal_concurrency() -> None:
    with pytest.raises(SystemExit):
        main(["bench", "sweep", "--sessions", "4", "--concurrency", "8"])


@pytest.mark.slow
async def test_mock_llm_process_announces_its_url_and_serves_the_contract(tmp_path) -> None:
    child = await start_mock_process(MockSettings(ttft_ms=1.0, tps=5000.0, scenario="tools"), tmp_path)
    try:
        assert child.url.startswith("http://127.0.0.1:") and child.url.endswith("/v1")
        assert await check_tools_contract(child.url) == []
        checker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentos", "mock-llm", "check", "--url", child.url, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(checker.communicate(), 30)
    finally:
        code = await stop_child(child.process)
    assert checker.returncode == 0 and out.startswith(b"OK ")
    assert code == 0  # SIGTERM is a clean stop
