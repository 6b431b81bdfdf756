"""`python -m agentos.bench.overload`: the same as `agentos bench overload`."""

import sys

from agentos.bench.overload.cli import main

sys.exit(main())
