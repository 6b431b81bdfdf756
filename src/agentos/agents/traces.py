"""A run's trace (docs/observability.md, "Runs").

A run is a trace of its own, whose ids are a function of its run id (`derived_ids`): every
node that drives it, before or after a crash, names the same spans the same way, so a run
resumed after `kill -9`, or taken over by another node, goes on in the same trace with nothing
stored but what the journal already holds (the run id, each step's seq and attempts).

    invoke_agent {agent}      the root, ids (run), recorded when the run ends (start: its
      |                       creation); linked to the request (or parent step) that started it
      +- chat {model}         each model step, span id (run, seq, attempt)
      +- execute_tool {name}  each tool step, span id (run, seq, attempt); sandbox and MCP inside
      |    +- (a child run: its own trace, linked both ways with this step)
      +- human_wait {kind}    asked -> answered, recorded at the answer (span id (run, seq, "wait"))

A step taken again after a crash (attempt n > 1) links to attempt n - 1: the span that died.
The span that submits a run (its request's, or a parent run's `execute_tool delegate`) gets a
link to the run's root; a child run's root links to its parent's. Why not nest a run in its
request's trace: a run outlives the request by minutes or days (human waits) and crosses nodes;
a trace per run keeps it whole, and the links lead from one trace to the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentos.journal.journal import RunRow
from agentos.providers.base import TraceSpec
from agentos.telemetry import NULL_SPAN, Span, Tracing, derived_ids


class RunTraces:
    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    @property
    def on(self) -> bool:
        return self.tracing.on

    def root(self, run_id: str) -> str:
        """The traceparent of the run's root span."""
        trace_id, span_id = derived_ids(run_id)
        return self.tracing.traceparent(trace_id, span_id)

    def view(self, run_id: str) -> dict[str, str]:
        """What a run's view (GET /v1/runs/{run_id}) says of its trace: nothing when tracing is
        off; `trace_id` when on; and `trace_url`, the operator's backend's page of that trace
        (`[telemetry] trace_url_template`), when one is configured and the trace is sampled."""
        if not self.on:
            return {}
        trace_id, _ = derived_ids(run_id)
        template = self.tracing.trace_url_template
        if template and self.root(run_id).endswith("-01"):
            return {"trace_id": trace_id, "trace_url": template.replace("{trace_id}", trace_id)}
        return {"trace_id": trace_id}

    def submitted(self, row: RunRow) -> None:
        """The run was created under the current span (a request, a parent's tool step): link
        that span to the run's root."""
        if self.on:
            self.tracing.link_current(
                self.root(row.run_id), {"agentos.link": "started_run", "agentos.run.id": row.run_id}
            )

    def model_step(self, run_id: str, seq: int, attempt: int) -> TraceSpec | None:
        """Where the router's `chat` span of this model step goes."""
        if not self.on:
            return None
        _, span_id = derived_ids(run_id, str(seq), str(attempt))
        return TraceSpec(self.root(run_id), span_id, self._died(run_id, seq, attempt))

    @contextmanager
    def tool_step(self, run_id: str, seq: int, attempt: int, name: str, call_id: str) -> Iterator[Span]:
        """The `execute_tool` span of a tool step, current for the block (a sandbox command, an
        MCP call, a child run nest under it)."""
        if not self.on:
            yield NULL_SPAN
            return
        _, span_id = derived_ids(run_id, str(seq), str(attempt))
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "agentos.run.id": run_id,
            "agentos.step.seq": seq,
            "agentos.step.attempt": attempt,
        }
        links = self._died(run_id, seq, attempt)
        with self.tracing.span(
            f"execute_tool {name}", attributes, parent=self.root(run_id), span_id=span_id, links=links
        ) as span:
            yield span

    @contextmanager
    def in_run(self, run_id: str, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
        """A span of the run's trace (under its root) for the block: the wait for a permit."""
        with self.tracing.span(name, attributes, parent=self.root(run_id)) as span:
            yield span

    def _died(self, run_id: str, seq: int, attempt: int) -> tuple[str, ...]:
        if attempt <= 1:
            return ()
        trace_id, _ = derived_ids(run_id)
        _, before = derived_ids(run_id, str(seq), str(attempt - 1))
        return (self.tracing.traceparent(trace_id, before),)

    def human_answered(self, row: RunRow, seq: int, request: dict[str, Any], answered_ms: int) -> None:
        """The wait of a human step, asked -> answered, as one span (asked on one node and
        answered on another, maybe: recorded whole at the answer)."""
        if not self.on:
            return
        asked_ms = int(request.get("asked_ms") or answered_ms)
        kind = str(request.get("kind", "question"))
        _, span_id = derived_ids(row.run_id, str(seq), "wait")
        attributes = {"agentos.run.id": row.run_id, "agentos.human.kind": kind, "agentos.step.seq": seq}
        events: list[tuple[str, int, dict[str, Any]]] = [
            ("agentos.human.requested", asked_ms, {}),
            ("agentos.human.answered", answered_ms, {}),
        ]
        self.tracing.record(
            f"human_wait {kind}",
            attributes,
            start_ms=asked_ms,
            end_ms=answered_ms,
            span_id=span_id,
            parent=self.root(row.run_id),
            events=events,
        )

    def ended(self, row: RunRow, status: str, reason: str, ended_ms: int) -> None:
        """The run's root span, whole: from its creation to now, on the node that ended it."""
        if not self.on:
            return
        trace_id, span_id = derived_ids(row.run_id)
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": row.agent,
            "agentos.run.id": row.run_id,
            "agentos.run.status": status,
            "agentos.run.reason": reason,
            "agentos.tenant.id": row.tenant_id,
        }
        if row.session_id:
            attributes["gen_ai.conversation.id"] = row.session_id
        links: tuple[str, ...] = ()
        if row.parent_run_id:  # a child: its parent's trace, at the root (the step links here)
            links = (self.root(row.parent_run_id),)
        self.tracing.record(
            f"invoke_agent {row.agent}",
            attributes,
            start_ms=row.created_ms,
            end_ms=ended_ms,
            trace_id=trace_id,
            span_id=span_id,
            links=links,
        )
