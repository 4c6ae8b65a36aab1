"""`python -m trace_rl.train` (for `accelerate launch -m trace_rl.train ...`)."""

import sys

from trace_rl.train.command import main

sys.exit(main())
