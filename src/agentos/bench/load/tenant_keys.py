"""Tenant API keys for the bench, made through the server's admin API.

Filled in once the tenant registry and its admin API exist (branch tenancy-core); until then
there is no way to make a tenant key and `make_key` is None: the keyed variants are skipped with
a note in the report.
"""

from __future__ import annotations

from agentos.bench.load.fairness import KeyMaker

make_key: KeyMaker | None = None
