"""Runs and agents of two tenants in one RunService: each sees only its own (and the config's).

Another tenant's run or agent is a NotFound with the same code as a missing one, for every
call: read, events, cancel, terminate, answer. The real service, journal (SQLite) and kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentos.agents.service import RunService
from agentos.config import Settings, settings_from_dict
from agentos.errors import ConfigError, Conflict, Forbidden, NotFound
from agentos.providers.base import ChatRequest, Completion
from tests.agents.conftest import ServiceFactory, collect, journal_sql
from tests.agents.fakes import ScriptedProvider, answer, call

A, B = "acme", "bravo"


async def waiting_run(service: RunService, tenant: str) -> tuple[str, dict[str, object]]:
    run_id = await service.start_run(tenant, "ops", "do the thing")
    await collect(service, run_id, until="human.requested", tenant=tenant)
    info = await service.get_run(tenant, run_id)
    assert info["status"] == "waiting_human", info
    return run_id, info


async def assert_run_not_found(service: RunService, tenant: str, run_id: str) -> None:
    """Every way in answers as for a run that does not exist: the same error, the same code."""
    for attempt in (
        lambda: service.get_run(tenant, run_id),
        lambda: service.cancel(tenant, run_id),
        lambda: service.terminate(tenant, run_id),
        lambda: service.answer(tenant, run_id, f"{run_id}:3", "yes"),
        lambda: anext(service.events(tenant, run_id)),
    ):
        with pytest.raises(NotFound) as caught:
            await attempt()
        assert caught.value.code == "run_not_found"
        assert str(caught.value) == str(NotFound(f"run {run_id!r} not found"))


async def test_another_tenants_run_is_not_found_and_stays_untouched(make_service: ServiceFactory) -> None:
    service = await make_service()
    run_id, info = await waiting_run(service, A)
    await assert_run_not_found(service, B, run_id)
    await assert_run_not_found(service, B, "run_doesnotexist")
    # B's attempts changed nothing: the run still waits, and A can answer it
    assert (await service.get_run(A, run_id))["status"] == "waiting_human"
    pending = info["pending"]
    assert isinstance(pending, dict)
    await service.answer(A, run_id, str(pending["operation_id"]), "yes")
    events = await collect(service, run_id, tenant=A)
    assert events[-1].type == "run.completed"
    await assert_run_not_found(service, B, run_id)  # a finished run (no handle, journal only) too


async def test_cancel_and_terminate_reach_only_the_callers_runs(make_service: ServiceFactory) -> None:
    service = await make_service()
    ours, _ = await waiting_run(service, A)
    theirs, _ = await waiting_run(service, B)
    assert (await service.cancel(A, ours))["status"] == "cancelled"
    with pytest.raises(NotFound):
        await service.terminate(A, theirs)
    assert (await service.get_run(B, theirs))["status"] == "waiting_human"
    assert (await service.terminate(B, theirs))["status"] == "cancelled"


async def test_api_agents_belong_to_their_tenant_and_config_agents_to_all(make_service: ServiceFactory) -> None:
    service = await make_service()
    await service.create_agent(A, {"name": "helper", "tools": []})
    assert [a["name"] for a in service.list_agents(A)] == ["helper", "ops"]
    assert [a["name"] for a in service.list_agents(B)] == ["ops"]  # the config's, read-only, for all
    assert service.get_agent(B, "ops")["source"] == "config"
    with pytest.raises(NotFound) as caught:
        service.get_agent(B, "helper")
    assert caught.value.code == "agent_not_found"
    assert not service.has_agent(B, "helper") and service.has_agent(A, "helper")
    with pytest.raises(NotFound):
        await service.start_run(B, "helper", "use theirs")
    # B may have an agent of the same name: its own, independent of A's
    await service.create_agent(B, {"name": "helper", "tools": ["ask_human"]})
    assert list(service.get_agent(A, "helper")["tools"]) == []
    assert list(service.get_agent(B, "helper")["tools"]) == ["ask_human"]
    with pytest.raises(Conflict):  # a config agent's name is taken for every tenant
        await service.create_agent(B, {"name": "ops", "tools": []})


async def test_a_config_agent_with_tenants_is_theirs_alone(make_service: ServiceFactory) -> None:
    agents = {"ops": {"tools": ["ask_human"]}, "hostly": {"tools": ["run_command"], "tenants": [A]}}
    service = await make_service(agents=agents)
    assert [a["name"] for a in service.list_agents(A)] == ["hostly", "ops"]
    assert [a["name"] for a in service.list_agents(B)] == ["ops"]
    assert "tenants" not in service.get_agent(A, "hostly")  # the allow-list names other tenants
    for attempt in (lambda: service.start_run(B, "hostly", "let me in"), lambda: _get(service, B, "hostly")):
        with pytest.raises(NotFound) as caught:
            await attempt()
        assert caught.value.code == "agent_not_found"
    assert not service.has_agent(B, "hostly")
    run_id = await service.start_run(A, "hostly", "mine")
    assert (await service.get_run(A, run_id))["agent"] == "hostly"


async def _get(service: RunService, tenant: str, name: str) -> object:
    return service.get_agent(tenant, name)


@pytest.mark.parametrize("tenants", [[], "acme", [""], [1]])
def test_a_config_agents_tenants_must_be_a_list_of_ids(tenants: object) -> None:
    with pytest.raises(ConfigError, match="agents.hostly.tenants"):
        settings_from_dict({"agents": {"hostly": {"tools": [], "tenants": tenants}}})


async def test_api_agents_come_back_after_a_restart_each_its_tenants(make_service: ServiceFactory) -> None:
    service = await make_service()
    await service.create_agent(A, {"name": "mine", "tools": []})
    await service.close(drain_s=0)
    again = await make_service()
    assert "mine" in [a["name"] for a in again.list_agents(A)]
    assert "mine" not in [a["name"] for a in again.list_agents(B)]


def delegating_to(agent: str) -> ScriptedProvider:
    def script(request: ChatRequest) -> Completion:
        if request.messages[-1]["role"] == "tool":
            return answer(str(request.messages[-1]["content"]))
        if request.messages[-1]["content"] == "sub-task":
            return answer("child answer")
        return call("delegate", {"agent": agent, "input": "sub-task"})

    return ScriptedProvider(script)


@pytest.mark.parametrize("target", ["private", "nosuch"])
async def test_delegate_cannot_reach_another_tenants_agent(make_service: ServiceFactory, target: str) -> None:
    agents = {"boss": {"tools": ["delegate"]}}
    service = await make_service(delegating_to(target), agents=agents)
    await service.create_agent(B, {"name": "private", "tools": []})
    run_id = await service.start_run(A, "boss", "go")
    events = await collect(service, run_id, tenant=A)
    assert events[-1].type == "run.completed"
    assert events[-1].data["result"] == f"error: agent {target!r} not found"  # the same for both
    with pytest.raises(NotFound):  # no child was started
        await service.get_run(A, f"{run_id}.2")


async def test_a_child_run_is_its_parents_tenants(make_service: ServiceFactory) -> None:
    service = await make_service(delegating_to("boss"), agents={"boss": {"tools": ["delegate"]}})
    run_id = await service.start_run(A, "boss", "go")
    events = await collect(service, run_id, tenant=A)
    assert events[-1].data["result"] == "child answer"
    child = f"{run_id}.2"
    assert (await service.get_run(A, child))["parent_run_id"] == run_id
    with pytest.raises(NotFound):
        await service.get_run(B, child)


async def test_every_row_of_a_run_carries_its_tenant(
    make_service: ServiceFactory, tmp_path: Path, journal_settings: Settings
) -> None:
    service = await make_service()
    run_id, _ = await waiting_run(service, B)
    await service.terminate(B, run_id)
    await service.close(drain_s=0)

    async def sql(statement: str, *params: Any) -> list[tuple[Any, ...]]:
        return await journal_sql(journal_settings, tmp_path / "data", statement, *params)

    for table in ("runs", "steps", "run_events"):
        tenants = {r[0] for r in await sql(f"SELECT DISTINCT tenant_id FROM {table} WHERE run_id = ?", run_id)}
        assert tenants == {B}, table
    refs = await sql(
        "SELECT spec_ref FROM runs WHERE run_id = ? UNION SELECT input_ref FROM steps WHERE run_id = ?"
        " UNION SELECT payload_ref FROM steps WHERE run_id = ?",
        run_id,
        run_id,
        run_id,
    )
    payload_tenants = {
        r[0] for ref in refs if ref[0] for r in await sql("SELECT tenant_id FROM payloads WHERE hash = ?", ref[0])
    }
    assert payload_tenants == {B}


async def test_recovery_resumes_each_tenants_runs_under_its_tenant(make_service: ServiceFactory) -> None:
    service = await make_service()
    ours, _ = await waiting_run(service, A)
    theirs, _ = await waiting_run(service, B)
    await service.close(drain_s=0)
    resumed = await make_service()
    for tenant, run_id, other in ((A, ours, B), (B, theirs, A)):
        info = await resumed.get_run(tenant, run_id)
        assert info["status"] == "waiting_human"
        with pytest.raises(NotFound):
            await resumed.answer(other, run_id, str(info["pending"]["operation_id"]), "yes")
        await resumed.answer(tenant, run_id, str(info["pending"]["operation_id"]), "yes")
        events = await collect(resumed, run_id, tenant=tenant)
        assert events[-1].type == "run.completed"
        assert events[-1].data["result"] == "All done."


async def test_an_admins_agent_passes_the_policy_again_after_a_restart(make_service: ServiceFactory) -> None:
    stdio = {"name": "shell", "tools": [], "mcp_servers": [{"name": "sh", "command": ["sh", "-c", "true"]}]}
    service = await make_service()
    with pytest.raises(Forbidden):
        await service.create_agent(A, stdio)  # a tenant's key: refused
    await service.create_agent(A, stdio, caller_is_admin=True)
    await service.close(drain_s=0)
    again = await make_service()
    assert list(again.get_agent(A, "shell")["mcp_servers"][0]["command"]) == ["sh", "-c", "true"]
