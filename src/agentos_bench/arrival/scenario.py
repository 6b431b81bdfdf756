"""The scenario of an open-arrival run: which loads in which shares, the phases, the thresholds.

Read from a TOML file, one line per load (`scenario.toml` beside this module is the shipped
default, the seed's proposals). Everything is checked here, so a typo is a one-line error before
anything starts, never a run that measured something else.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

DEFAULT_SCENARIO = Path(__file__).with_name("scenario.toml")
KINDS = ("api_read", "chat_stream", "agent_run", "rag_query", "ingest", "trigger_fire")
SUSTAIN = "sustain"  # the phase every threshold is judged on
RECOVER = "recover"
Metric = Literal["latency", "first_token"]
_LOAD_KEYS = {"share", "p95_ms", "max_error_rate", "timeout_s", "metric"}


class ScenarioError(ValueError):
    """The scenario file is unreadable or says something the run cannot do."""


@dataclass(frozen=True, slots=True)
class Load:
    kind: str  # one of KINDS: what a request of this load does
    share: float  # of the requests offered, 0..1
    timeout_s: float
    p95_ms: float | None = None  # the threshold on `metric`'s p95 over successful requests
    max_error_rate: float | None = None  # failed / offered
    metric: Metric = "latency"


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    seconds: float
    rate: float  # offered requests per second


@dataclass(frozen=True, slots=True)
class Scenario:
    loads: tuple[Load, ...]
    phases: tuple[Phase, ...]

    def load(self, kind: str) -> Load:
        return next(load for load in self.loads if load.kind == kind)

    @property
    def peak_rate(self) -> float:
        return max(phase.rate for phase in self.phases)

    def connection_limit(self, rate_multiplier: float = 1.0) -> int:
        """Peak rate x the longest request timeout: the most requests that can be in flight when
        every one takes as long as it may, so a generator with this many connections never makes
        a request wait for another (the open model stays open in the burst)."""
        longest = max(load.timeout_s for load in self.loads)
        return max(1, math.ceil(self.peak_rate * rate_multiplier * longest))


def read_scenario(path: Path = DEFAULT_SCENARIO) -> Scenario:
    """Raises: ScenarioError (one line, naming the file and the entry)."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    try:
        return parse_scenario(raw)
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def parse_scenario(raw: dict[str, Any]) -> Scenario:
    loads_raw, phases_raw = raw.get("loads"), raw.get("phases")
    if not isinstance(loads_raw, dict) or not loads_raw:
        raise ScenarioError("[loads] is missing or empty")
    if not isinstance(phases_raw, dict) or not phases_raw:
        raise ScenarioError("[phases] is missing or empty")
    if unknown := set(raw) - {"loads", "phases"}:
        raise ScenarioError(f"unknown tables {sorted(unknown)} (only [loads] and [phases])")
    loads = tuple(_load(kind, entry) for kind, entry in loads_raw.items())
    total = sum(load.share for load in loads)
    if not math.isclose(total, 1.0, abs_tol=1e-9):
        raise ScenarioError(f"the shares of [loads] add up to {total * 100:g}%, not 100%")
    phases = tuple(_phase(name, entry) for name, entry in phases_raw.items())
    if SUSTAIN not in {phase.name for phase in phases}:
        raise ScenarioError(f"[phases] has no {SUSTAIN!r} phase (every threshold is judged on it)")
    return Scenario(loads, phases)


def _load(kind: str, entry: Any) -> Load:
    where = f"loads.{kind}"
    if kind not in KINDS:
        raise ScenarioError(f"{where}: unknown load (known: {', '.join(KINDS)})")
    if not isinstance(entry, dict):
        raise ScenarioError(f"{where}: expected an inline table")
    if unknown := set(entry) - _LOAD_KEYS:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_LOAD_KEYS)})")
    share = _number(where, "share", entry.get("share"), low=0.0, high=100.0)
    metric = entry.get("metric", "latency")
    if metric not in ("latency", "first_token"):
        raise ScenarioError(f"{where}.metric: 'latency' or 'first_token', not {metric!r}")
    if metric == "first_token" and kind != "chat_stream":
        raise ScenarioError(f"{where}.metric: only chat_stream has a first token")
    p95 = entry.get("p95_ms")
    errors = entry.get("max_error_rate")
    return Load(
        kind=kind,
        share=share / 100.0,
        timeout_s=_number(where, "timeout_s", entry.get("timeout_s", 30), low=0.001, high=3600.0),
        p95_ms=None if p95 is None else _number(where, "p95_ms", p95, low=0.0, high=3_600_000.0),
        max_error_rate=None if errors is None else _number(where, "max_error_rate", errors, low=0.0, high=1.0),
        metric=metric,
    )


def _phase(name: str, entry: Any) -> Phase:
    where = f"phases.{name}"
    if not isinstance(entry, dict) or set(entry) != {"seconds", "rate"}:
        raise ScenarioError(f"{where}: expected {{ seconds = ..., rate = ... }}")
    seconds = _number(where, "seconds", entry["seconds"], low=0.0, high=86_400.0)
    return Phase(name, seconds, _number(where, "rate", entry["rate"], low=0.0, high=100_000.0))


def _number(where: str, key: str, value: Any, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ScenarioError(f"{where}.{key}: a number from {low:g} to {high:g}, not {value!r}")
    return float(value)
