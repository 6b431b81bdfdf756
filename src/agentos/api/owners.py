"""The owner rule on the HTTP side: which sessions, runs and schedules a principal may see (`Principal.may_see`).

A tenant key (or a user token with the `all` scope) sees the whole tenant and costs nothing
here; an end user's token sees only what its subject made, so its requests read the session's
row first. A refusal is the same 404 as another tenant's session: ids cannot be probed.
"""

from __future__ import annotations

from agentos.agents.engine import run_not_found
from agentos.agents.service import RunService
from agentos.errors import Forbidden, SessionNotFound
from agentos.runtime.runtime import Runtime
from agentos.schedules.service import ScheduleService, schedule_not_found
from agentos.tenancy.principal import Principal


def sees_everything(who: Principal) -> bool:
    """Whether no resource of the tenant is hidden from `who` (no read needed to decide)."""
    return who.tenant_wide and who.resources is None


def require_tenant_wide(who: Principal, what: str) -> Principal:
    """`who`, if it sees the whole tenant: `what` (usage, the console's numbers and run events)
    is every user's at once. Raises: Forbidden `insufficient_scope`."""
    if not who.tenant_wide:
        raise Forbidden(
            f"{what} shows the whole tenant: a user's token needs the 'all' scope", code="insufficient_scope"
        )
    return who


def list_owner(who: Principal) -> str | None:
    """The owner a list of `who` is filtered by; None: no filter (the whole tenant)."""
    if who.tenant_wide:
        return None
    return who.subject or ""  # a narrowed principal without a user sees no one's list


async def check_session(runtime: Runtime, who: Principal, session_id: str) -> None:
    """Raises: SessionNotFound: unknown, another tenant's, or not `who`'s to see."""
    if sees_everything(who):
        return
    record = await runtime.get_session(who.tenant_id, session_id)
    if not who.may_see("session", session_id, record.owner):
        raise SessionNotFound(session_id)


async def check_run(runs: RunService, who: Principal, run_id: str) -> None:
    """Raises: NotFound `run_not_found`: unknown, another tenant's, or not `who`'s to see."""
    if sees_everything(who):
        return
    if not who.may_see("run", run_id, await runs.run_owner(who.tenant_id, run_id)):
        raise run_not_found(run_id)


async def check_schedule(schedules: ScheduleService, who: Principal, schedule_id: str) -> None:
    """Raises: NotFound `schedule_not_found`: unknown, another tenant's, or not `who`'s to see."""
    if sees_everything(who):
        return
    if not who.may_see("schedule", schedule_id, await schedules.owner_of(who.tenant_id, schedule_id)):
        raise schedule_not_found(schedule_id)
