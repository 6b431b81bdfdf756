"""The bench CLI: flag/env precedence, `agentos mock-llm` as a real process, `--sessions` rule."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import msgspec
import pytest

import agentos_bench
import agentos_bench.report as report_package
from agentos.cli import build_parser, main
from agentos.cli.mock import mock_settings_from
from agentos.config import load_settings
from agentos.mock.check import check_tools_contract
from agentos.mock.loop import raise_fd_limit
from agentos.mock.server import MockSettings
from agentos_bench.common.mock_process import mock_argv, start_mock_process
from agentos_bench.common.processes import (
    BenchSetupError,
    ServerPlan,
    profile_names,
    resolve_profile,
    server_argv,
    stop_child,
)

PROFILES = Path(agentos_bench.__file__).parent / "profiles"


def test_flags_win_over_env_which_win_over_defaults() -> None:
    args = build_parser().parse_args(["mock-llm", "--tps", "50", "--fail-every", "3", "--scenario", "tools"])
    settings = mock_settings_from(args, {"MOCK_TTFT_MS": "7", "MOCK_TPS": "999", "MOCK_TOKENS": ""})
    assert settings == MockSettings(ttft_ms=7.0, tps=50.0, fail_every=3, scenario="tools")


def test_mock_check_subcommand_parses() -> None:
    args = build_parser().parse_args(["mock-llm", "check", "--url", "http://127.0.0.1:1/v1"])
    assert args.url == "http://127.0.0.1:1/v1"
    assert build_parser(with_bench=True).parse_args(["bench", "check-mock", "--url", "u"]).url == "u"


def test_sessions_must_equal_concurrency() -> None:
    with pytest.raises(SystemExit):
        main(["bench", "sweep", "--sessions", "4", "--concurrency", "8"])


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--tenants", "-1"], "must be 0"),
        (["--tenants", "3", "--server-url", "http://127.0.0.1:1"], "API_TOKEN"),
        (["--idp-url", "http://127.0.0.1:4319"], "needs --tenants"),
    ],
)
def test_tenants_need_a_count_and_an_admin_token(
    argv: list[str], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.delenv("AGENTOS_API_TOKEN", raising=False)  # the external server's: the bench cannot make keys
    with pytest.raises(SystemExit, match=problem):
        main(["bench", "sweep", *argv])


@pytest.mark.slow
async def test_mock_llm_process_announces_its_url_and_serves_the_contract(tmp_path: Path) -> None:
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


def test_profiles_resolve_by_name_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anywhere: the named profiles are the package's
    packaged = resolve_profile("no-store")
    assert packaged == PROFILES / "no-store.toml" and packaged.is_file()
    assert resolve_profile(str(PROFILES / "full-store.toml")) == PROFILES / "full-store.toml"
    (tmp_path / "mine.toml").write_text("[store]\nenabled = false\n")
    assert resolve_profile("mine.toml") == Path("mine.toml")  # a path wins, relative to the working directory
    with pytest.raises(BenchSetupError, match="'nope' not found.*no-store"):
        resolve_profile("nope")
    assert {"no-store", "full-store", "runs", "fairness"} <= set(profile_names())


def test_bench_profiles_set_what_the_sweep_needs() -> None:
    for name, store in (("no-store", False), ("full-store", True), ("full-store-limits", True)):
        settings = load_settings(PROFILES / f"{name}.toml")
        assert settings.store.enabled is store
        assert settings.kernel.max_in_flight_turns == 0 and settings.kernel.concurrency_limit == 4000
    limits = load_settings(PROFILES / "full-store-limits.toml").tenant_limits
    # Budgets stay unset: the sweep's mock has no price, and a budget refuses an unpriced target
    # (docs/providers.md, "Budgets"); retention deletes, it limits nothing a request meets; the
    # rest is every limit the sweep checks.
    unset = {"weight", "budget_per_day", "budget_per_month", "retention_s"}
    rates = [v for k, v in msgspec.structs.asdict(limits).items() if k not in unset]
    assert min(rates) >= 1_000_000  # every limit set (so it runs), none near what a sweep offers


def test_the_jwt_profile_trusts_the_bench_identity_provider() -> None:
    """bench/profiles/full-store-jwt.toml and bench/scripts/bench_idp.py name the same issuer,
    audience and port, and the sweep's first tenant (`--tenants 1`)."""
    repo = Path(__file__).resolve().parents[2]
    (issuer,) = load_settings(repo / "bench/profiles/full-store-jwt.toml").identity.issuers
    idp = (repo / "bench/scripts/bench_idp.py").read_text()
    assert f'ISSUER = "{issuer.issuer}"' in idp and f'AUDIENCE = "{issuer.audience}"' in idp
    assert issuer.jwks_url == "http://127.0.0.1:4319/jwks.json" and "default=4319" in idp
    assert issuer.tenant == "bench-t001"  # AdminKeys' name of the first tenant


def test_server_and_mock_command_lines(tmp_path: Path) -> None:
    plan = ServerPlan(
        profile_path=tmp_path / "p.toml", provider_url="http://127.0.0.1:1/v1", data_dir=tmp_path, session_ttl_s=9.0
    )
    argv = server_argv(plan, 4321)
    assert argv[1:4] == ["-m", "agentos", "serve"]
    assert argv[argv.index("--port") + 1] == "4321" and argv[argv.index("--session-ttl-secs") + 1] == "9.0"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    mock = mock_argv(MockSettings(ttft_ms=3.0, scenario="tools"))
    assert mock[mock.index("--ttft-ms") + 1] == "3.0" and mock[mock.index("--scenario") + 1] == "tools"


def test_fd_limit_is_raised_to_the_hard_limit() -> None:
    import resource

    soft = raise_fd_limit()
    assert soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 1024


# -- pre-flight: a mistake is one line and exit 2 before anything is measured (issue 13, defect 3) --


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--profile", "nope", "--target", "server", "--sweep", "1", "--duration-secs", "0.1"],
        ["sweep", "--profile", "no-store,nope", "--target", "server", "--sweep", "1", "--duration-secs", "0.1"],
        ["memory", "--sessions", "1", "--profile", "nope"],
        ["runs", "--runs", "1", "--waiting-runs", "0", "--profile", "nope"],
    ],
)
def test_a_missing_profile_stops_the_bench_before_it_starts(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # outside the repository
    out = tmp_path / "out"
    assert main(["bench", *argv, "--out-dir", str(out)]) == 2
    names = ", ".join(profile_names())
    expected = f"agentos: --profile nope: no such profile (packaged: {names}); pass a path to a TOML file\n"
    assert capsys.readouterr().err == expected
    assert not out.exists()


def test_a_profile_given_as_a_path_passes_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentos_bench.cli_bench import check_profile

    monkeypatch.chdir(tmp_path)
    assert check_profile(str(PROFILES / "full-store.toml")) == PROFILES / "full-store.toml"
    assert check_profile("runs") == PROFILES / "runs.toml"  # by name, from anywhere


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["sweep", "--target", "direct", "--sweep", "1", "--duration-secs", "0.2", "--warmup-secs", "0"], "sweep"),
        (["runs", "--runs", "1", "--waiting-runs", "0"], "runs"),
    ],
)
def test_without_matplotlib_the_report_is_written_without_its_plots(
    argv: list[str], command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails, as without the extra
    monkeypatch.delitem(sys.modules, "agentos_bench.report.plots", raising=False)  # imported again, and failing
    monkeypatch.delattr(report_package, "plots", raising=False)  # `from agentos_bench.report import plots` too
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the repository: its profiles exist
    out = tmp_path / "out"
    assert main(["bench", *argv, "--out-dir", str(out)]) == 0
    assert "the report's plots will be skipped" in capsys.readouterr().err  # said before measuring
    (markdown,) = out.glob("*.md")
    assert "plots skipped: matplotlib is not installed" in markdown.read_text()
    assert len(list(out.glob("*.json"))) == 1 and not list(out.glob("*.png"))


def test_the_openai_api_runs_on_one_node(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(["bench", "sweep", "--api", "openai", "--nodes", "2", "--profile", "postgres-3node"]) == 2
    assert "--api openai runs on one node only" in capsys.readouterr().err
