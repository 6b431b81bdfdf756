"""`python -m agentos_bench.authcost`: the auth-cost bench without the `agentos` command."""

import sys

from agentos_bench.authcost.cli import main

sys.exit(main())
