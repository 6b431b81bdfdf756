"""`agentos bench load`: the scenario file, the schedule's arithmetic, the dispatcher's bookkeeping
(one sample per offer, latency from the due time, late and abandoned counted) and the report's
rules (nearest rank over successes, offered vs recorded, not measured, verdict last)."""

from __future__ import annotations

import asyncio
import time
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from agentos_bench.arrival.dispatch import Attempt, DispatchStats, Failed, Sample, dispatch
from agentos_bench.arrival.report import load_markdown
from agentos_bench.arrival.scenario import DEFAULT_SCENARIO, Scenario, ScenarioError, parse_scenario, read_scenario
from agentos_bench.arrival.schedule import Offer, build_schedule, plan_phases
from agentos_bench.arrival.summary import FAILED, NOT_MEASURED, PASSED, summarize


def test_the_shipped_scenario_is_the_seeds() -> None:
    s = read_scenario()
    assert [(load.kind, round(load.share * 100)) for load in s.loads] == [
        ("api_read", 45),
        ("chat_stream", 20),
        ("agent_run", 15),
        ("rag_query", 12),
        ("ingest", 5),
        ("trigger_fire", 3),
    ]
    assert [(p.name, p.seconds, p.rate) for p in s.phases] == [
        ("ramp", 60, 4),
        ("sustain", 180, 12),
        ("burst", 45, 36),
        ("recover", 60, 12),
    ]
    assert s.load("chat_stream").metric == "first_token" and s.load("chat_stream").p95_ms == 1500
    assert s.load("ingest").max_error_rate == 0.0 and s.load("ingest").p95_ms is None
    assert s.connection_limit() == 36 * 90  # peak rate x the longest timeout: the seed's 3240
    assert s.connection_limit(rate_multiplier=2) == 2 * 36 * 90


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[loads]\napi_read = { share = 50 }\n[phases]\nsustain = { seconds = 1, rate = 1 }", "add up to 50%"),
        ("[loads]\nupload = { share = 100 }\n[phases]\nsustain = { seconds = 1, rate = 1 }", "unknown load"),
        ("[loads]\napi_read = { share = 100, p95 = 3 }\n[phases]\nsustain = { seconds = 1, rate = 1 }", "unknown keys"),
        ("[loads]\napi_read = { share = 100 }\n[phases]\nramp = { seconds = 1, rate = 1 }", "no 'sustain'"),
        (
            "[loads]\napi_read = { share = 100, metric = 'first_token' }\n"
            "[phases]\nsustain = { seconds = 1, rate = 1 }",
            "only chat_stream",
        ),
        ("[loads]\napi_read = { share = true }\n[phases]\nsustain = { seconds = 1, rate = 1 }", "a number"),
        ("[loads]\napi_read = { share = 100 }\n[phases]\nsustain = { seconds = -1, rate = 1 }", "a number"),
        ("[loads]\napi_read = { share = 100 }\n[phases]\nsustain = { seconds = 1, rate = 1 }\n[x]\n", "unknown tables"),
    ],
)
def test_a_bad_scenario_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=says) as caught:
        read_scenario(path)
    assert str(path) in str(caught.value)


def test_the_schedule_offers_each_phase_its_rate_evenly() -> None:
    s = read_scenario()
    windows = plan_phases(s)
    assert [(w.name, w.start_s, w.end_s, w.offered) for w in windows] == [
        ("ramp", 0, 60, 240),
        ("sustain", 60, 240, 2160),
        ("burst", 240, 285, 1620),
        ("recover", 285, 345, 720),
    ]
    offers = build_schedule(s)
    assert len(offers) == 4740  # the seed's run: 4740 requests
    burst = [o.at_s for o in offers if o.phase == "burst"]
    assert burst[0] == 240 and all(b - a == pytest.approx(1 / 36) for a, b in zip(burst, burst[1:], strict=False))
    assert [o.index for o in offers] == list(range(len(offers)))


def test_scale_shortens_the_phases_and_keeps_the_rates() -> None:
    s = read_scenario()
    short = plan_phases(s, scale=0.1)
    assert [(w.end_s - w.start_s, w.rate) for w in short] == [
        pytest.approx((6, 4)),
        pytest.approx((18, 12)),
        pytest.approx((4.5, 36)),
        pytest.approx((6, 12)),
    ]
    assert [w.offered for w in short] == [24, 216, 162, 72]
    assert [w.rate for w in plan_phases(s, rate_multiplier=2)] == [8, 24, 72, 24]
    with pytest.raises(ValueError):
        plan_phases(s, scale=0)


def test_the_mix_is_low_discrepancy_and_the_same_every_run() -> None:
    s = read_scenario()
    offers = build_schedule(s)
    assert offers == build_schedule(s)  # deterministic: two runs send the same requests
    counts = Counter(o.kind for o in offers)
    for load in s.loads:
        assert abs(counts[load.kind] - load.share * len(offers)) <= 2, load.kind
    first_hundred = Counter(o.kind for o in offers[:100])  # every prefix holds the shares too
    for load in s.loads:
        assert abs(first_hundred[load.kind] - load.share * 100) <= 2, load.kind
    chats = [o for o in offers if o.kind == "chat_stream"]
    assert [o.cancel for o in chats[:10]] == [False] * 4 + [True] + [False] * 4 + [True]  # every fifth


def _offers(*kinds: str, gap_s: float = 0.001) -> list[Offer]:
    return [Offer(i, kind, "sustain", i * gap_s) for i, kind in enumerate(kinds)]


async def test_every_offer_leaves_one_sample_named_by_its_outcome() -> None:
    never = asyncio.Event()

    async def send(offer: Offer, attempt: Attempt) -> None:
        if offer.kind == "api_read":
            return
        if offer.kind == "ingest":
            raise Failed("http_503")
        if offer.kind == "rag_query":
            raise RuntimeError("a bug in a sender")
        if offer.kind == "agent_run":
            await never.wait()  # past its timeout
        await never.wait()  # trigger_fire: still in flight at the drain deadline

    offers = _offers("api_read", "ingest", "rag_query", "agent_run", "trigger_fire")
    timeouts = {"api_read": 5, "ingest": 5, "rag_query": 5, "agent_run": 0.05, "trigger_fire": 60}
    samples, stats = await dispatch(offers, send, timeouts=timeouts, connection_limit=100, drain_s=0.2)
    assert [(s.kind, s.error) for s in samples] == [
        ("api_read", None),
        ("ingest", "http_503"),
        ("rag_query", "RuntimeError"),
        ("agent_run", "timeout"),
        ("trigger_fire", "abandoned"),
    ]
    assert stats.in_flight == 0 and stats.peak_in_flight >= 2


async def test_latency_counts_from_the_due_time_and_a_late_dispatch_is_counted() -> None:
    async def send(offer: Offer, attempt: Attempt) -> None:
        if offer.index == 0:
            time.sleep(0.3)  # noqa: ASYNC251, TID251 -- the generator itself is busy past the next request's due time
        attempt.first_token()

    offers = _offers("api_read", "api_read", gap_s=0.1)
    samples, stats = await dispatch(offers, send, timeouts={"api_read": 5}, connection_limit=100, drain_s=1)
    late = samples[1]
    assert stats.late >= 1 and stats.max_lag_s >= 0.15
    assert late.sent_s - late.due_s >= 0.15  # it left late...
    assert late.latency_s >= late.done_s - late.sent_s + 0.15  # ...and that wait is in its latency
    assert late.first_token_s is not None and late.first_token_s >= 0.15


async def test_a_dispatch_at_the_connection_limit_is_counted() -> None:
    release, all_started = asyncio.Event(), asyncio.Event()
    started = 0

    async def send(offer: Offer, attempt: Attempt) -> None:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await release.wait()

    offers = _offers("api_read", "api_read", "api_read")
    task = asyncio.create_task(dispatch(offers, send, timeouts={"api_read": 5}, connection_limit=2, drain_s=5))
    await asyncio.wait_for(all_started.wait(), 5)
    release.set()
    samples, stats = await asyncio.wait_for(task, 5)
    assert stats.capped == 1 and all(s.ok for s in samples)


def _sample(i: int, kind: str, latency_s: float, error: str | None = None, phase: str = "sustain") -> Sample:
    return Sample(i, kind, phase, due_s=1.0, sent_s=1.0, done_s=1.0 + latency_s, first_s=None, error=error)


def _scenario_one(kind: str = "api_read", **limits: float) -> Scenario:
    entry = ", ".join(f"{k} = {v}" for k, v in limits.items())
    sep = ", " if entry else ""
    text = f"[loads]\n{kind} = {{ share = 100{sep}{entry} }}\n[phases]\nsustain = {{ seconds = 10, rate = 10 }}"
    return parse_scenario(tomllib.loads(text))


def test_percentiles_are_nearest_rank_over_successes_and_errors_over_offered() -> None:
    scenario = _scenario_one(p95_ms=300, max_error_rate=0.1)
    samples = [_sample(i, "api_read", (i + 1) / 1000) for i in range(40)]  # 1..40 ms
    samples += [_sample(40 + i, "api_read", 0.0001, error="http_429") for i in range(4)]  # fast refusals
    offers = [Offer(s.index, "api_read", "sustain", 1.0) for s in samples]
    report = summarize(scenario, plan_phases(scenario), offers, samples, DispatchStats(), 10)
    load = report["phases"]["sustain"]["loads"]["api_read"]
    assert load["latency_ms"] == {"n": 40, "p50": 20.0, "p95": 38.0, "p99": None}  # refusals are not fast requests
    assert load["failures"] == {"http_429": 4} and load["error_rate"] == pytest.approx(4 / 44)
    assert report["verdict"]["api_read"]["status"] == PASSED
    strict = _scenario_one(p95_ms=30)
    failed = summarize(strict, plan_phases(strict), offers, samples, DispatchStats(), 10)
    assert failed["verdict"]["api_read"] == {"status": FAILED, "reasons": ["latency p95 38 ms > 30 ms"]}


def test_a_load_without_samples_or_too_few_is_not_measured_never_passed() -> None:
    scenario = _scenario_one(p95_ms=300)
    nothing = summarize(scenario, plan_phases(scenario), [], [], DispatchStats(), 10)
    assert nothing["verdict"]["api_read"]["status"] == NOT_MEASURED
    few = [_sample(i, "api_read", 0.01) for i in range(19)]  # p95 needs 20
    offers = [Offer(s.index, "api_read", "sustain", 1.0) for s in few]
    report = summarize(scenario, plan_phases(scenario), offers, few, DispatchStats(), 10)
    assert report["verdict"]["api_read"]["status"] == NOT_MEASURED


def test_offered_not_recorded_makes_the_report_unusable_with_no_verdict() -> None:
    scenario = _scenario_one(max_error_rate=0.0)
    samples = [_sample(i, "api_read", 0.01) for i in range(30)]
    offers = [Offer(i, "api_read", "sustain", 1.0) for i in range(31)]  # one sample lost
    report = summarize(scenario, plan_phases(scenario), offers, samples, DispatchStats(), 10)
    assert report["usable"] is False and report["verdict"] is None
    text = load_markdown(_decorated(report), {})
    assert "UNUSABLE REPORT: offered 31 requests, recorded 30" in text
    assert text.index("## What ran") < text.index("## The sustain phase") < text.index("## Verdict")


def _decorated(report: dict[str, object]) -> dict[str, object]:
    machine = {"cpu": "cpu", "cores": 2, "ram_gib": 1, "os": "os"}
    mock = {"ttft_ms": 1, "tps": 1, "tokens": 1, "scenario": "tools", "error_rate": 0, "hang_rate": 0}
    cpu = {"cores_by_phase": {"sustain": {"server": 0.5}}, "peak_cores": {"server": 0.7}}
    return {
        **report,
        "created_utc": "2026-12-01T00:00:00",
        "machine": machine,
        "versions": {},
        "topology": "t",
        "mock": mock,
        "scenario_text": "s",
        "command": "c",
        "load_average": {"before_1m": 0, "after_1m": 0},
        "cpu": cpu,
    }


def test_the_default_scenario_file_ships_with_the_package() -> None:
    assert DEFAULT_SCENARIO.is_file() and DEFAULT_SCENARIO.name == "scenario.toml"
