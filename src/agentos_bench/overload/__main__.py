"""`python -m agentos_bench.overload`: the same as `agentos bench overload`."""

import sys

from agentos_bench.overload.cli import main

sys.exit(main())
