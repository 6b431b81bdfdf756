"""The rate-limit and quota answers in the OpenAPI document, added to every operation that can
give them (the handlers and `agentos.api.ratelimit` are the truth; tests/api/test_limits.py and
the schemathesis fuzz check the document against real answers).

Every operation that asks for the token is rate limited (429 `key_rate_limited` or
`tenant_rate_limited`), and every one of its answers may carry `RateLimit` and
`RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-10) once a limit is configured. Turns
and runs add their own 429 codes and the tokens-per-day quota (403); creating a session adds
the sessions quota (403).
"""

from __future__ import annotations

from typing import Any

_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}

RETRY_AFTER = {
    "description": "Seconds to wait before trying again (RFC 9110); at least 1",
    "schema": {"type": "integer", "minimum": 1},
}
RATE_HEADERS = {
    "RateLimit-Policy": {
        "description": (
            'The caller\'s request limits, a Structured Field list: `"key";q=100;w=60, "tenant";q=1000;w=60`'
            " (q requests per w seconds, burst q); only when a limit is configured"
        ),
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": (
            'What is left of each policy now: `"key";r=99;t=1` (r requests left, t seconds until one more)'
        ),
        "schema": {"type": "string"},
    },
}

_REQUEST_CODES = "`key_rate_limited` (the key's requests per minute) or `tenant_rate_limited` (all its keys')"
# The operations that start work, with what they add to the 429 and the 403 they may answer.
_STARTS: dict[tuple[str, str], tuple[str, str]] = {
    ("/v1/sessions/{session_id}/turns", "post"): (
        "`turn_rate_limited` (turns per minute), `overloaded` (the server's admission limit)",
        "`quota_tokens_per_day`: the tenant's provider tokens for the UTC day are spent (Retry-After: until 00:00 UTC)",
    ),
    ("/v1/agents/{name}/runs", "post"): (
        "`run_rate_limited` (runs per minute)",
        "`quota_tokens_per_day`: the tenant's provider tokens for the UTC day are spent (Retry-After: until 00:00 UTC)",
    ),
    ("/v1/sessions", "post"): ("", "`quota_sessions`: the tenant holds `max_sessions` sessions; delete some"),
    # The OpenAI front door starts a turn, in a new session unless the request names one.
    **dict.fromkeys(
        [("/v1/chat/completions", "post"), ("/v1/responses", "post")],
        (
            "`turn_rate_limited` (turns per minute), `overloaded` (the server's admission limit),"
            " `tenant_concurrent_turns`",
            "`quota_tokens_per_day` (the tenant's provider tokens for the UTC day are spent), or `quota_sessions`"
            " (a new conversation needs a session, and the tenant holds `max_sessions`)",
        ),
    ),
}


def retry_error(description: str) -> dict[str, Any]:
    """An error answer that says when to retry."""
    return {"description": description, "content": _ERROR, "headers": {"Retry-After": RETRY_AFTER}}


def limited(paths: dict[str, Any]) -> dict[str, Any]:
    """Document the rate-limit headers and the 429/403 of limits and quotas; see the docstring."""
    for path, item in paths.items():
        for method, operation in item.items():
            if method == "parameters" or operation.get("security") == []:
                continue
            more_429, quota_403 = _STARTS.get((path, method), ("", ""))
            codes = _REQUEST_CODES + (f"; {more_429}" if more_429 else "")
            operation["responses"]["429"] = retry_error(f"Over a rate limit: {codes}")
            if quota_403:
                _add_403(operation["responses"], quota_403)
            for answer in operation["responses"].values():
                answer["headers"] = {**answer.get("headers", {}), **RATE_HEADERS}
    return paths


def _add_403(responses: dict[str, Any], quota: str) -> None:
    old = responses.get("403")
    description = f"{old['description']}; or {quota}" if old else f"A quota is used up: {quota}"
    responses["403"] = retry_error(description)
