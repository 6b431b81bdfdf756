"""Every route of the API has its client method (`AsyncClient`, and `Client` by construction;
`AdminClient` for the admin API), or a reason why a client program does not call it: a new
route fails here until one of the two is written. Each method's calls are tested against the
real server in the other files of tests/client/."""

from __future__ import annotations

from agentos.api.app import ROUTES
from agentos.api.openapi import table_routes
from agentos.client import AdminClient, AsyncClient, Client

CALLED_BY: dict[tuple[str, str], str] = {
    ("post", "/v1/sessions"): "create_session",
    ("get", "/v1/sessions"): "list_sessions",
    ("get", "/v1/sessions/{session_id}"): "get_session",
    ("delete", "/v1/sessions/{session_id}"): "delete_session",
    ("get", "/v1/sessions/{session_id}/messages"): "messages",
    ("get", "/v1/sessions/{session_id}/events"): "events",
    ("post", "/v1/sessions/{session_id}/turns"): "send_turn",  # and stream_turn
    ("get", "/v1/sessions/{session_id}/turns/{turn_id}/events"): "follow_turn",
    ("delete", "/v1/sessions/{session_id}/turn"): "cancel_turn",
    ("delete", "/v1/sessions/{session_id}/turns/{turn_id}"): "cancel_turn_by_id",
    ("post", "/v1/agents"): "create_agent",
    ("get", "/v1/agents"): "list_agents",
    ("get", "/v1/agents/{name}"): "get_agent",
    ("post", "/v1/agents/{name}/runs"): "start_run",
    ("get", "/v1/runs"): "list_runs",
    ("get", "/v1/runs/{run_id}"): "get_run",
    ("get", "/v1/runs/{run_id}/events"): "run_events",
    ("post", "/v1/runs/{run_id}/answer"): "answer",
    ("post", "/v1/runs/{run_id}/cancel"): "cancel_run",
    ("post", "/v1/runs/{run_id}/terminate"): "terminate_run",
    ("post", "/v1/runs/{run_id}/fork"): "fork_run",
    ("post", "/v1/runs/{run_id}/steer"): "steer_run",
    ("post", "/v1/tokens"): "create_browser_token",
    ("post", "/v1/collections"): "create_collection",
    ("get", "/v1/collections"): "list_collections",
    ("get", "/v1/collections/{name}"): "get_collection",
    ("delete", "/v1/collections/{name}"): "delete_collection",
    ("post", "/v1/collections/{name}/documents"): "add_document",
    ("get", "/v1/collections/{name}/documents"): "list_documents",
    ("get", "/v1/collections/{name}/documents/{document_id}"): "get_document",
    ("delete", "/v1/collections/{name}/documents/{document_id}"): "delete_document",
    ("post", "/v1/collections/{name}/query"): "query",
    ("post", "/v1/triggers"): "create_trigger",
    ("get", "/v1/triggers"): "list_triggers",
    ("get", "/v1/triggers/{trigger_id}"): "get_trigger",
    ("delete", "/v1/triggers/{trigger_id}"): "delete_trigger",
    ("post", "/v1/triggers/{trigger_id}/rotate"): "rotate_trigger_secret",
    ("get", "/v1/triggers/{trigger_id}/deliveries"): "list_deliveries",
    ("get", "/v1/triggers/{trigger_id}/deliveries/{webhook_id}"): "get_delivery",
    ("post", "/v1/triggers/{trigger_id}/deliveries/{webhook_id}/retry"): "retry_delivery",
    ("post", "/v1/schedules"): "create_schedule",
    ("get", "/v1/schedules"): "list_schedules",
    ("get", "/v1/schedules/{schedule_id}"): "get_schedule",
    ("delete", "/v1/schedules/{schedule_id}"): "delete_schedule",
    ("post", "/v1/schedules/{schedule_id}/pause"): "pause_schedule",
    ("post", "/v1/schedules/{schedule_id}/resume"): "resume_schedule",
}
ADMIN_CALLED_BY: dict[tuple[str, str], str] = {
    ("post", "/v1/admin/tenants"): "create_tenant",
    ("get", "/v1/admin/tenants"): "list_tenants",
    ("get", "/v1/admin/tenants/{tenant_id}"): "get_tenant",
    ("patch", "/v1/admin/tenants/{tenant_id}"): "update_tenant",
    ("get", "/v1/admin/tenants/{tenant_id}/issuers"): "get_issuers",
    ("put", "/v1/admin/tenants/{tenant_id}/issuers"): "set_issuers",
    ("delete", "/v1/admin/tenants/{tenant_id}/issuers"): "delete_issuers",
    ("post", "/v1/admin/keys"): "create_key",
    ("get", "/v1/admin/keys"): "list_keys",
    ("get", "/v1/admin/keys/{key_id}"): "get_key",
    ("patch", "/v1/admin/keys/{key_id}"): "update_key",
    ("post", "/v1/admin/keys/{key_id}/revoke"): "revoke_key",
    ("delete", "/v1/admin/keys/{key_id}"): "revoke_key",  # the same operation
    ("get", "/v1/usage"): "usage",
    ("get", "/v1/admin/memory"): "memory",
}
NOT_A_CLIENT_CALL: dict[tuple[str, str], str] = {
    ("post", "/v1/chat/completions"): "the OpenAI-compatible door: OpenAI's own SDK calls it (docs/openai.md)",
    ("post", "/v1/responses"): "the OpenAI-compatible door",
    ("get", "/v1/responses/{response_id}"): "the OpenAI-compatible door",
    ("get", "/v1/models"): "the OpenAI-compatible door",
    ("post", "/v1/triggers/{trigger_id}/events"): "the webhook's sender posts, signed with its secret",
    ("get", "/v1/sessions/{session_id}/ws"): "the WebSocket, for browsers; the client streams over SSE",
    ("post", "/v1/tokens/cookie"): "a browser page trades its token for a cookie",
    ("get", "/.well-known/jwks.json"): "public keys, for whoever verifies a browser token",
    ("get", "/v1/console/me"): "the web console's own",
    ("get", "/v1/console/metrics"): "the web console's own",
    ("get", "/v1/console/stream"): "the web console's own",
    ("get", "/console"): "the web console's page",
    ("get", "/console/{asset}"): "the web console's page",
    ("get", "/docs"): "the API's browsable page",
    ("get", "/docs/{asset}"): "the API's browsable page",
    ("get", "/openapi.json"): "the API's document",
    ("get", "/healthz"): "for load balancers and orchestrators",
    ("get", "/readyz"): "for load balancers and orchestrators",
    ("get", "/metrics"): "for Prometheus",
}


def test_every_route_has_a_client_method_or_a_reason() -> None:
    served = {(method, path) for method, path, _ in table_routes(ROUTES)}
    accounted = CALLED_BY.keys() | ADMIN_CALLED_BY.keys() | NOT_A_CLIENT_CALL.keys()
    assert served - accounted == set(), "a route with no client method (and no reason)"
    assert accounted - served == set(), "a route listed here that the server no longer serves"


def test_each_method_named_exists_on_both_clients() -> None:
    for name in CALLED_BY.values():
        assert callable(getattr(AsyncClient, name)) and callable(getattr(Client, name)), name
    for name in ADMIN_CALLED_BY.values():
        assert callable(getattr(AdminClient, name)), name
    assert callable(Client.stream_turn) and callable(Client.follow_turn) and callable(Client.run_events)
