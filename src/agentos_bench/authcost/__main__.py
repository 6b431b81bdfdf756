"""`python -m agentos.bench.authcost`: the auth-cost bench without the `agentos` command."""

import sys

from agentos.bench.authcost.cli import main

sys.exit(main())
