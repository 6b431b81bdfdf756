"""`python -m agentos_bench.knowledge`: the knowledge bench without the `agentos` command."""

import sys

from agentos_bench.knowledge.cli import main

sys.exit(main())
