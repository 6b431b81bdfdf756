"""CPU lists for `agentos bench sweep --server-cpus/--mock-cpus/--loadgen-cpus`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.conftest import child_env

from agentos.errors import ConfigError
from agentos_bench.common.pinning import parse_cpus, pinned


def test_a_cpu_list_names_its_cores() -> None:
    first = min(os.sched_getaffinity(0))
    assert parse_cpus("") == set()
    assert parse_cpus(f"{first}") == {first}
    assert parse_cpus(f"{first}-{first},{first}") == {first}


@pytest.mark.parametrize("text", ["a", "0-x", "-1", "100000"])
def test_a_bad_cpu_list_is_one_line(text: str) -> None:
    with pytest.raises(ConfigError, match="CPU list"):
        parse_cpus(text)


def test_a_pinned_command_runs_under_taskset_and_an_unpinned_one_as_it_is() -> None:
    assert pinned(["python", "-V"], "") == ["python", "-V"]
    argv = pinned([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], "0")
    assert argv[1:3] == ["-c", "0"]
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip() == "[0]"


def test_the_sweep_refuses_zero_workers_in_one_line() -> None:
    argv = [sys.executable, "-m", "agentos", "bench", "sweep", "--workers", "0", "--sweep", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "agentos: bench sweep --workers 0: must be 1 or more"
