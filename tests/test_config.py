from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from agentos.cli import main
from agentos.config import Secret, load_settings
from agentos.config.tenants import MAXIMA
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


def test_workers_come_from_the_file_the_env_or_the_flag(tmp_path: Path) -> None:
    assert load_settings(None, environ={}).server.workers == 1  # one process: what serve always was
    path = write(tmp_path, "[server]\nworkers = 2\n")
    assert load_settings(path, environ={}).server.workers == 2
    assert load_settings(path, environ={"AGENTOS_SERVER_WORKERS": "3"}).server.workers == 3
    assert load_settings(path, environ={}, overrides={"server.workers": 4}).server.workers == 4


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
        ("[server]\nworkers = 0\n", "server.workers"),
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
    monkeypatch.setenv("AGENTOS_API_TOKEN", "tok-live")
    monkeypatch.setenv("AGENTOS_SECURITY_KEY_PEPPER", "pepper-live")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "sk-live" not in out and 'api_key = "**********"' in out
    assert "tok-live" not in out and 'api_token = "**********"' in out
    assert "pepper-live" not in out and 'key_pepper = "**********"' in out


def test_the_cli_reports_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[kernel]\nconcurrency_limit = 0\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    assert "kernel.concurrency_limit" in capsys.readouterr().err


def test_an_invalid_agent_table_names_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agents\.ops\.max_turns"):
        load_settings(write(tmp_path, "[agents.ops]\nmax_turns = 1000\n"), environ={})
    s = load_settings(write(tmp_path, '[agents.ops]\ntools = ["run_command"]\n'), environ={})
    assert s.agents["ops"]["tools"] == ["run_command"]


# -- errors name their source: the env var, the flag or the file (issue 13, defect 5) ------------


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AGENTOS_PORT": "abc"}, "AGENTOS_PORT=abc: server.port expects an integer"),
        ({"AGENTOS_SERVER_PORT": "70000"}, "AGENTOS_SERVER_PORT=70000: server.port must be an integer <= 65535"),
        ({"AGENTOS_STORE_ENABLED": "maybe"}, "AGENTOS_STORE_ENABLED=maybe: store.enabled expects true or false"),
        (
            {"AGENTOS_KERNEL_SESSION_TTL_SECS": "0"},
            "AGENTOS_KERNEL_SESSION_TTL_SECS=0: kernel.session_ttl_secs must be a number > 0.0",
        ),
        (
            {"AGENTOS_LOG_LEVEL": "loud"},
            "AGENTOS_LOG_LEVEL=loud: log_level must be one of debug, error, info, warning, got 'loud'",
        ),
        ({"AGENTOS_PROVIDER_URL": "ftp://x"}, "AGENTOS_PROVIDER_URL=ftp://x: provider.url must start with http://"),
        (
            {"AGENTOS_SERVER_HEADER_TIMEOUT_S": "0"},
            "AGENTOS_SERVER_HEADER_TIMEOUT_S=0: server.header_timeout_s must be a number > 0.0",
        ),
        (
            {"AGENTOS_SERVER_MAX_CONNECTIONS_PER_CLIENT": "-1"},
            "AGENTOS_SERVER_MAX_CONNECTIONS_PER_CLIENT=-1: server.max_connections_per_client must be an integer >= 0",
        ),
    ],
)
def test_an_env_error_names_the_variable_and_its_value(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, environ=environ)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[agents]\nops = 5\n", "agents.ops must be a table"),
        ("agents = 5\n", "agents must be a table"),
        ("[server]\nport = 'abc'\n", "server.port expects an integer"),
        ("[kernel]\nsurprise = 1\n", "kernel.surprise is not a known setting"),
        ("surprise = 1\n", "surprise is not a known setting"),
        ("[agents.ops]\nmax_turns = 1000\n", "agents.ops.max_turns: "),
    ],
)
def test_a_file_error_names_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    assert str(caught.value).startswith(f"{path}: {message}")


def test_the_source_that_won_is_the_one_named(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 1\n")
    with pytest.raises(ConfigError, match=r"^AGENTOS_PORT=abc: server\.port"):
        load_settings(path, environ={"AGENTOS_PORT": "abc"})
    with pytest.raises(ConfigError, match=rf"^{path}: server must be a table$"):  # the variable is fine
        load_settings(write(tmp_path, "server = 1\n"), environ={"AGENTOS_PORT": "8081"})
    path = write(tmp_path, "[server]\nport = 'abc'\n")
    assert load_settings(path, environ={"AGENTOS_PORT": "9"}).server.port == 9  # the bad value lost
    with pytest.raises(ConfigError, match=r"^--port 70000: server\.port must be an integer <= 65535$"):
        load_settings(path, environ={}, overrides={"server.port": 70000}, flags={"server.port": "--port"})


def test_a_secret_in_an_error_stays_masked() -> None:
    from agentos.config.sources import InvalidSetting, Sources

    sources = Sources(None)
    sources.note("provider.api_key", "AGENTOS_PROVIDER_API_KEY=", "sk-live")
    message = sources.describe(InvalidSetting("provider.api_key", "expects a string"))
    assert "sk-live" not in message and message.startswith("AGENTOS_PROVIDER_API_KEY=*")


def test_a_config_path_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_settings(tmp_path, environ={})


def test_log_level_from_file_env_and_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load_settings(write(tmp_path, 'log_level = "warning"\n'), environ={}).log_level == "warning"
    assert load_settings(None, environ={"AGENTOS_LOG_LEVEL": "DEBUG"}).log_level == "debug"
    assert main(["config", "show", "--log-level", "error"]) == 0
    assert 'log_level = "error"' in capsys.readouterr().out


# -- the command line -----------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from agentos import __version__

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"agentos {__version__}\n"


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["serve", "--bogus"], "usage: agentos serve "),
        (["config", "show", "--bogus"], "usage: agentos config show "),
        (["bench", "sweep", "--bogus"], "usage: agentos bench sweep "),
        (["mock-llm", "--bogus"], "usage: agentos mock-llm "),
    ],
)
def test_an_unknown_flag_prints_the_usage_of_its_command(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith(usage) and err.rstrip().endswith("error: unrecognized arguments: --bogus")


def test_the_cli_names_the_flag_or_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "show", "--port", "70000"]) == 2
    assert capsys.readouterr().err == "agentos: --port 70000: server.port must be an integer <= 65535\n"
    monkeypatch.setenv("AGENTOS_PORT", "abc")
    assert main(["serve"]) == 2  # before anything starts
    assert capsys.readouterr().err == "agentos: AGENTOS_PORT=abc: server.port expects an integer\n"


def test_the_store_backend_from_env_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """store.backend and store.postgres_url: AGENTOS_* env, flags; the password never shown."""
    assert load_settings(None, environ={}).store.backend == "sqlite"
    url = "postgresql://app:pw-live@db.internal:5432/agentos"
    s = load_settings(None, environ={"AGENTOS_STORE_BACKEND": "postgres", "AGENTOS_POSTGRES_URL": url})
    assert (s.store.backend, s.store.postgres_url) == ("postgres", url)
    with pytest.raises(ConfigError, match="store.backend"):
        load_settings(None, environ={"AGENTOS_STORE_BACKEND": "mysql"})
    with pytest.raises(ConfigError, match="store.postgres_url must be a postgresql:// URL") as bad:
        load_settings(None, environ={"AGENTOS_STORE_BACKEND": "postgres", "AGENTOS_POSTGRES_URL": "http://u:pw@x/y"})
    assert "pw" not in str(bad.value)
    assert main(["config", "show", "--store-backend", "postgres", "--postgres-url", url]) == 0
    out = capsys.readouterr().out
    assert "pw-live" not in out and 'postgres_url = "postgresql://app:**********@db.internal:5432/agentos"' in out


def test_the_redis_url_from_env_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """coordination.redis_url: AGENTOS_REDIS_URL, --redis-url; a password in it is never shown."""
    url = "redis://:s3cret-live@cache.internal:6379/0"
    assert load_settings(None, environ={"AGENTOS_REDIS_URL": url}).coordination.redis_url == url
    with pytest.raises(ConfigError, match="coordination.redis_url") as bad:
        load_settings(None, environ={"AGENTOS_REDIS_URL": "http://:s3cret-live@x/0"})
    assert "s3cret" not in str(bad.value)
    assert main(["config", "show", "--redis-url", url]) == 0
    out = capsys.readouterr().out
    assert "s3cret-live" not in out and 'redis_url = "redis://:**********@cache.internal:6379/0"' in out


# -- the maxima of caller-set limits, in the file too (2**63 was taken) -------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        *(
            (f"[tenant_limits]\n{name} = {maximum + 1}\n", f"tenant_limits.{name} must be an integer <= {maximum}")
            for name, maximum in MAXIMA.items()
            if not name.startswith("budget_")
        ),
        *(  # budgets are currency: any number up to the maximum
            (f"[tenant_limits]\n{name} = {maximum + 1}\n", f"tenant_limits.{name} must be a number <= {maximum:.1f}")
            for name, maximum in MAXIMA.items()
            if name.startswith("budget_")
        ),
        ("[tenant_limits]\ntokens_per_day = 9223372036854775807\n", "tenant_limits.tokens_per_day must be"),
        ("[agents.ops]\ntoken_budget = 1000000000001\n", "agents.ops.token_budget: Expected `int` <= 1000000000000"),
        ("[agents.ops.command]\nmemory_mb = 1048577\n", "agents.ops.command.memory_mb: Expected `int` <= 1048576"),
        ("[agents.ops.command]\ntimeout_s = inf\n", "agents.ops.command.timeout_s: Expected `float` <= 86400.0"),
        ("[security]\nmax_token_budget = 1000000000001\n", "security.max_token_budget must be an integer <="),
        ("[security.max_command]\ncpu_s = 86401\n", "security.max_command.cpu_s must be an integer <= 86400"),
    ],
)
def test_a_limit_past_its_maximum_stops_start_up_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(write(tmp_path, text), environ={})


def test_limits_at_their_maxima_are_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = "".join(f"{name} = {maximum}\n" for name, maximum in MAXIMA.items())
    path = write(tmp_path, f"[tenant_limits]\n{table}[agents.ops]\ntoken_budget = 1000000000000\n")
    settings = load_settings(path, environ={})
    assert msgspec.to_builtins(settings.tenant_limits) == MAXIMA
    assert settings.agents["ops"]["token_budget"] == 10**12
    assert main(["config", "show", "--config", str(write(tmp_path, "[tenant_limits]\nweight = 1001\n"))]) == 2
    assert "tenant_limits.weight must be an integer <= 1000" in capsys.readouterr().err


def test_a_limit_past_its_maximum_in_the_environment_names_the_variable() -> None:
    environ = {"AGENTOS_TENANT_LIMITS_TOKENS_PER_DAY": str(2**63)}
    with pytest.raises(ConfigError, match=r"AGENTOS_TENANT_LIMITS_TOKENS_PER_DAY=9223372036854775808: tenant_limits"):
        load_settings(None, environ=environ)
    environ = {"AGENTOS_TENANT_LIMITS_TOKENS_PER_DAY": str(10**12)}
    assert load_settings(None, environ=environ).tenant_limits.tokens_per_day == 10**12


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ("[kernel]\npermit_wait_timeout_s = inf\n", {}, "kernel.permit_wait_timeout_s must be a finite number"),
        ("", {"AGENTOS_KERNEL_SESSION_TTL_SECS": "inf"}, "AGENTOS_KERNEL_SESSION_TTL_SECS=inf: kernel.session_ttl"),
    ],
)
def test_an_infinite_float_setting_stops_start_up_naming_the_key(
    tmp_path: Path, text: str, environ: dict[str, str], message: str
) -> None:
    """msgspec takes `inf` for a float without an upper bound: a timer of inf seconds never fires."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(write(tmp_path, text), environ=environ)
    assert load_settings(write(tmp_path, "[kernel]\npermit_wait_timeout_s = 1e9\n"), environ={})  # large is fine
