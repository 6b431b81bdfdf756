"""`python -m agentos.bench.arrival`: the same as `agentos bench load`."""

import sys

from agentos.bench.arrival.cli import main

sys.exit(main())
