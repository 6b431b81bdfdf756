"""The agent loop: model -> tool calls -> model -> ... -> answer, one journaled step at a time.

`Runner.drive(handle)` runs while the run is active: each turn of the loop asks `replay()`
for the next action, carries it out, and commits its result to the journal before the next
one starts. It returns when the run finishes or parks waiting for a human (the task then
ends: a waiting run holds no task). Limits end the run with a reason, never a hang:
`max_turns`, `token_budget`, `max_delegation_depth`, `max_delegation_width`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import aclosing
from typing import Any, NoReturn

import msgspec

from agentos.agents.handle import RunHandle
from agentos.agents.host import RunHost
from agentos.agents.knowledge_tool import search_knowledge
from agentos.agents.model_events import model_completed, model_started
from agentos.agents.replay import Call, CallModel, Finish, Reconcile, RunTool, WaitHuman, replay
from agentos.agents.tools import builtin_schemas, is_idempotent
from agentos.config.agents import SEARCH_KNOWLEDGE, AgentSpec
from agentos.errors import BudgetExceeded, InvalidInput, NotFound, ProviderError
from agentos.journal.journal import Step, StepKind, StepStatus, arguments_hash
from agentos.mcp.checks import McpUnavailable
from agentos.providers.base import CallContext, ChatRequest, Completion, TextDelta
from agentos.sandbox.command import check_argv
from agentos.telemetry import NULL_SPAN, Span


class _Parked(Exception):
    """The run now waits for a human; the task ends here."""


class _Ended(Exception):
    """The run reached a terminal state."""


class Runner:
    def __init__(self, host: RunHost) -> None:
        self._host = host

    async def drive(self, handle: RunHandle) -> None:
        """Advance the run until it parks or ends."""
        try:
            while True:
                await self._advance(handle)
        except (_Parked, _Ended):
            return
        finally:
            if handle.outcome != "parked" or self._host.suspending:
                _drop_steers(handle)  # a parked run takes them when it resumes

    async def _advance(self, h: RunHandle) -> None:
        if self._host.suspending:
            raise _Parked  # the server is closing: the journal holds everything, resume at start
        if h.cancel_requested:
            await self._end(h, "cancelled", reason="cancelled")
        assert h.steps is not None
        state = replay(h.spec.system_prompt, h.row.input, h.steps, h.context)
        action = state.action
        if isinstance(action, Finish):
            await self._end(h, "completed", result=action.text, reason="completed")
        if isinstance(action, WaitHuman):
            await self._host.park(h, action.request)
            raise _Parked
        if h.spec.token_budget and state.tokens > h.spec.token_budget:
            await self._end(h, "failed", reason=f"token_budget: {state.tokens} tokens spent of {h.spec.token_budget}")
        if isinstance(action, CallModel) and h.steers:
            await self._take_steers(h, action.seq)  # the next _advance calls the model with them
            return
        if isinstance(action, CallModel):
            if state.turns >= h.spec.max_turns:
                await self._end(h, "failed", reason=f"max_turns: {h.spec.max_turns} model turns without an answer")
            await self._call_model(h, state.messages, action.seq)
        elif isinstance(action, Reconcile):
            await self._reconcile(h, action)
        else:
            await self._run_tool(h, action)

    async def _end(self, h: RunHandle, status: str, *, reason: str, result: str | None = None) -> NoReturn:
        await self._host.finish(h, status, result=result, reason=reason)
        raise _Ended

    # --- journal helpers ---

    async def _journal(
        self, h: RunHandle, ops: list[Any], step: Step, *, durable: bool = True, then: Sequence[Callable[[], None]] = ()
    ) -> None:
        """Write the step (awaited when `durable`), then run `then` (the publishing of its events)."""
        if durable:
            await self._host.store.write(ops, run=h.run_id)
        else:
            self._host.store.write_nowait(ops, run=h.run_id)
        h.record(step)
        for publish in then:
            publish()

    def _begin(self, h: RunHandle, seq: int, kind: StepKind, status: StepStatus, value: Any) -> list[Any]:
        return self._host.journal.begin_step(h.row.tenant_id, h.run_id, seq, kind, status, value, self._host.now_ms())

    def _done(self, h: RunHandle, seq: int, status: StepStatus, value: Any) -> list[Any]:
        return self._host.journal.finish_step(h.row.tenant_id, h.run_id, seq, status, value, self._host.now_ms())

    # --- model ---

    async def _call_model(self, h: RunHandle, messages: list[Any], seq: int) -> None:
        attempts = _attempts(h, seq) + 1
        operation_id = f"{h.run_id}:{seq}"
        started_ms = self._host.now_ms()
        # The model call has no side effects, so its start need not be durable: after a crash
        # the replay simply calls the model again. Its events ride in its step's writes.
        ops = self._begin(h, seq, "model", "started", None)
        self._host.emit(h, "model.started", model_started(operation_id, attempts), into=ops)
        await self._journal(h, ops, _step(seq, "model", "started", None, h, attempts), durable=False)
        try:
            reply = await self._stream(h, messages, seq, attempts)
        except ProviderError as exc:
            await self._end(h, "failed", reason=f"provider: {exc.code}: {exc}")
        except BudgetExceeded as exc:  # a budget cannot hold this step's worst case: the run stops here
            await self._end(h, "failed", reason=f"budget_exceeded: {exc.budget}")
        except McpUnavailable as exc:  # a server of its tools cannot start: at once, saying why
            await self._end(h, "failed", reason=f"tools: {exc.code}: {exc}")
        ops = self._done(h, seq, "done", reply)
        held: list[Callable[[], None]] = []
        completed = model_completed(operation_id, reply, self._host.now_ms() - started_ms)
        self._host.emit(h, "model.completed", completed, into=ops, held=held)
        await self._journal(h, ops, _step(seq, "model", "done", None, h, attempts, reply), then=held)
        self._host.spent(h, reply["usage"])

    async def _stream(self, h: RunHandle, messages: list[Any], seq: int, attempt: int) -> dict[str, Any]:
        tools = builtin_schemas(h.spec) + await self._host.mcp.schemas(h.spec)
        row = h.row
        context = CallContext(
            row.tenant_id, "", row.agent, row.run_id, row.session_id or "", f"{row.run_id}:{seq}", h.spec.max_cost
        )
        trace = self._host.traces.model_step(row.run_id, seq, attempt)  # the attempt journaled as started
        request = ChatRequest(
            messages=list(messages), model=h.spec.model, tools=tools or None, context=context, trace=trace
        )
        completion: Completion | None = None
        # aclosing aborts the upstream request when we stop early; the permit is given back
        # once the stream is closed, not before.
        async with self._host.permit(h.run_id), aclosing(self._host.provider.stream(request)) as stream:
            async for item in stream:
                if isinstance(item, TextDelta):
                    self._host.emit(h, "token", {"delta": item.text})
                else:
                    completion = item
        if completion is None:
            raise ProviderError("the provider stream ended without a completion")
        return _reply_dict(completion)

    # --- steering ---

    async def _take_steers(self, h: RunHandle, seq: int) -> None:
        """Journal each steered message as a `user` step, durably, before the model call it joins:
        a replay after a crash puts it back at the same place, once."""
        while h.steers:
            steer = h.steers.pop(0)
            if not steer.claim():
                _resolve(steer.delivered, None)
                continue
            value = {"content": steer.text, **({"key": steer.key} if steer.key else {})}
            ops = self._begin(h, seq, "user", "done", value)
            held: list[Callable[[], None]] = []  # heard of once it is committed
            self._host.emit(h, "run.steered", {"input": steer.text, "seq": seq}, into=ops, held=held)
            await self._journal(h, ops, _step(seq, "user", "done", value, h, 1), then=held)
            _resolve(steer.delivered, seq)
            seq += 1

    # --- tools ---

    async def _run_tool(self, h: RunHandle, action: RunTool) -> None:
        call, seq = action.call, action.seq
        try:
            arguments = _decode_arguments(call)
        except InvalidInput as exc:
            return await self._tool_error(h, seq, call, str(exc))
        if call.name == "ask_human" and "ask_human" in h.spec.tools:
            return await self._ask(h, seq, call, "question", {"question": str(arguments.get("question", ""))})
        if not self._allowed(h.spec, call.name):
            return await self._tool_error(h, seq, call, f"unknown tool {call.name!r}")
        if call.name in h.spec.approval_required and not action.approved:
            return await self._ask(h, seq, call, "approval", {"tool": call.name, "arguments": call.arguments})
        await self._execute(h, seq, call, arguments)

    def _allowed(self, spec: AgentSpec, name: str) -> bool:
        return spec.offers(name)

    async def _reconcile(self, h: RunHandle, action: Reconcile) -> None:
        call = action.call
        if is_idempotent(h.spec, call.name):
            await self._execute(h, action.seq, call, _decode_arguments(call))  # same step, same operation id
            return
        operation_id = f"{h.run_id}:{action.seq}"
        ops = self._done(h, action.seq, "uncertain", {"outcome": "uncertain", "operation_id": operation_id})
        h.record(_step(action.seq, "tool", "uncertain", _call_dict(call), h, _attempts(h, action.seq)))
        self._host.emit(h, "tool.uncertain", {"operation_id": operation_id, "call_id": call.call_id, "name": call.name})
        await self._ask(
            h,
            action.seq + 1,
            call,
            "uncertain",
            {"tool": call.name, "arguments": call.arguments, "operation_id_uncertain": operation_id},
            ops,
        )

    async def _execute(self, h: RunHandle, seq: int, call: Call, arguments: dict[str, Any]) -> None:
        operation_id = f"{h.run_id}:{seq}"
        attempts = _attempts(h, seq) + 1
        call_value = _call_dict(call)
        await self._journal(
            h,
            self._begin(h, seq, "tool", "started", call_value),
            _step(seq, "tool", "started", call_value, h, attempts),
        )
        self._host.emit(h, "tool.call", {"operation_id": operation_id, **call_value})
        with self._host.traces.tool_step(h.run_id, seq, attempts, call.name, call.call_id) as span:
            content = await self._dispatch(h, seq, call, arguments, span)
        await self._finish_tool(h, seq, call, content, attempts)

    async def _finish_tool(
        self, h: RunHandle, seq: int, call: Call, content: str, attempts: int, *, begun: list[Any] | None = None
    ) -> None:
        """`begun`: the step's `started` ops where they are written with its end (one transaction)."""
        output = {"content": content}
        ops = (begun or []) + self._done(h, seq, "done", output)
        held: list[Callable[[], None]] = []
        # tool.result commits with its step and is heard of after: a client that saw it can
        # count on it (a crash before the commit runs the step again; none reuses its seq).
        self._host.emit(
            h,
            "tool.result",
            {"operation_id": f"{h.run_id}:{seq}", "call_id": call.call_id, "name": call.name, "content": content},
            into=ops,
            held=held,
        )
        await self._journal(h, ops, _step(seq, "tool", "done", _call_dict(call), h, attempts, output), then=held)

    async def _tool_error(self, h: RunHandle, seq: int, call: Call, message: str) -> None:
        """A call that cannot run at all: the model is told why and may try again."""
        begun = self._begin(h, seq, "tool", "started", _call_dict(call))
        await self._finish_tool(h, seq, call, f"error: {message}", 1, begun=begun)

    async def _dispatch(
        self, h: RunHandle, seq: int, call: Call, arguments: dict[str, Any], span: Span = NULL_SPAN
    ) -> str:
        if call.name == "run_command":
            return await self._run_command(h, seq, arguments, span)
        if call.name == "delegate":
            return await self._delegate(h, seq, arguments)
        if call.name == SEARCH_KNOWLEDGE:  # the run's tenant, always: the spec only names collections
            return await search_knowledge(self._host.knowledge, h.row.tenant_id, h.spec, arguments)
        try:
            return await self._host.mcp.call(h.spec, call.name, arguments)
        except InvalidInput as exc:
            return f"error: {exc}"

    async def _run_command(self, h: RunHandle, seq: int, arguments: dict[str, Any], span: Span = NULL_SPAN) -> str:
        try:
            argv = check_argv(arguments.get("command"))
        except InvalidInput as exc:
            return f"error: {exc}"
        workdir = self._host.workdir(h.run_id)
        try:
            result = await self._host.sandbox.run(argv, workdir, h.spec.command, operation_id=f"{h.run_id}:{seq}")
        except OSError as exc:  # the sandbox itself failed (fork server gone, no fds left...)
            span.record_error(exc)
            return f"error: the sandbox failed, the command may or may not have run: {exc}"
        value = result.to_dict()
        if span is not NULL_SPAN:
            span.set_attributes({"process.command": argv[0], "process.exit.code": value.get("exit_code", -1)})
        return msgspec.json.encode(value).decode()

    async def _delegate(self, h: RunHandle, seq: int, arguments: dict[str, Any]) -> str:
        child_id = f"{h.run_id}.{seq}"
        if not await self._host.child_exists(h, child_id):
            if h.row.depth + 1 > h.spec.max_delegation_depth:
                await self._end(h, "failed", reason=f"max_delegation_depth: {h.spec.max_delegation_depth} reached")
            if await self._host.count_children(h.run_id) >= h.spec.max_delegation_width:
                await self._end(h, "failed", reason=f"max_delegation_width: {h.spec.max_delegation_width} reached")
        agent = str(arguments.get("agent") or h.row.agent)
        try:
            child = await self._host.run_child(h, seq, agent, str(arguments.get("input", "")))
        except NotFound as exc:
            return f"error: {exc}"
        if child.status == "completed":
            return child.result or ""
        return f"error: the child run {child.run_id!r} ended {child.status}: {child.reason}"

    # --- humans ---

    async def _ask(
        self, h: RunHandle, seq: int, call: Call, kind: str, details: dict[str, Any], extra_ops: list[Any] | None = None
    ) -> None:
        now = self._host.now_ms()
        request = {
            "operation_id": f"{h.run_id}:{seq}",
            "call_id": call.call_id,
            "kind": kind,
            "args_hash": arguments_hash(call.arguments),
            "deadline_ms": now + int(h.spec.human_timeout_s * 1000),
            "asked_ms": now,
            **details,
        }
        ops = [*(extra_ops or []), *self._begin(h, seq, "human", "waiting", request)]
        ops.append(self._host.journal.set_status(h.run_id, "waiting_human", now))
        await self._journal(h, ops, _step(seq, "human", "waiting", request, h, 1))
        await self._host.park(h, request)
        raise _Parked


def _resolve(future: asyncio.Future[int | None], value: int | None) -> None:
    if not future.done():
        future.set_result(value)


def _drop_steers(h: RunHandle) -> None:
    """The run stopped working (ended, stopped, suspended): its pending steers were not delivered."""
    for steer in h.steers:
        _resolve(steer.delivered, None)
    h.steers.clear()


def _attempts(h: RunHandle, seq: int) -> int:
    assert h.steps is not None
    return h.steps[seq - 1].attempts if seq <= len(h.steps) else 0


def _step(seq: int, kind: str, status: str, value: Any, h: RunHandle, attempts: int, output: Any = None) -> Step:
    return Step(seq, kind, f"{h.run_id}:{seq}", status, value, output, attempts)


def _call_dict(call: Call) -> dict[str, str]:
    return {"call_id": call.call_id, "name": call.name, "arguments": call.arguments}


def _decode_arguments(call: Call) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(call.arguments or "{}")
    except msgspec.DecodeError:
        raise InvalidInput(f"the arguments of {call.name!r} are not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"the arguments of {call.name!r} must be a JSON object")
    return value


def _reply_dict(completion: Completion) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "text": completion.text,
        "finish_reason": completion.finish_reason,
        "usage": {
            "prompt_tokens": completion.usage.prompt_tokens,
            "completion_tokens": completion.usage.completion_tokens,
        },
        "tool_calls": [{"id": c.call_id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls],
    }
    if completion.target:  # journaled with the step: which target answered, and at what cost
        reply["target"] = completion.target
        if completion.cost is not None:
            reply["cost"] = completion.cost
    return reply
