"""Where reports go by default, and that a second run never overwrites the first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentos.cli import build_parser, main
from agentos_bench.report.output import DEFAULT_OUT_DIR, claim_stem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["bench", "sweep"], ["bench", "memory"], ["bench", "runs"]])
def test_default_out_dir_is_ignored_by_git(command: list[str]) -> None:
    """A run without --out-dir must leave nothing for `git add .` to pick up by accident."""
    out_dir = build_parser(with_bench=True).parse_args(command).out_dir
    assert out_dir == DEFAULT_OUT_DIR and not out_dir.is_absolute()
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probe = out_dir / "2026-01-01T000000Z-m-sweep-x.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=ROOT, check=False)
    assert ignored.returncode == 0, f"{probe} is not ignored by .gitignore"


def test_explicit_out_dir_still_commits_a_result() -> None:
    args = build_parser(with_bench=True).parse_args(["bench", "sweep", "--out-dir", "bench/results"])
    assert args.out_dir == Path("bench/results")


def test_claim_stem_skips_every_stem_already_taken(tmp_path: Path) -> None:
    out_dir = tmp_path / "new" / "dir"
    assert [claim_stem(out_dir, "r") for _ in range(3)] == ["r", "r-2", "r-3"]
    assert sorted(p.name for p in out_dir.iterdir()) == ["r-2.json", "r-3.json", "r.json"]


@pytest.mark.slow
def test_two_runs_with_the_same_arguments_write_different_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same command twice (well within one second of each other's stem): both reports survive."""
    monkeypatch.chdir(tmp_path)
    argv = ["bench", "sweep", "--target", "direct", "--sweep", "1", "--duration-secs", "0.3", "--warmup-secs", "0.1"]
    argv += ["--mock-ttft-ms", "5", "--mock-tps", "2000", "--mock-tokens", "2", "--name", "test"]
    printed = []
    for _ in range(2):
        assert main(argv) == 0
        printed.append(capsys.readouterr().out.split())
    first, second = ({Path(p).name for p in run} for run in printed)
    assert first and second and first.isdisjoint(second)
    written = {p.name for p in (tmp_path / DEFAULT_OUT_DIR).iterdir()}
    assert written == first | second and len([n for n in written if n.endswith(".json")]) == 2
    assert all(Path(p).parent.resolve() == (tmp_path / DEFAULT_OUT_DIR).resolve() for p in printed[0])


def test_the_commit_is_the_running_codes_not_the_working_directorys(tmp_path: Path) -> None:
    """A run started elsewhere (here: a directory outside any checkout) still names the commit of
    the checkout its code came from, as a bisect with `PYTHONPATH` on another worktree needs."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    script = "from agentos_bench.report.machine import git_commit; print(git_commit())"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    found = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    assert found.removesuffix("+dirty") == head
