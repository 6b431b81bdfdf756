"""The `[telemetry]` group: traces over OTLP (docs/observability.md).

Off by default, and off costs nothing: no OpenTelemetry module is imported. The standard `OTEL_*`
variables work as well (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER_ARG`,
`OTEL_SDK_DISABLED`); a value set here wins over them.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

import msgspec

Ratio = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
QueueSize = Annotated[int, msgspec.Meta(ge=16, le=1_000_000)]


class TelemetryConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Attributes:
    enabled: send traces; unset: on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
        `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`).
    endpoint: the OTLP/HTTP traces endpoint (`http://collector:4318/v1/traces`); empty: the
        `OTEL_EXPORTER_OTLP_*` variables', else `http://127.0.0.1:4318/v1/traces`.
    service_name: `service.name` of every span; empty: `OTEL_SERVICE_NAME`, else `agentos`.
    sample_ratio: the share of new traces recorded (parent-based: a request whose caller sampled
        its trace is recorded whatever this says; one whose caller did not, is not).
    accept_traceparent: whose W3C `traceparent`/`tracestate` continue their trace here:
        `any_key` (every authenticated caller), `admin` (admin keys only), `none`.
    capture_content: tenants whose prompts and completions are recorded in spans (`*`: all);
        never by default: content is the tenant's data.
    content_max_chars: the most characters of content one attribute carries.
    max_queue: spans waiting for export; past it new spans are dropped and counted.
    batch_size, export_interval_s, export_timeout_s: how the background exporter sends.
    trace_url_template: a link to one trace in the operator's backend, `{trace_id}` in it
        (`https://grafana.example/explore?traceId={trace_id}`); shown by the console.
    log_format: `text`, or `json` (one object per line with `trace_id` and `span_id`).
    """

    enabled: bool | None = None  # None: on when an OTLP endpoint variable is set
    endpoint: str = ""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    service_name: str = ""
    sample_ratio: Ratio = 1.0
    accept_traceparent: Literal["any_key", "admin", "none"] = "any_key"
    capture_content: list[str] = msgspec.field(default_factory=list)
    content_max_chars: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 2000
    max_queue: QueueSize = 8192
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 512
    export_interval_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 1.0
    export_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 10.0
    trace_url_template: str = ""
    # A turn's answer commit (the store write its client waits on) gets a span when it takes this
    # long or longer; 0: always. Most take a millisecond: a span each would be most of the cost.
    slow_commit_ms: Annotated[float, msgspec.Meta(ge=0, le=60_000)] = 10.0
    log_format: Literal["text", "json"] = "text"


def tracing_wanted(config: TelemetryConfig, environ: dict[str, str] | None = None) -> bool:
    """Is tracing on, by the config and the standard variables?"""
    if config.enabled is not None:
        return config.enabled
    env = environ if environ is not None else dict(os.environ)
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def traces_endpoint(config: TelemetryConfig, environ: dict[str, str] | None = None) -> str:
    """Where spans go: the config's endpoint, else the standard variables', else the local default."""
    env = environ if environ is not None else dict(os.environ)
    if config.endpoint:
        return config.endpoint
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    return "http://127.0.0.1:4318/v1/traces"
