"""`python -m agentos_bench.arrival`: the same as `agentos bench load`."""

import sys

from agentos_bench.arrival.cli import main

sys.exit(main())
