"""`python -m agentos_bench.fallback`: the same as `agentos bench fallback`."""

import sys

from agentos_bench.fallback.cli import main

sys.exit(main())
