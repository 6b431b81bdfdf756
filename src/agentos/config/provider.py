"""The `[provider]` and `[mock]` config groups: the OpenAI-compatible provider Agent OS calls, and
the built-in mock started when none is configured. `agentos.config.Settings` holds them; import
them from either module."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]


class ProviderConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    url: str = ""  # empty: start the built-in mock provider
    model: str = "mock-1"
    api_key: str = ""
    connect_timeout_s: PosFloat = 5.0
    first_token_timeout_s: PosFloat = 60.0
    idle_timeout_s: PosFloat = 30.0
    total_timeout_s: PosFloat = 600.0
    max_retries: NonNegInt = 2
    retry_budget_s: NonNegFloat = 10.0
    max_tokens: NonNegInt = 0  # 0 = let the provider decide


class MockConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The built-in mock provider started when `provider.url` is empty.

    `scenario = "tools"` answers an agent with tool calls (two `run_command`, then `ask_human`,
    then text; `agentos.mock.scenario`), so a first agent run shows an approval and a question.
    """

    ttft_ms: NonNegFloat = 50.0
    tps: PosFloat = 200.0
    tokens: PosInt = 8
    scenario: Literal["plain", "tools"] = "plain"
