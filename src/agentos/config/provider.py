"""The provider config groups: `[provider]` (one OpenAI-compatible provider, the simple form),
`[providers.NAME]` and `[models.NAME]` (several providers and wires, each model an ordered list
of targets to fall back along), `[routing]` (the circuit breakers) and `[mock]` (the built-in mock
started when no provider is configured). `agentos.config.Settings` holds them; import them from
either module. docs/providers.md says how they fit together.

The simple form is the same as one provider named `default` of kind `openai` and one model named
`provider.model` with that provider as its only target (`routes()` builds exactly that)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from agentos.errors import ConfigError

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PosInt = Annotated[int, msgspec.Meta(ge=1)]
PosFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]


class Upstream(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What every upstream has: its key, timeouts and retries (`[provider]` and each
    `[providers.NAME]`). Retries happen before the first token, only where the model has no
    further target to fall back to (with one, the router moves on at once instead)."""

    api_key: str = ""
    connect_timeout_s: PosFloat = 5.0
    first_token_timeout_s: PosFloat = 60.0
    idle_timeout_s: PosFloat = 30.0
    total_timeout_s: PosFloat = 600.0
    max_retries: NonNegInt = 2
    retry_budget_s: NonNegFloat = 10.0
    max_tokens: NonNegInt = 0  # 0 = let the provider decide (anthropic requires one: 4096 then)

    def upstream(self) -> dict[str, Any]:
        """The `Upstream` fields alone, to build the other form from."""
        return {name: getattr(self, name) for name in Upstream.__struct_fields__}


class ProviderConfig(Upstream, frozen=True, kw_only=True, forbid_unknown_fields=True):
    url: str = ""  # empty: start the built-in mock provider
    model: str = "mock-1"


class MockConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The built-in mock provider started when `provider.url` is empty.

    `scenario = "tools"` answers an agent with tool calls (two `run_command`, then `ask_human`,
    then text; `agentos.mock.scenario`), so a first agent run shows an approval and a question.
    """

    ttft_ms: NonNegFloat = 50.0
    tps: PosFloat = 200.0
    tokens: PosInt = 8
    scenario: Literal["plain", "tools"] = "plain"


ProviderKind = Literal["openai", "openai-responses", "anthropic"]
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096  # the Messages API requires max_tokens
Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")]


class NamedProvider(Upstream, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One upstream: a kind (its wire), where it is, its key and its own limits.

    The key comes from `api_key_env` (an environment variable's name) or `api_key_file` (a file
    holding it), or `api_key` itself; it is never logged nor shown by `agentos config`."""

    kind: ProviderKind = "openai"
    url: str
    api_key_env: str = ""
    api_key_file: str = ""
    max_concurrency: NonNegInt = 0  # streams open to it at once from this node; 0 = no own limit
    anthropic_version: str = "2023-06-01"

    def __repr__(self) -> str:  # the key stays out of every log line and traceback
        return f"NamedProvider(kind={self.kind!r}, url={self.url!r})"


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a target costs, in the operator's currency per million tokens."""

    input: NonNegFloat = 0.0
    output: NonNegFloat = 0.0
    cache_read: NonNegFloat | None = None  # None: billed as input
    cache_write: NonNegFloat | None = None  # None: billed as input


class Target(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One way to serve a model: a provider, the model's name there, and optional parameters
    (sent as they are: `temperature`, `top_p`, ...)."""

    provider: Name
    model: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    max_tokens: NonNegInt = 0  # 0: the provider's
    price: Price | None = None  # None: counted in tokens only, never priced by a guess


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    targets: Annotated[list[Target], msgspec.Meta(min_length=1, max_length=16)]


class RoutingConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the router falls back and when it stops trying a failing target.

    A target's breaker opens after `breaker_failures` failures in a row, sends nothing to it for
    `breaker_cooldown_s`, then lets up to `breaker_probes` requests through (half-open): one
    success closes it, a failure opens it again. With `coordination.redis_url` the breakers are
    the cluster's."""

    default_model: str = ""  # empty: the `[provider]` model, or the first `[models.*]` table
    breaker_failures: PosInt = 5
    breaker_cooldown_s: PosFloat = 10.0
    breaker_probes: PosInt = 1


@dataclass(frozen=True, slots=True)
class Route:
    """A target, resolved: its provider's settings and key beside it."""

    name: str  # "provider/model", as journaled and in metrics
    provider_name: str
    provider: NamedProvider
    model: str
    params: dict[str, Any]
    max_tokens: int
    price: Price | None
    api_key: str = field(repr=False)  # never in a log line


def default_model(settings_provider: ProviderConfig, models: dict[str, ModelConfig], routing: RoutingConfig) -> str:
    """The model a plain session or an agent without one uses: `routing.default_model`, else the
    simple form's `provider.model`, else the first `[models.*]` table."""
    if routing.default_model:
        return routing.default_model
    if not models:
        return settings_provider.model
    return settings_provider.model if settings_provider.model in models else next(iter(models))


def provider_key(name: str, provider: NamedProvider) -> str:
    """The provider's key, from the environment, a file or the config itself.

    Raises: ConfigError naming `providers.NAME.api_key_*` when the variable or file is missing."""
    if provider.api_key_env:
        value = os.environ.get(provider.api_key_env)
        if value is None:
            raise ConfigError(f"providers.{name}.api_key_env: the variable {provider.api_key_env} is not set")
        return value.strip()
    if provider.api_key_file:
        try:
            return Path(provider.api_key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"providers.{name}.api_key_file: cannot read it: {exc.strerror}") from None
    return provider.api_key


def _default_max_tokens(provider: NamedProvider) -> int:
    """What a target asks for when neither it nor its provider sets `max_tokens`: the Messages
    API requires a limit, so an `anthropic` target's is explicit (and the budget reservation,
    which counts `max_tokens` of output, sees it); the others let the provider decide (0)."""
    return ANTHROPIC_DEFAULT_MAX_TOKENS if provider.kind == "anthropic" else 0


def legacy_provider(config: ProviderConfig) -> NamedProvider:
    """The simple `[provider]` group as the provider named `default`."""
    return NamedProvider(kind="openai", url=config.url, **config.upstream())


def routes(
    provider: ProviderConfig,
    providers: dict[str, NamedProvider],
    models: dict[str, ModelConfig],
    routing: RoutingConfig,
) -> tuple[dict[str, list[Route]], str]:
    """Every model's targets, resolved, and the default model's name.

    Raises: ConfigError naming the key (an unknown provider, a missing key variable, a default
    model that is not defined)."""
    named = dict(providers)
    table = dict(models)
    if provider.url and "default" not in named:
        named["default"] = legacy_provider(provider)
        if provider.model not in table:
            table[provider.model] = ModelConfig(targets=[Target(provider="default", model=provider.model)])
    keys: dict[str, str] = {}
    resolved: dict[str, list[Route]] = {}
    for model_name, model in table.items():
        targets = []
        for i, target in enumerate(model.targets):
            config = named.get(target.provider)
            if config is None:
                raise ConfigError(f"models.{model_name}.targets[{i}].provider: no provider named {target.provider!r}")
            if target.provider not in keys:
                keys[target.provider] = provider_key(target.provider, config)
            targets.append(
                Route(
                    name=f"{target.provider}/{target.model}",
                    provider_name=target.provider,
                    provider=config,
                    model=target.model,
                    params=dict(target.params),
                    max_tokens=target.max_tokens or config.max_tokens or _default_max_tokens(config),
                    price=target.price,
                    api_key=keys[target.provider],
                )
            )
        resolved[model_name] = targets
    default = default_model(provider, models, routing) if table else ""
    if default and default not in resolved:
        raise ConfigError(f"routing.default_model: no model named {default!r}")
    return resolved, default
