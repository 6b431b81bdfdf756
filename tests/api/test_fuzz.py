"""Property-based fuzzing of every operation in /openapi.json with schemathesis (issue 8).

The real server runs on loopback with a real SQLite data dir, the mock provider over HTTP and
`server.api_token` set (the bootstrap only): every call carries an API key made through the real
admin API, an admin key for every operation, and a tenant key (no admin scope) too, whose admin
calls must all be documented 403s. schemathesis generates requests
from the document the server itself serves (valid and invalid ones), and each answer must:
not be a 5xx, have a documented status code, content type and headers, and match the
documented schema (so every error is `{"error": {"code", "message"}}`, the `Error` schema, or
OpenAI's `OpenAIError` on the OpenAI-compatible routes).
A call that takes longer than `_CALL_TIMEOUT_S` is a hang, and fails the test.

The server runs in its own thread and event loop: schemathesis's calls are blocking
(`requests`), and must not block the loop that serves them.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks

from agentos.config.agents import parse_agent_spec
from agentos.errors import InvalidInput
from agentos.mock.server import MockSettings, start_mock
from agentos.testing import start_server
from agentos.testing.tenants import TenantKey, create_tenant_key
from agentos.triggers.signatures import decode_secret, sign
from tests.api.helpers import OPENAPI
from tests.conftest import make_settings

_TOKEN = "fuzz-token"
_EXAMPLES = 30  # per operation and mode: every check at 30 costs 117 s CPU, the 5 checks at 50 cost 135 s
_TENANT_EXAMPLES = 8
_CALL_TIMEOUT_S = 10.0  # a turn against the mock takes milliseconds; 10 s is a hang
# Accept is no documented parameter, yet it picks a turn's answer (SSE, JSON or a 406): vary it.
_ACCEPTS = ["", "text/event-stream", "application/json", "*/*", "text/html", "text/event-stream, application/json"]
# Limits high enough never to refuse the fixtures, so every answer carries the RateLimit headers
# (checked against the document); turns low enough that the fuzzer meets turn_rate_limited.
_LIMITS = {
    "tenant_limits.key_requests_per_minute": 1_000_000,
    "tenant_limits.requests_per_minute": 1_000_000,
    "tenant_limits.turns_per_minute": 20,
}
# Every check schemathesis has (`--checks all`). Those that need what this test does not do
# pass as they are: `missing_required_header` and `unsupported_method` judge the coverage phase's
# requests, `use_after_free` and `ensure_resource_availability` a stateful run's.
_CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
    checks.positive_data_acceptance,
    checks.missing_required_header,
    checks.unsupported_method,
    checks.allow_header_conformance,
    checks.use_after_free,
    checks.ensure_resource_availability,
    checks.ignored_auth,
    checks.object_level_authorization,
]
# `positive_data_acceptance` (a schema-valid request gets a 2xx, or a 401/403/404/409/429) is left
# out where the server checks what JSON Schema cannot say, so a schema-valid body can be a right
# 422; every other check still judges these operations, and the 422 is documented.
_CROSS_FIELD = {
    ("/v1/usage", "get"): "from must be before to, at most 366 days apart (by default to is the end of today)",
    ("/v1/agents", "post"): "approval_required names tools of the agent; a stdio MCP server needs a command",
    ("/v1/collections", "post"): "chunk_overlap must be below chunk_tokens",
    ("/v1/schedules", "post"): "exactly one of cron and every_s; a cron croniter takes, a known zone, an agent to run",
    ("/v1/chat/completions", "post"): "the last message is a user's (or a tool's), with text; tools go with no agent",
    ("/v1/responses", "post"): "input holds text and ends with a user's message",
    ("/v1/collections/{name}/documents", "post"): "exactly one of content and content_base64, valid base64",
    ("/v1/runs/{run_id}/fork", "post"): "at_seq a finished step of that run; an edit that fits that step's kind",
    (
        "/v1/admin/tenants/{tenant_id}/issuers",
        "put",
    ): "asymmetric algorithms only; the issuer's and JWKS URLs pass the outbound (SSRF) rules; no provider twice",
    (
        "/v1/sessions/{session_id}/turns/{turn_id}/events",
        "get",
    ): "a Last-Event-ID `<turn_id>:<seq>` names the path's turn",
}


class _ServerThread:
    """The server and the mock provider, in an event loop on a thread of their own."""

    def __init__(self, data_dir: Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fuzz-server", daemon=True)
        self._thread.start()
        self._closers: list[Any] = []
        self.url: str = self._run(self._start(data_dir))
        # The path parameters' "existing" tenant and key are a victim's: the fuzzer may disable or
        # revoke them, and must not lock itself out.
        self.admin: TenantKey = self._run(create_tenant_key(self.url, _TOKEN, tenant_id="fuzz-admin", scopes=["admin"]))
        self.tenant: TenantKey = self._run(create_tenant_key(self.url, _TOKEN, tenant_id="fuzz-tenant"))
        self.victim: TenantKey = self._run(create_tenant_key(self.url, _TOKEN, tenant_id="fuzz-victim"))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _start(self, data_dir: Path) -> str:
        mock = await start_mock(MockSettings(ttft_ms=1, tps=5000, tokens=4))
        self._closers.append(mock.close)
        # The console's stream ends after server.console_stream_s: short here, so reading it is no hang.
        overrides = {"server.api_token": _TOKEN, "server.access_log": True, "server.console_stream_s": 0.05, **_LIMITS}
        server = await start_server(make_settings(data_dir, mock.url, **overrides))
        self._closers.insert(0, server.close)
        return server.url

    def close(self) -> None:
        for close in self._closers:
            self._run(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ServerThread]:
    server = _ServerThread(tmp_path_factory.mktemp("fuzz") / "data")
    yield server
    server.close()


def _auth(server: _ServerThread) -> dict[str, str]:
    return server.admin.headers


def _post(server: _ServerThread, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = requests.post(f"{server.url}{path}", json=body, headers=_auth(server), timeout=_CALL_TIMEOUT_S)
    assert response.ok, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.fixture(scope="module")
def finished_run(fuzz_server: _ServerThread) -> str:
    _post(fuzz_server, "/v1/agents", {"name": "fuzz", "tools": []})
    run_id: str = _post(fuzz_server, "/v1/agents/fuzz/runs", {"input": "hello"})["run_id"]
    url = f"{fuzz_server.url}/v1/runs/{run_id}/events"
    events = requests.get(url, headers=_auth(fuzz_server), timeout=_CALL_TIMEOUT_S)
    assert "run.completed" in events.text  # the stream ends with the run: reading it cannot hang
    return run_id


@pytest.fixture(scope="module")
def finished_turn(fuzz_server: _ServerThread) -> tuple[str, str]:
    """A session and a turn of it that ended, made once: a turn per test would reach the tenant's
    turns per minute (`_LIMITS`)."""
    session_id = str(_post(fuzz_server, "/v1/sessions", {})["id"])
    url = f"{fuzz_server.url}/v1/sessions/{session_id}/turns"
    headers = _auth(fuzz_server) | {"Accept": "application/json"}
    answer = requests.post(url, json={"input": "hi"}, headers=headers, timeout=_CALL_TIMEOUT_S)
    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    return session_id, str(answer.json()["turn_id"])


@pytest.fixture
def existing(
    fuzz_server: _ServerThread, finished_run: str, finished_turn: tuple[str, str], request: pytest.FixtureRequest
) -> Iterator[dict[str, str]]:
    """Path parameters that name things that exist (a session, an agent, a finished run, a
    trigger and one of its deliveries, a collection and a document, a response), so that half the cases get
    past the 404 into the handlers' real work. The session and the trigger are new for each test
    (DELETE deletes them); the trigger and the knowledge only for the operations under their
    paths (a delivery starts a run and a document is indexed: not for every test)."""
    callspec = getattr(request.node, "callspec", None)  # the other tests here name no operation
    path = str(callspec.params.get("path", "")) if callspec is not None else ""
    victim = fuzz_server.victim
    known = {
        "session_id": _post(fuzz_server, "/v1/sessions", {})["id"],
        "name": "fuzz",  # an agent, and a collection of both keys' tenants
        "run_id": finished_run,
        "asset": "swagger-ui.css",
        "tenant_id": victim.tenant_id,
        "key_id": victim.key_id,
    }
    if "{turn_id}" in path:  # a turn that ended: an unknown id's 404 waits ~1.5 s for another node's
        known["session_id"], known["turn_id"] = finished_turn
    trigger = None
    if path.startswith("/v1/triggers/"):
        trigger = _post(fuzz_server, "/v1/triggers", {"agent": "fuzz"})
        _deliver(fuzz_server, trigger, "fuzz-1")
        known |= {"trigger_id": trigger["trigger_id"], "webhook_id": "fuzz-1"}
    schedule = None
    if path.startswith("/v1/schedules/"):  # paused: it starts no runs while the cases run
        schedule = _post(fuzz_server, "/v1/schedules", {"agent": "fuzz", "input": "x", "every_s": 3600, "paused": True})
        known["schedule_id"] = schedule["schedule_id"]
    if path.startswith("/v1/collections"):
        known["document_id"] = _knowledge(fuzz_server)
    if path.startswith("/v1/responses/"):  # a response of the admin's tenant (the tenant key's is a 404)
        known["response_id"] = _post(fuzz_server, "/v1/responses", {"model": "mock-1", "input": "hi"})["id"]
    yield known
    if trigger is not None:  # triggers.max_triggers is per tenant: one per test would reach it
        url = f"{fuzz_server.url}/v1/triggers/{trigger['trigger_id']}"
        requests.delete(url, headers=_auth(fuzz_server), timeout=10)
    if schedule is not None:  # schedules.max_schedules is per tenant too
        url = f"{fuzz_server.url}/v1/schedules/{schedule['schedule_id']}"
        requests.delete(url, headers=_auth(fuzz_server), timeout=10)


def _deliver(server: _ServerThread, trigger: dict[str, Any], webhook_id: str) -> None:
    """A signed delivery (the trigger's sender), so a delivery exists to be read."""
    body, now = b'{"fuzz": 1}', int(time.time())
    signature = sign(decode_secret(trigger["secret"]), webhook_id, now, body)
    headers = {"webhook-id": webhook_id, "webhook-timestamp": str(now), "webhook-signature": signature}
    url = f"{server.url}/v1/triggers/{trigger['trigger_id']}/events"
    assert requests.post(url, data=body, headers=headers, timeout=_CALL_TIMEOUT_S).status_code == 202


def _knowledge(server: _ServerThread) -> str:
    """The collection `fuzz` of both keys' tenants (again: the fuzzer may delete it), and a
    document in the admin's."""
    body: dict[str, Any] = {"name": "fuzz", "embedding_model": "mock-embed", "dimensions": 8}
    for key in (server.admin, server.tenant):
        made = requests.post(f"{server.url}/v1/collections", json=body, headers=key.headers, timeout=_CALL_TIMEOUT_S)
        assert made.status_code in (201, 409), made.text
    document = {"content": "fuzzing notes", "content_type": "text/plain"}
    return str(_post(server, "/v1/collections/fuzz/documents", document)["document_id"])


@pytest.fixture(scope="module")
def served_schema(fuzz_server: _ServerThread) -> Any:
    """The document as the server serves it (not the module's dict): what a client sees.

    Strings are generated without NUL: no text field takes one (422, `agentos.json_limits`; no
    store takes it either), which JSON Schema has no short way to say on every string."""
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json", timeout=_CALL_TIMEOUT_S)
    schema.config.generation.update(allow_x00=False)
    return schema


def _operations() -> list[Any]:
    """Every (path, method) of the document, one test each, except those a request/response
    fuzzer cannot call; each exception says why."""
    skipped = {
        # The upgrade is not request/response: tests/api/test_websocket.py covers the socket's
        # frames, and test_websocket_without_upgrade_is_a_documented_error the plain GET.
        ("/v1/sessions/{session_id}/ws", "get"): "WebSocket upgrade",
    }
    params = []
    for path, item in OPENAPI["paths"].items():
        for method in sorted(item.keys() - {"parameters"}):
            operation = item[method]
            reason = skipped.get((path, method))
            for mode in GenerationMode:
                marks = [pytest.mark.skip(reason=reason)] if reason else []
                if (
                    mode is GenerationMode.NEGATIVE
                    and operation.get("security") == []
                    and "requestBody" not in operation
                ):
                    # An open route with no body and only free-text parameters: no request breaks its
                    # document, so schemathesis has no negative case to make (Unsatisfiable).
                    marks = [pytest.mark.skip(reason="nothing to negate")]
                for who in ("admin", "tenant"):
                    name = f"{method.upper()} {path} {mode} {who}"
                    params.append(pytest.param(path, method, mode, who, marks=marks, id=name))
    return params


@pytest.mark.slow
@pytest.mark.parametrize(("path", "method", "mode", "who"), _operations())
def test_every_operation_conforms(
    served_schema: Any,
    fuzz_server: _ServerThread,
    existing: dict[str, str],
    path: str,
    method: str,
    mode: GenerationMode,
    who: str,
) -> None:
    """Valid requests (POSITIVE) and requests that break the document (NEGATIVE) alike, with an
    admin key and with a tenant key (fewer cases: most of its answers are the same 403s)."""
    operation = served_schema[path][method]
    key: TenantKey = getattr(fuzz_server, who)
    excluded = [checks.positive_data_acceptance] if (path, method) in _CROSS_FIELD else []

    @given(case=operation.as_strategy(generation_mode=mode), real=st.booleans(), accept=st.sampled_from(_ACCEPTS))
    @settings(
        max_examples=_EXAMPLES if who == "admin" else _TENANT_EXAMPLES,
        derandomize=True,  # the same cases every CI run
        deadline=None,  # a hang is caught per call (_CALL_TIMEOUT_S), not per example
        suppress_health_check=list(HealthCheck),
        database=None,  # no .hypothesis directory; derandomize replays the same cases anyway
    )
    def call(case: Any, real: bool, accept: str) -> None:
        if real:
            case.path_parameters = {k: existing.get(k, v) for k, v in case.path_parameters.items()}
        # The key goes into the case itself, in place of the one schemathesis made up (or left out):
        # the checks judge the request from the case, and this is the request sent. Named to
        # validate_response too, so `ignored_auth` knows it for a real key and tries the call
        # again without it and with a wrong one.
        ours = key.headers | ({"Accept": accept} if accept else {})
        mine = {name.lower() for name in ours}
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() not in mine} | ours
        response = case.call(base_url=fuzz_server.url, timeout=_CALL_TIMEOUT_S)
        case.validate_response(
            response, checks=_CHECKS, excluded_checks=excluded + _moot(case, response), headers=key.headers
        )

    call()


def _moot(case: Any, response: requests.Response) -> list[Any]:
    """Checks whose premise this one call breaks, and why."""
    moot = []
    if response.status_code == 406:
        # The Accept this test adds is no parameter a document can describe (OpenAPI ignores an
        # Accept header parameter): a 406 for one the operation cannot answer refuses no valid
        # request. status_code_conformance still wants the 406 documented.
        moot.append(checks.positive_data_acceptance)
    if response.status_code == 402:
        # A spending budget (here: a run's max_cost, which no unpriced model can be held by) refuses
        # by the server's state, the spend and the prices, not by the request's shape: like a
        # 403 quota, a right answer to a valid request. status_code_conformance wants it documented.
        moot.append(checks.positive_data_acceptance)
    if case.meta.generation.mode is GenerationMode.NEGATIVE and case.media_type not in (None, "application/json"):
        # A raw body (a document upload's text) is its bytes: a "non-string" schemathesis makes of
        # it is sent as its text, which is a valid document.
        moot.append(checks.negative_data_rejection)
    return moot


def test_websocket_without_upgrade_is_a_documented_error(fuzz_server: _ServerThread) -> None:
    """The one operation the fuzzer skips, called the way a plain HTTP client would."""
    url = f"{fuzz_server.url}/v1/sessions/nope/ws"
    response = requests.get(url, headers=_auth(fuzz_server), timeout=_CALL_TIMEOUT_S)
    assert response.status_code == 404
    assert set(response.json()["error"]) == {"code", "message"}


# What the fuzzer found, one focused test each (each failed on the document before the fix).


def test_every_operation_that_asks_for_the_token_documents_its_401() -> None:
    """Found: every authenticated operation answered an undocumented 401 without the token."""
    for path, item in OPENAPI["paths"].items():
        for method, operation in item.items():
            if method == "parameters" or operation.get("security") == []:
                continue
            # OpenAI's error shape on its routes (agentos.api.openai_errors), ours elsewhere
            name = "OpenAIError" if path.startswith(("/v1/models", "/v1/chat/", "/v1/responses")) else "Error"
            for status in ("401", "403"):  # 403: a key without the operation's scope
                assert operation["responses"][status]["content"]["application/json"]["schema"] == {
                    "$ref": f"#/components/schemas/{name}"
                }, f"{method} {path}"
            assert operation["security"] == [{"bearer": []}], f"{method} {path}"
    assert OPENAPI["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_an_integer_cursor_documents_the_largest_value_the_server_takes(fuzz_server: _ServerThread) -> None:
    """Found: `after` was documented without a maximum, and a valid-looking huge cursor got a 422."""
    item = OPENAPI["paths"]["/v1/sessions/{session_id}/events"]
    documented = [*item.get("parameters", ()), *item["get"].get("parameters", ())]
    maximum = next(p["schema"]["maximum"] for p in documented if p["name"] == "after")
    auth = _auth(fuzz_server)
    session = requests.post(f"{fuzz_server.url}/v1/sessions", json={}, headers=auth, timeout=_CALL_TIMEOUT_S).json()
    url = f"{fuzz_server.url}/v1/sessions/{session['id']}/events"
    assert requests.get(url, params={"after": maximum}, headers=auth, timeout=_CALL_TIMEOUT_S).status_code == 200
    over = requests.get(url, params={"after": maximum + 1}, headers=auth, timeout=_CALL_TIMEOUT_S)
    assert over.status_code == 422 and over.json()["error"]["code"] == "invalid_input"


@pytest.mark.parametrize("name", ["", "-x", "_x", "a b", "x" * 65, "ops", "A-1_b", "x" * 64])
def test_the_documented_agent_name_pattern_is_what_the_parser_checks(name: str) -> None:
    """Found: the agent name was documented as any string; the server takes only this pattern."""
    pattern = OPENAPI["components"]["schemas"]["AgentSpec"]["properties"]["name"]["pattern"]
    try:
        parse_agent_spec({"name": name})
        accepted = True
    except InvalidInput:
        accepted = False
    assert (re.fullmatch(pattern, name) is not None) == accepted


@pytest.mark.parametrize(
    "resume",
    [
        {"headers": {"Last-Event-ID": str(2**80)}},
        {"params": {"after": str(2**80)}},
        # Found with all checks: these were read as "from the start" (200), not refused.
        {"headers": {"Last-Event-ID": ""}},
        {"params": [("after", "1"), ("after", "2")]},
        {"headers": {"Last-Event-ID": "1"}, "params": {"after": str(2**80)}},
    ],
)
@pytest.mark.parametrize("stream", ["run", "turn"])
def test_a_resume_point_past_any_seq_is_a_400_not_a_failed_stream(
    fuzz_server: _ServerThread,
    existing: dict[str, str],
    finished_turn: tuple[str, str],
    resume: dict[str, Any],
    stream: str,
) -> None:
    """Found: a Last-Event-ID over SQLite's 64-bit integer opened the stream, then failed it with
    an `error` event (internal_error, a logged exception) instead of refusing the request. A
    turn's stream took the first of two `after`s (found once the fuzzer named a real turn)."""
    url = f"{fuzz_server.url}/v1/runs/{existing['run_id']}/events"
    if stream == "turn":
        session_id, turn_id = finished_turn
        url = f"{fuzz_server.url}/v1/sessions/{session_id}/turns/{turn_id}/events"
    headers = _auth(fuzz_server) | resume.get("headers", {})
    response = requests.get(url, headers=headers, params=resume.get("params"), timeout=_CALL_TIMEOUT_S)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_request"


@pytest.mark.parametrize(("value", "status"), [(60.0, 201), (6e1, 201), (60.5, 422), ("60", 422)])
def test_a_number_without_a_fraction_is_an_integer(fuzz_server: _ServerThread, value: Any, status: int) -> None:
    """Found by positive_data_acceptance: JSON Schema's integer 60.0 (so the document's) was a 422."""
    body = {"tenant_id": fuzz_server.victim.tenant_id, "expires_in_s": value}
    made = requests.post(f"{fuzz_server.url}/v1/admin/keys", json=body, headers=_auth(fuzz_server), timeout=10)
    assert made.status_code == status, made.text
    if status == 201:
        assert made.json()["expires_ms"] - made.json()["created_ms"] == 60_000


def test_a_session_of_an_unknown_agent_is_a_404(fuzz_server: _ServerThread) -> None:
    """Found by positive_data_acceptance: a well-formed agent name that names no agent was a 422;
    it is `agent_not_found`, as for a run or a trigger."""
    url = f"{fuzz_server.url}/v1/sessions"
    made = requests.post(url, json={"agent": "nobody"}, headers=_auth(fuzz_server), timeout=_CALL_TIMEOUT_S)
    assert made.status_code == 404 and made.json()["error"]["code"] == "agent_not_found"
