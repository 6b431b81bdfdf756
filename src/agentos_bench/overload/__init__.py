"""`agentos bench overload`: what a refused turn costs, measured on a server 3x over its gate.

Method (`agentos_bench.overload.bench`). One machine, 127.0.0.1 only: the mock LLM (a slow
provider: `ttft_ms`, then `tokens` at `tps`), the server (`agentos serve`, SQLite store, access
log on, `kernel.max_in_flight_turns = max_in_flight`, permits never the limit) and this process.

1. The load: `offered` workers (3x the gate by default), each on its own session and keep-alive
   connection, post turns (JSON answers) in a loop. The gate admits `max_in_flight`; the others
   are answered 429 and try again after `retry_pause_ms` (by default the Retry-After, 1 s: about
   200 refusals a second on keep-alive connections). An admitted turn waits `ttft_ms` (30 s by
   default) for its first token, longer than the warm-up and the probe window together (21.5 s):
   for the whole window the server holds `max_in_flight` turns open on the slow provider,
   refuses a steady stream of the rest, has no free slot a probe could take, and streams
   nothing, so its CPU in the window is the probes' and the refusals' alone.
2. The probes, once the gate is full: a separate process (`agentos_bench.overload.probe`, so
   its timings see no load-client loop) sends `probes` turn POSTs to a session of their own,
   each on a **fresh connection** (connect, one request with `Connection: close`, the whole
   answer), every `probe_interval_ms`, alternating with as many `GET /healthz` on fresh
   connections: the floor (connect, parse, the loop's lag, answer) measured in the same
   moments. The turn probes must all be 429 with `Retry-After` and the JSON error body.

The report gives the 429 latency (p50 / p90 / p99 / max), the /healthz floor beside it, what the
load's turns did (completed, refused, failed) and the server's CPU during the probe window per
request it answered then (CPU time counts only while the server runs: on a shared machine a
steadier figure than latency).
Everything is bounded: the window by the probes' count and interval, each request by a timeout,
the end of the load by a grace period after which its workers are cancelled.
"""
