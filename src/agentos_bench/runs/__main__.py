"""`python -m agentos_bench.runs`: the runs bench without the `agentos` command."""

import sys

from agentos_bench.runs.cli import main

sys.exit(main())
