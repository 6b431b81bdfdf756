"""An OTLP/HTTP trace receiver for the tracing cost pair (docs/benchmarking.md, "Tracing").

    python bench/scripts/otlp_sink.py --port 4318 &
    agentos bench sweep --profile full-store,bench/profiles/full-store-traced.toml --sweep 1000 ...
    curl -s 127.0.0.1:4318/stats    # requests, spans and bytes received

It does what a collector's receiver does with each export: reads the body, decodes the
protobuf and counts the spans, then answers the empty ExportTraceServiceResponse. It stores
nothing: the cost measured is the server's, exporting to a live endpoint on the same machine.
"""

from __future__ import annotations

import argparse

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

STATS = {"requests": 0, "spans": 0, "bytes": 0}


async def traces(request: web.Request) -> web.Response:
    body = await request.read()
    message = ExportTraceServiceRequest()
    message.ParseFromString(body)
    STATS["requests"] += 1
    STATS["bytes"] += len(body)
    STATS["spans"] += sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
    return web.Response(body=b"", content_type="application/x-protobuf")


async def stats(_: web.Request) -> web.Response:
    return web.json_response(STATS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args()
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/stats", stats)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
