"""A real OpenID Connect identity provider on loopback, for tests (and examples) to sign users in.

Built from aiohttp and `cryptography` keys, signing with pyjwt: a discovery document at
`/.well-known/openid-configuration`, a key set (RSA, EC P-256 and Ed25519 keys) at `/jwks` with
a `Cache-Control: max-age`, and `mint(claims, alg=..., kid=...)` for the tokens. It counts the
key-set fetches (`jwks_fetches`) and can be taken down (`down = True`: 503 on everything).

Usage::

    idp = await start_idp(audience="agentos")
    token = idp.mint({"sub": "alice", "scope": "sessions:read"})
    ...
    await idp.close()
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

KIDS = {"RS256": "rsa-1", "ES256": "ec-1", "EdDSA": "ed-1"}


def _new_keys() -> dict[str, Any]:
    return {
        "RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ES256": ec.generate_private_key(ec.SECP256R1()),
        "EdDSA": ed25519.Ed25519PrivateKey.generate(),
    }


@dataclass
class IdentityProvider:
    url: str = ""
    audience: str = "agentos"
    max_age_s: int = 300
    down: bool = False
    jwks_fetches: int = 0
    keys: dict[str, Any] = field(default_factory=_new_keys)  # alg -> private key
    kids: dict[str, str] = field(default_factory=lambda: dict(KIDS))
    fetched: asyncio.Event = field(default_factory=asyncio.Event)  # set at every key-set fetch
    _runner: web.AppRunner | None = None

    @property
    def issuer(self) -> str:
        return self.url

    def jwks(self) -> dict[str, Any]:
        return {
            "keys": [
                {**_public_jwk(alg, private), "kid": self.kids[alg], "alg": alg, "use": "sig"}
                for alg, private in self.keys.items()
            ]
        }

    def mint(
        self, claims: dict[str, Any] | None = None, *, alg: str = "RS256", kid: str | None = None, **header: Any
    ) -> str:
        """A token signed by this provider's `alg` key; `claims` over the usual ones (iss, aud,
        sub, iat, exp one hour ahead). A claim given as None is left out."""
        now = int(time.time())
        body = {"iss": self.issuer, "aud": self.audience, "sub": "alice", "iat": now, "exp": now + 3600}
        body.update(claims or {})
        body = {k: v for k, v in body.items() if v is not None}
        headers = {"kid": kid or self.kids[alg], **header}
        return jwt.encode(body, self.keys[alg], algorithm=alg, headers=headers)

    def rotate(self, alg: str = "RS256") -> None:
        """A new key for `alg` under a new kid (the old one is withdrawn)."""
        self.keys[alg] = _new_keys()[alg]
        self.kids[alg] = f"{self.kids[alg]}-next"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _public_jwk(alg: str, private: Any) -> dict[str, Any]:
    algorithm = jwt.get_algorithm_by_name(alg)
    return algorithm.to_jwk(private.public_key(), as_dict=True)


async def start_idp(*, audience: str = "agentos", max_age_s: int = 300) -> IdentityProvider:
    idp = IdentityProvider(audience=audience, max_age_s=max_age_s)

    async def discovery(request: web.Request) -> web.Response:
        if idp.down:
            return web.json_response({"error": "down"}, status=503)
        return web.json_response(
            {
                "issuer": idp.issuer,
                "jwks_uri": f"{idp.url}/jwks",
                "authorization_endpoint": f"{idp.url}/authorize",
                "token_endpoint": f"{idp.url}/token",
                "id_token_signing_alg_values_supported": list(KIDS),
            }
        )

    async def keys(request: web.Request) -> web.Response:
        idp.jwks_fetches += 1
        idp.fetched.set()
        if idp.down:
            return web.json_response({"error": "down"}, status=503)
        return web.json_response(idp.jwks(), headers={"Cache-Control": f"public, max-age={idp.max_age_s}"})

    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", discovery)
    app.router.add_get("/jwks", keys)
    idp._runner = web.AppRunner(app, access_log=None)
    await idp._runner.setup()
    site = web.TCPSite(idp._runner, "127.0.0.1", 0)
    await site.start()
    port = idp._runner.addresses[0][1]
    idp.url = f"http://127.0.0.1:{port}"
    return idp


@pytest.fixture(name="idp")
async def idp_fixture() -> AsyncIterator[IdentityProvider]:
    """`idp`: a provider on loopback for one test (a module imports `idp_fixture` to use it)."""
    provider = await start_idp()
    yield provider
    await provider.close()
