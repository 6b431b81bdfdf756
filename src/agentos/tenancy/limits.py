"""What one tenant may consume: rates, quotas and its share of the provider.

The `[tenant_limits]` table of the config gives every tenant's defaults; a tenant's own row
(`/v1/admin/tenants`) may override any of them. 0 means "no limit" everywhere.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
Weight = Annotated[int, msgspec.Meta(ge=1, le=1000)]


class TenantLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Attributes (0 = unlimited):
    requests_per_minute: every request of the tenant, all its keys together.
    key_requests_per_minute: every request of one key.
    turns_per_minute, runs_per_minute: turns and runs started.
    max_sessions: sessions stored at once (a quota: 403 when over).
    max_concurrent_turns, max_active_runs: at once (429 when over: they free themselves).
    tokens_per_day: provider tokens (prompt + completion) per UTC day (403 when over).
    weight: the tenant's share of the provider permits against other tenants' (fair queuing).
    """

    requests_per_minute: NonNegInt = 0
    key_requests_per_minute: NonNegInt = 0
    turns_per_minute: NonNegInt = 0
    runs_per_minute: NonNegInt = 0
    max_sessions: NonNegInt = 0
    max_concurrent_turns: NonNegInt = 0
    max_active_runs: NonNegInt = 0
    tokens_per_day: NonNegInt = 0
    weight: Weight = 1
