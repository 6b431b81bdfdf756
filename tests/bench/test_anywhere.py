"""`agentos bench sweep` after an install, from an empty directory outside the repository and
without matplotlib (the bench extra): the packaged profile is found by name, the report is
written, the plots are skipped with one clear line, never a traceback."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from tests.conftest import child_env

_WITHOUT_MATPLOTLIB = (
    "import sys; sys.modules['matplotlib'] = None; from agentos.cli import main; raise SystemExit(main())"
)


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_sweep_runs_from_an_empty_directory_without_matplotlib(tmp_path: Path) -> None:
    argv = ["bench", "sweep", "--sweep", "1,4", "--duration-secs", "3"]  # the README's smoke test, as given
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WITHOUT_MATPLOTLIB,
        *argv,
        cwd=tmp_path,
        env=child_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 170)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert "Traceback" not in err.decode()
    assert "matplotlib is not installed: the report's plots will be skipped" in err.decode()
    (report_path,) = (tmp_path / "bench-out").glob("*-sweep-no-store.json")
    assert str(report_path.relative_to(tmp_path)) in out.decode()
    assert list((tmp_path / "bench-out").glob("*.png")) == []
    report = json.loads(report_path.read_text())
    assert report["profiles"] == ["no-store"]
    assert "plots skipped" in report_path.with_suffix(".md").read_text()
