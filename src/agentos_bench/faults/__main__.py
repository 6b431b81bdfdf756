"""`python -m agentos_bench.faults`: the same as `agentos bench faults`."""

import sys

from agentos_bench.faults.cli import main

sys.exit(main())
