"""`python -m agentos.bench.runs`: the runs bench without the `agentos` command."""

import sys

from agentos.bench.runs.cli import main

sys.exit(main())
