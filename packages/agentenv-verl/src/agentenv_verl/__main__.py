"""``python -m agentenv_verl URL OUT``: the dataset writer (the same code as ``agentenv verl write``)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
