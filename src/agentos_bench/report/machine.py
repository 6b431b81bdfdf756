"""The header of every report: what machine, which versions, named for the result files."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = ("agentos", "aiohttp", "uvloop", "msgspec", "prometheus-client")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    found["git_commit"] = git_commit()
    return found


def git_commit() -> str:
    """The commit of the code that runs (the checkout holding this package, wherever the
    command was started: a run with `PYTHONPATH` on another worktree reports that worktree's),
    `+dirty` when tracked files differ from it; "unknown" outside a checkout (an installed wheel).

    Read-only: `GIT_OPTIONAL_LOCKS=0` stops `git status` from refreshing the index.
    """
    head = _git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return f"{head}+dirty" if dirty else head


_CODE_DIR = Path(__file__).resolve().parent  # in the checkout the running code came from


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=_CODE_DIR,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def machine_info() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": ram_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "hostname": platform.node(),
    }


def machine_slug(info: dict[str, Any]) -> str:
    """A short file-name-safe machine name, e.g. `2c-amd-epyc-7b13`."""
    words = re.sub(r"\(.*?\)|cpu|processor|@.*|\d+-core", " ", str(info.get("cpu", "")).lower())
    words = re.sub(r"[^a-z0-9]+", "-", words).strip("-")
    return f"{info.get('cores')}c-{'-'.join(words.split('-')[:4])}".strip("-")


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def result_stem(kind: str, label: str, info: dict[str, Any], when: dt.datetime, name: str | None = None) -> str:
    """`<UTC time>-<machine>-<kind>-<label>`: the common stem of a report's .json, .md and .png files.

    The time is UTC to the second (`2026-12-01T081530Z`), so runs sort by time and a later run
    does not take an earlier one's name; `output.claim_stem` settles runs within the same second.
    """
    safe_label = re.sub(r"[^A-Za-z0-9+_.-]+", "-", label).strip("-")
    utc = when.astimezone(dt.UTC)
    return f"{utc:%Y-%m-%dT%H%M%SZ}-{name or machine_slug(info)}-{kind}-{safe_label}"


def report_head(kind: str, topology: str, command: str) -> dict[str, Any]:
    """What every bench report records first: its kind, when, the machine and versions it ran on,
    the topology measured and the command that ran it."""
    return {
        "kind": kind,
        "created_utc": utc_now().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(),
        "topology": topology,
        "command": command,
    }
