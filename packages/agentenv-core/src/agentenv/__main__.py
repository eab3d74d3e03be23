"""``python -m agentenv``: the agentenv CLI."""

import sys

from agentenv.cli import main

sys.exit(main())
