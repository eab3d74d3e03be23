"""``python -m agentenv.cli``: the agentenv CLI (as ``python -m agentenv``)."""

import sys

from agentenv.cli.entry import main

sys.exit(main())
