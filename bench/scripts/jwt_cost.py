"""What an end user's token costs per request: CPU per verification, first and cached.

The real verifier (`agentos.identity.UserTokens`) against the test identity provider on loopback
(tests/identity/idp.py), its key set fetched once before timing. For each algorithm: `first`
verifies N distinct tokens (signature, claims, principal; what a token's first request costs),
`cached` presents one verified token N times (what every later request costs: a dict lookup and
the checks that it still holds). A tenant API key's check (`TenantRegistry.authenticate`: one
HMAC) is timed beside them. CPU time of this process (`time.process_time`), so other load on the
machine counts less than in wall time.

    PYTHONPATH=src:. .venv/bin/python bench/scripts/jwt_cost.py --tokens 2000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from tests.identity.idp import KIDS, start_idp

from agentos.config.identity import IdentityConfig, IssuerConfig
from agentos.identity import Fetcher, UserTokens, identity_policy
from agentos.outbound import OutboundPolicy
from agentos.tenancy.principal import Principal
from agentos.tenancy.registry import TenantRegistry

SCOPES = "sessions:read sessions:write runs:read runs:write"


async def per_call_us(calls: list[Callable[[], Awaitable[object]]], repeats: int) -> float:
    """The median, over `repeats` passes, of CPU microseconds per call."""
    passes = []
    for _ in range(repeats):
        started = time.process_time()
        for call in calls:
            assert isinstance(await call(), Principal)
        passes.append((time.process_time() - started) / len(calls) * 1e6)
    return statistics.median(passes)


async def main(tokens: int, repeats: int) -> None:
    idp = await start_idp()
    registry = TenantRegistry(None, b"p" * 32)
    await registry.open()
    await registry.create_tenant("acme")
    key, _ = await registry.create_key("acme", name="bench")
    config = IdentityConfig(
        issuers=[IssuerConfig(tenant="acme", issuer=idp.issuer, audience=idp.audience)],
        allow_loopback=True,
        verified_cache_size=tokens * repeats + 10,
    )
    users = UserTokens(config, registry, Fetcher(identity_policy(OutboundPolicy(), allow_loopback=True), timeout_s=5))
    try:
        assert isinstance(await users.authenticate(idp.mint({"scope": SCOPES})), Principal)  # keys fetched
        print(f"{'credential':<12} {'first verify (µs CPU)':>22} {'cached (µs CPU)':>16}")
        for alg in KIDS:
            fresh = [
                idp.mint({"sub": f"u{r}-{i}", "scope": SCOPES}, alg=alg) for r in range(repeats) for i in range(tokens)
            ]
            first = []
            for r in range(repeats):
                batch = fresh[r * tokens : (r + 1) * tokens]
                first.append(await per_call_us([lambda t=t: users.authenticate(t) for t in batch], 1))
            one = fresh[0]
            cached = await per_call_us([lambda one=one: users.authenticate(one)] * tokens, repeats)
            print(f"{alg:<12} {statistics.median(first):>22.1f} {cached:>16.2f}")

        async def by_key() -> object:
            return registry.authenticate(key)

        print(f"{'API key':<12} {await per_call_us([by_key] * tokens, repeats):>22.1f} {'(no cache)':>16}")
        print(f"key-set fetches: {idp.jwks_fetches}")
    finally:
        await users.close()
        await registry.close()
        await idp.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2000, help="tokens per pass")
    parser.add_argument("--repeats", type=int, default=5, help="passes; the median is reported")
    args = parser.parse_args()
    asyncio.run(main(args.tokens, args.repeats))
