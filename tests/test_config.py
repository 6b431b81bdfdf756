from __future__ import annotations

from pathlib import Path

import pytest

from agentos.cli import main
from agentos.config import Secret, load_settings
from agentos.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentos.toml"
    path.write_text(text)
    return path


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, "[kernel]\nconcurrency_limit = 7\nmax_in_flight_turns = 3\nsession_ttl_secs = 9\n")
    s = load_settings(path, environ={"AGENTOS_CONCURRENCY_LIMIT": "8", "AGENTOS_KERNEL_SESSION_TTL_SECS": "12"})
    assert (s.kernel.concurrency_limit, s.kernel.max_in_flight_turns, s.kernel.session_ttl_secs) == (8, 3, 12)
    s = load_settings(path, environ={"AGENTOS_CONCURRENCY_LIMIT": "8"}, overrides={"kernel.concurrency_limit": 9})
    assert s.kernel.concurrency_limit == 9


def test_store_and_jsonl_keys(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, 'jsonl_dir = "/tmp/j"\n[store]\nenabled = false\n'), environ={})
    assert s.jsonl_dir == "/tmp/j" and s.store.enabled is False
    assert load_settings(None, environ={"AGENTOS_STORE_ENABLED": "false"}).store.enabled is False


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[kernel]\nmax_in_flight_turns = -1\n", "kernel.max_in_flight_turns"),
        ("[kernel]\nconcurrency_limit = 'many'\n", "kernel.concurrency_limit"),
        ("[kernel]\nsurprise = 1\n", "surprise"),
        ("[store]\nsynchronous = 'sometimes'\n", "store.synchronous"),
        ("[provider]\nurl = 'ftp://x'\n", "provider.url"),
        ("kernel = 3\n", "kernel"),
    ],
)
def test_an_invalid_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(write(tmp_path, text), environ={})


def test_invalid_env_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kernel.concurrency_limit"):
        load_settings(None, environ={"AGENTOS_CONCURRENCY_LIMIT": "lots"})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(write(tmp_path, "[kernel\n"), environ={})
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml", environ={})


def test_secrets_do_not_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert repr(Secret("abc")) == "'**********'"
    s = load_settings(None, environ={"AGENTOS_PROVIDER_API_KEY": "sk-live", "AGENTOS_API_TOKEN": "tok"})
    assert s.provider_api_key == "sk-live" and "sk-live" not in repr(s.provider_api_key)
    assert main(["config", "show", "--max-in-flight-turns", "5"]) == 0
    out = capsys.readouterr().out
    assert "max_in_flight_turns = 5" in out and "[kernel]" in out


def test_config_show_masks_secrets(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AGENTOS_PROVIDER_API_KEY", "sk-live")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "sk-live" not in out and 'api_key = "**********"' in out


def test_the_cli_reports_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[kernel]\nconcurrency_limit = 0\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    assert "kernel.concurrency_limit" in capsys.readouterr().err


def test_an_invalid_agent_table_names_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agents\.ops\.max_turns"):
        load_settings(write(tmp_path, "[agents.ops]\nmax_turns = 1000\n"), environ={})
    s = load_settings(write(tmp_path, '[agents.ops]\ntools = ["run_command"]\n'), environ={})
    assert s.agents["ops"]["tools"] == ["run_command"]
