"""`python -m agentos.bench.knowledge`: the knowledge bench without the `agentos` command."""

import sys

from agentos.bench.knowledge.cli import main

sys.exit(main())
