"""`python -m trace_rl.cli ...`: the `trace-rl` command."""

import sys

from trace_rl.cli.app import main

sys.exit(main())
