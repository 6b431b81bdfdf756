"""The bench's identity provider: an OIDC issuer on loopback for `agentos bench sweep --idp-url`.

It holds one RSA key (RS256, what most providers sign with), serves its public half as a JWKS at
`/jwks.json` (Cache-Control: max-age=3600, as providers do) and mints an end user's access token
at `/mint?tenant=T&sub=S` (one hour; scopes sessions:read sessions:write). The server trusts it
through its profile (bench/profiles/full-store-jwt.toml: issuer, audience, jwks_url); the sweep
asks it for one token per tenant and sends it on every request of that tenant's users.

    .venv/bin/python bench/scripts/bench_idp.py --port 4319 &
    agentos bench sweep --profile bench/profiles/full-store-jwt.toml --tenants 1 \\
        --idp-url http://127.0.0.1:4319 --sweep 1000 ...
"""

from __future__ import annotations

import argparse
import json
import time

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "urn:agentos-bench:idp"
AUDIENCE = "agentos-bench"
KID = "bench-1"


def app() -> web.Application:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = {"keys": [public | {"kid": KID, "alg": "RS256", "use": "sig"}]}

    async def keys(_: web.Request) -> web.Response:
        return web.json_response(jwks, headers={"Cache-Control": "max-age=3600"})

    async def mint(request: web.Request) -> web.Response:
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": request.query.get("sub", "bench-user"),
            "iat": now,
            "nbf": now,
            "exp": now + 3600,
            "scope": "sessions:read sessions:write",
        }
        token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})
        return web.json_response({"token": token})

    application = web.Application()
    application.router.add_get("/jwks.json", keys)
    application.router.add_get("/mint", mint)
    return application


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4319)
    web.run_app(app(), host="127.0.0.1", port=parser.parse_args().port, print=None)


if __name__ == "__main__":
    main()
