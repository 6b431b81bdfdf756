"""`AdminClient`: the admin API (tenants and keys) and the usage ledger, for operators' scripts and
`agentos tenants|keys|usage`.

Answers are the server's JSON as plain dicts (`docs/api.md` describes each); errors are the
client's (`APIError`, `TransportError`), as for `AsyncClient`.

Usage::

    async with AdminClient("http://127.0.0.1:8080", token=admin_key) as admin:
        await admin.create_tenant("acme", name="Acme")
        made = await admin.create_key("acme", scopes=["sessions:read", "sessions:write"])
        print(made["key"])  # shown once
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from agentos.client._http import HttpClient, Params

Json = dict[str, Any]


class AdminClient(HttpClient):
    async def _call(self, method: str, path: str, *, body: Any = None, params: Params | None = None) -> Json:
        answer: Json = await self._http.call(method, path, Json, body=body, params=params)
        return answer

    # -- tenants -------------------------------------------------------------------------------

    async def create_tenant(self, tenant_id: str, *, name: str = "", limits: Mapping[str, int] | None = None) -> Json:
        body = {"tenant_id": tenant_id, "name": name, "limits": dict(limits or {})}
        return await self._call("POST", "/v1/admin/tenants", body=body)

    async def list_tenants(self, *, limit: int = 100, after: str | None = None) -> Json:
        return await self._call("GET", "/v1/admin/tenants", params=_page(limit, after))

    async def get_tenant(self, tenant_id: str) -> Json:
        return await self._call("GET", f"/v1/admin/tenants/{quote(tenant_id, safe='')}")

    async def update_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        limits: Mapping[str, int | None] | None = None,
        disabled: bool | None = None,
    ) -> Json:
        """Change what is given; in `limits`, None drops an override."""
        body: Json = {"name": name, "limits": None if limits is None else dict(limits), "disabled": disabled}
        body = {k: v for k, v in body.items() if v is not None}
        return await self._call("PATCH", f"/v1/admin/tenants/{quote(tenant_id, safe='')}", body=body)

    # -- keys ----------------------------------------------------------------------------------

    async def create_key(
        self, tenant_id: str, *, name: str = "", scopes: Iterable[str] | None = None, expires_in_s: int | None = None
    ) -> Json:
        """A new key; the answer's `key` is the only time the key is shown."""
        body: Json = {"tenant_id": tenant_id, "name": name}
        if scopes is not None:
            body["scopes"] = list(scopes)
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        return await self._call("POST", "/v1/admin/keys", body=body)

    async def list_keys(self, *, tenant_id: str | None = None, limit: int = 100, after: str | None = None) -> Json:
        params = _page(limit, after) | ({"tenant_id": tenant_id} if tenant_id else {})
        return await self._call("GET", "/v1/admin/keys", params=params)

    async def get_key(self, key_id: str) -> Json:
        return await self._call("GET", f"/v1/admin/keys/{quote(key_id, safe='')}")

    async def revoke_key(self, key_id: str) -> Json:
        """Revoked at once on every node; the row stays (the access log names its key_id)."""
        return await self._call("POST", f"/v1/admin/keys/{quote(key_id, safe='')}/revoke")

    async def update_key(
        self, key_id: str, *, budget_per_day: float | None = None, budget_per_month: float | None = None
    ) -> Json:
        """Change what is given of the key's spending budgets (0: none; docs/providers.md)."""
        given = (("budget_per_day", budget_per_day), ("budget_per_month", budget_per_month))
        body = {k: v for k, v in given if v is not None}
        return await self._call("PATCH", f"/v1/admin/keys/{quote(key_id, safe='')}", body=body)

    # -- end users' identity providers ---------------------------------------------------------

    async def get_issuers(self, tenant_id: str) -> Json:
        """The tenant's identity providers: `issuers` (set over this API) and `from_config`."""
        return await self._call("GET", f"/v1/admin/tenants/{quote(tenant_id, safe='')}/issuers")

    async def set_issuers(self, tenant_id: str, issuers: Iterable[Mapping[str, Any]]) -> Json:
        """Replace the tenant's identity providers (docs/security.md, "End users"); every node
        trusts them from its next request."""
        body = {"issuers": [dict(issuer) for issuer in issuers]}
        return await self._call("PUT", f"/v1/admin/tenants/{quote(tenant_id, safe='')}/issuers", body=body)

    async def delete_issuers(self, tenant_id: str) -> None:
        """Remove those set over this API: their users' tokens are refused (401) from then on."""
        await self._http.call("DELETE", f"/v1/admin/tenants/{quote(tenant_id, safe='')}/issuers", type(None))

    # -- diagnostics -----------------------------------------------------------------------------

    async def memory(self) -> Json:
        """The server's memory as its allocators see it (docs/capacity.md, "Memory")."""
        return await self._call("GET", "/v1/admin/memory")

    # -- usage -----------------------------------------------------------------------------------

    async def usage(
        self,
        *,
        group_by: Iterable[str] = (),
        start: str | None = None,
        end: str | None = None,
        tenant: str | None = None,
    ) -> Json:
        """GET /v1/usage: tokens and cost summed by `group_by` over `[start, end)` (UTC dates, `end`
        counted, or epoch milliseconds). Any key reads its own tenant's; an admin key every
        tenant's, or `tenant`'s."""
        given = {"group_by": ",".join(group_by), "from": start, "to": end, "tenant": tenant}
        return await self._call("GET", "/v1/usage", params={k: v for k, v in given.items() if v})


def _page(limit: int, after: str | None) -> dict[str, str | int]:
    return {"limit": limit} | ({"after": after} if after else {})
