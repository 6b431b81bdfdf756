"""`agentos bench auth-cost`: what key lookup and rate limiting cost the server per request.

Method (`agentos_bench.authcost.bench`). The real server (`agentos serve`, built-in mock, SQLite
store in a temporary data dir, 127.0.0.1, a free port) runs in two configurations:

    A  open loopback mode: no token, no keys; every request is the open principal (no limits).
    B  `tenants` tenants with `keys_per_tenant` keys each, made through the admin API with the
       admin token (AGENTOS_API_TOKEN); `[tenant_limits]` request and key rates so high that
       nothing is ever refused, so the limiter decides (and answers RateLimit headers) on every
       request.

Each configuration gets one session per target (per key in B), made once through the API. Then
the rounds alternate A, B, A, B, ...: each round starts a fresh server on its data dir, starts a
client process (`agentos_bench.authcost.client`) that warms up, and measures the server's
process tree's CPU seconds (procfs) across exactly `requests` requests of
`GET /v1/sessions/{id}` (tenant-filtered: the store reads it `WHERE session_id = ? AND
tenant_id = ?`), `concurrency` keep-alive connections, each request with the next target's key.
The report gives per round CPU ms per request and the client's requests/s, the medians of A and
B, and B - A: what the keys and the limiter add. Tenant filtering runs in both configurations
(the open principal is tenant "default"), so B - A does not contain it; the microbench times it
apart (`agentos_bench.micro.auth`), with the added middleware path alone, in process.
"""
