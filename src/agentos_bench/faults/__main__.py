"""`python -m agentos.bench.faults`: the same as `agentos bench faults`."""

import sys

from agentos.bench.faults.cli import main

sys.exit(main())
