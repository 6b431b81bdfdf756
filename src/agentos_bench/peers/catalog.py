"""The peers the bench knows: where each is installed, how it starts against the mock, how to install it.

Each peer lives in `<peers-dir>/<name>`, apart from Agent OS's own environment (a peer is never a
dependency of Agent OS or of its tests). `version()` is None when it is not installed there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agentos_bench.peers.targets import AgnoTarget, LangGraphTarget, OpencodeTarget, PeerTarget

PEERS_DIR_ENV = "AGENTOS_BENCH_PEERS_DIR"
AGNO_VERSION = "3.1.10"  # the versions the committed comparison ran; others may work
OPENCODE_VERSION = "1.18.33"
LANGGRAPH_API_VERSION = "0.16.7"  # the server; the CLI that starts it and the graph's packages:
LANGGRAPH_PACKAGES = ("langgraph-cli[inmem]==0.4.40", "langgraph==1.2.24", "langchain-openai==1.8.1")
LANGGRAPH_JOBS = 1000  # concurrent runs: `langgraph dev` runs 1 at a time unless told (the image: 10)


def default_peers_dir() -> Path:
    return Path(os.environ.get(PEERS_DIR_ENV) or Path.home() / ".cache" / "agentos-bench" / "peers")


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How to start a peer: its argv, the environment added to ours, its working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    ready_path: str  # answers 200 once the peer serves


class Peer(Protocol):
    name: str
    title: str
    setup: str  # what it runs per turn, for the report

    def version(self, peers_dir: Path) -> str | None: ...
    def install(self, peers_dir: Path) -> list[str]: ...
    def launch(self, peers_dir: Path, mock_url: str, port: int, run_dir: Path) -> Launch: ...
    def target(self, base_url: str) -> PeerTarget: ...


class Agno:
    name = "agno"
    title = "Agno AgentOS"
    setup = "one agent on the mock (OpenAILike), sessions in SQLite, history sent on every turn; uvicorn, one process"

    def version(self, peers_dir: Path) -> str | None:
        found = sorted((peers_dir / self.name / "lib").glob("python3*/site-packages/agno-*.dist-info"))
        return found[-1].name.removeprefix("agno-").removesuffix(".dist-info") if found else None

    def install(self, peers_dir: Path) -> list[str]:
        home = peers_dir / self.name
        return [
            f"python3 -m venv {home}",
            f"{home}/bin/pip install 'agno[os]=={AGNO_VERSION}' openai sqlalchemy uvicorn",
        ]

    def launch(self, peers_dir: Path, mock_url: str, port: int, run_dir: Path) -> Launch:
        script = Path(__file__).with_name("agno_app.py")
        argv = [str(peers_dir / self.name / "bin" / "python"), str(script), "--mock-url", mock_url]
        argv += ["--port", str(port), "--db", str(run_dir / "agno.db")]
        return Launch(argv=argv, env={"AGNO_TELEMETRY": "false"}, cwd=run_dir, ready_path="/health")

    def target(self, base_url: str) -> PeerTarget:
        return AgnoTarget(base_url)


class Opencode:
    name = "opencode"
    title = "opencode server"
    setup = (
        "`opencode serve`, its default agent on a custom OpenAI-compatible provider (the mock); "
        "a coding agent: its system prompt and tool definitions go with every request"
    )

    def version(self, peers_dir: Path) -> str | None:
        package = peers_dir / self.name / "node_modules" / "opencode-ai" / "package.json"
        if not (self._binary(peers_dir).exists() and package.exists()):
            return None
        return str(json.loads(package.read_text()).get("version"))

    def install(self, peers_dir: Path) -> list[str]:
        home = peers_dir / self.name
        return [f"npm install --prefix {home} opencode-ai@{OPENCODE_VERSION}"]

    def launch(self, peers_dir: Path, mock_url: str, port: int, run_dir: Path) -> Launch:
        project = run_dir / "opencode-project"  # its sessions belong to this directory's project
        project.mkdir(parents=True, exist_ok=True)
        argv = [str(self._binary(peers_dir)), "serve", "--port", str(port), "--hostname", "127.0.0.1"]
        return Launch(argv=argv, env=self._env(peers_dir, mock_url, run_dir), cwd=project, ready_path="/config")

    def target(self, base_url: str) -> PeerTarget:
        return OpencodeTarget(base_url)

    def _binary(self, peers_dir: Path) -> Path:
        return peers_dir / self.name / "node_modules" / ".bin" / "opencode"

    def _env(self, peers_dir: Path, mock_url: str, run_dir: Path) -> dict[str, str]:
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "bench mock",
            "options": {"baseURL": mock_url, "apiKey": "bench"},
            "models": {"mock-1": {"name": "mock-1"}},
        }
        config = {"autoupdate": False, "share": "disabled", "model": "mock/mock-1", "small_model": "mock/mock-1"}
        return {
            # the config home keeps the plugin package opencode installs on its first start;
            # its data, state and cache are the run's, removed with it
            "XDG_CONFIG_HOME": str(peers_dir / self.name / "home" / "config"),
            "XDG_DATA_HOME": str(run_dir / "opencode-data"),
            "XDG_STATE_HOME": str(run_dir / "opencode-state"),
            "XDG_CACHE_HOME": str(run_dir / "opencode-cache"),
            "OPENCODE_CONFIG_CONTENT": json.dumps({**config, "provider": {"mock": provider}}),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        }


class LangGraph:
    name = "langgraph"
    title = "LangGraph Server"
    setup = (
        "`langgraph dev --no-reload` (langgraph-api, in-memory runtime), one graph of one node calling the mock "
        "through ChatOpenAI, streamed; a thread per session, its history sent on every turn; up to "
        f"{LANGGRAPH_JOBS} runs at once, one process"
    )

    def version(self, peers_dir: Path) -> str | None:
        site = peers_dir / self.name / "lib"
        found = sorted(site.glob("python3*/site-packages/langgraph_api-*.dist-info"))
        if not (found and (peers_dir / self.name / "bin" / "langgraph").exists()):
            return None
        return found[-1].name.removeprefix("langgraph_api-").removesuffix(".dist-info")

    def install(self, peers_dir: Path) -> list[str]:
        home = peers_dir / self.name
        packages = " ".join(f"'{package}'" for package in LANGGRAPH_PACKAGES)
        return [f"python3 -m venv {home}", f"{home}/bin/pip install langgraph-api=={LANGGRAPH_API_VERSION} {packages}"]

    def launch(self, peers_dir: Path, mock_url: str, port: int, run_dir: Path) -> Launch:
        project = run_dir / "langgraph-project"  # the server keeps its in-memory store's files here
        project.mkdir(parents=True, exist_ok=True)
        graph = Path(__file__).with_name("langgraph_app.py")
        config = {"graphs": {"bench": f"{graph}:graph"}, "dependencies": ["."]}
        (project / "langgraph.json").write_text(json.dumps(config))
        argv = [str(peers_dir / self.name / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--n-jobs-per-worker", str(LANGGRAPH_JOBS)]
        env = {
            "AGENTOS_BENCH_MOCK_URL": mock_url,  # read by langgraph_app.py
            "LOG_LEVEL": "WARNING",  # not its per-run info lines (Agno runs at warning too)
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        }
        return Launch(argv=argv + ["--config", "langgraph.json"], env=env, cwd=project, ready_path="/ok")

    def target(self, base_url: str) -> PeerTarget:
        return LangGraphTarget(base_url)


PEERS: dict[str, Peer] = {peer.name: peer for peer in (Agno(), Opencode(), LangGraph())}
NOT_BUILT: dict[str, str] = {}  # peers the issue names that have no adapter yet, and why
