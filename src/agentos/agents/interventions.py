"""What a client does to a run on the node that drives it: answer its human request, terminate it.

An answer: the kernel decides whether the answer binds (`HumanAnswered`: the run must wait for exactly
that operation and, for an approval, `args_hash` must be the hash of the arguments awaiting
it); this module finds the journaled step the run waits on, checks the answer against it
(`agentos.agents.checks.check_answer`) and journals the accepted answer before the resumed
task reads the journal. `RunService.answer` and `.terminate` call these once they know the run
is driven here (not by another node, `agentos.agents.cluster`).
"""

from __future__ import annotations

from typing import Any

from agentos.agents.checks import check_answer
from agentos.agents.handle import RunHandle
from agentos.agents.lifecycle import RunLifecycle
from agentos.errors import Conflict, InvalidInput
from agentos.journal.journal import Step
from agentos.kernel import HumanAnswered, RejectAnswer, RunCancelRequested


async def apply_answer(
    runs: RunLifecycle,
    tenant_id: str,
    run_id: str,
    operation_id: str,
    answer: str,
    approve: bool | None,
    args_hash: str | None,
) -> None:
    """Answer the run's pending request `operation_id`; the kernel resumes the run.

    Raises:
        NotFound: no such run (or another tenant's).
        Conflict: the run does not wait for that operation, or `args_hash` is not the hash of
            the arguments awaiting approval.
        InvalidInput: an approval without `approve` or `args_hash`; an uncertain step answered
            with something else than "retry" or "skip".
    """
    handle = await runs.handle(tenant_id, run_id)
    step = await pending_step(runs, handle) if handle is not None else None
    if handle is None or step is None:
        raise Conflict(f"run {run_id!r} is not waiting for a human", code="not_waiting")
    output = check_answer(step.input, answer, approve, args_hash)
    commands = runs.driver.handle(HumanAnswered(run_id, operation_id, args_hash, approve))
    rejected = next((c for c in commands if isinstance(c, RejectAnswer)), None)
    if rejected is not None:
        error = InvalidInput if rejected.code == "approval_required" else Conflict
        raise error(rejected.message, code=rejected.code)
    await record_answer(runs, handle, step, output)  # enqueued before the resumed task reads


async def pending_step(runs: RunLifecycle, handle: RunHandle) -> Step | None:
    """The journaled human step the run waits on, if the kernel has it waiting."""
    if runs.driver.kernel.pending_human(handle.run_id) is None:
        return None
    steps = await runs.store.load_steps(handle.row.tenant_id, handle.run_id)
    step = steps[-1] if steps else None
    if step is None or step.kind != "human" or step.status != "waiting":
        return None
    return step


async def record_answer(runs: RunLifecycle, handle: RunHandle, step: Step, output: dict[str, Any]) -> None:
    """Journal an answer the kernel accepted. Its resumed task was created but has not run
    yet: the event is published first, and the write is queued before the task's first read."""
    runs.emit(handle, "human.answered", {"operation_id": step.operation_id, "kind": step.input["kind"], **output})
    now = runs.now_ms()
    runs.traces.human_answered(handle.row, step.seq, step.input, now)
    ops = runs.journal.finish_step(handle.row.tenant_id, handle.run_id, step.seq, "done", output, now)
    ops.append(runs.journal.set_status(handle.run_id, "running", now))
    await runs.store.write(ops, run=handle.run_id)


async def terminate_here(runs: RunLifecycle, handle: RunHandle) -> None:
    """Cancel the run's task and record `run.cancelled`; return once the run has ended."""
    ended = runs.waiter(handle.run_id)
    runs.driver.handle(RunCancelRequested(handle.run_id, hard=True))
    if runs.driver.kernel.run_state(handle.run_id) is None and not ended.done():
        # Unknown to the kernel (a handle loaded for a run nobody drives): end it here.
        await runs.finish(handle, "cancelled", reason="terminated")
    await ended
