"""What choosing the next tenant costs the permit pool, per release + request, by tenants waiting.

A full pool (64 permits, fair_reserve 0.1), every tenant with waiters; each cycle releases the
oldest holder (one grant) and queues a new waiter for the same tenant. `--before FILE` also
times another `permits.py` (e.g. `git show <ref>:src/agentos/kernel/permits.py > FILE`).

    .venv/bin/python bench/scripts/permit_choice.py --before /tmp/permits_old.py
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from types import ModuleType

import agentos.kernel.permits as current
from agentos.kernel.tenants import Tenants, TenantShare

TENANTS = (2, 10, 100, 1000)


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("permits_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cycle_us(module: ModuleType, tenants: int, limit: int = 64, cycles: int = 20_000) -> float:
    pool = module.PermitPool(limit, 30.0, Tenants(TenantShare()), fair_reserve=0.1)
    holders: list[str] = []
    n = 0
    for i in range(limit * 3 + tenants * 2):  # the pool full, then two waiters per tenant
        n += 1
        if pool.request(f"h{n}", f"t{i % tenants}", 0.0):
            holders.append(f"h{n}")
    start = time.perf_counter()
    for _ in range(cycles):
        holder = holders.pop(0)
        tenant = pool._holders[holder]
        holders += pool.release(holder)
        n += 1
        if pool.request(f"h{n}", tenant, 0.0):
            holders.append(f"h{n}")
    return (time.perf_counter() - start) / cycles * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another permits.py to time beside this one")
    args = parser.parse_args()
    variants = [("now", current)] + ([("before", load(args.before))] if args.before else [])
    print("| code | " + " | ".join(f"{t} tenants" for t in TENANTS) + " |")
    print("|---|" + "---:|" * len(TENANTS))
    for name, module in variants:
        print(f"| {name} | " + " | ".join(f"{cycle_us(module, t):.1f} µs" for t in TENANTS) + " |")


if __name__ == "__main__":
    main()
