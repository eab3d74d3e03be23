"""What the tests of every tier share: bundles and their paths, real servers, the stand-in models, /proc, waiting.

Its fixtures come from :mod:`tests.support.fixtures`, a pytest plugin the root ``tests/conftest.py`` registers; a
test module imports helpers from here, never a fixture and never a conftest.
"""

from tests.support.bundles import Ledger, with_ops
from tests.support.paths import ARITH, FAKE, HARNESS, INBOX, ROOT, VERDICTS
from tests.support.procs import alive, gone, running
from tests.support.servers import ServeProcess, free_port
from tests.support.waiting import until, wait_until

__all__ = ["ARITH", "FAKE", "HARNESS", "INBOX", "ROOT", "VERDICTS", "Ledger", "ServeProcess", "alive", "free_port",
           "gone", "running", "until", "wait_until", "with_ops"]  # fmt: skip
