"""The kept-out count: how many samples of this worker process were kept out of training without a verdict.

A sample the env could not judge is never trained on as a 0; but a policy that learns to trigger env
failures escapes their penalty that way, so the count must be visible. The reward function, the
single-turn loop and ``AgentEnvAgentLoop`` all count here (``COUNTER``): every judged sample is one of a
block of ``BLOCK`` (100), and a warning names the count when more than ``LIMIT`` (5) of a block were kept
out. Counted per worker process: each verl worker (agent loop or reward worker) keeps its own count.
Importing this module does not import verl.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from typing import Final

__all__ = ["BLOCK", "COUNTER", "LIMIT", "KeptOut"]

BLOCK: Final[int] = 100
LIMIT: Final[int] = 5

log = logging.getLogger("agentenv_verl")


class KeptOut:
    """Counts judged samples in blocks of ``block``; warns when more than ``limit`` of a block were kept out.

    ``note(None)`` counts a sample that was scored, ``note(kind)`` one kept out for ``kind`` (a failure kind
    of ``agentenv.faults``, or ``unscored``). The warning is said once per block, as soon as the count passes
    ``limit``; a block starts again after ``block`` samples. Thread-safe (verl scores samples in threads).
    """

    def __init__(self, block: int = BLOCK, limit: int = LIMIT, logger: logging.Logger = log) -> None:
        self.block, self.limit, self.log = int(block), int(limit), logger
        self.samples = 0  # in the current block
        self.kinds: collections.Counter[str] = collections.Counter()  # kept out in the current block, by kind
        self.total_samples = 0
        self.total_kept = 0
        self._warned = False
        self._lock = threading.Lock()

    @property
    def kept(self) -> int:
        """Samples kept out in the current block."""
        return sum(self.kinds.values())

    def note(self, kept_out: str | None) -> bool:
        """Count one judged sample (``kept_out``: None when scored, else why it was kept out); returns whether
        this call warned."""
        with self._lock:
            if self.samples >= self.block:
                self.samples, self.kinds, self._warned = 0, collections.Counter(), False
            self.samples += 1
            self.total_samples += 1
            if kept_out is None:
                return False
            self.kinds[kept_out] += 1
            self.total_kept += 1
            if self._warned or self.kept <= self.limit:
                return False
            self._warned = True
            kept, samples, kinds = self.kept, self.samples, ", ".join(f"{k} {n}" for k, n in self.kinds.most_common())
        self.log.warning(
            "%d of the last %d samples judged in this worker process (pid %d) were kept out of training without a "
            "verdict (%s): more than %d in a block of %d. A policy that learns to trigger env failures escapes their "
            "penalty this way; find the cause in the agentenv server's log. (Counted per worker process; said at most "
            "once per block of %d samples.)",
            kept,
            samples,
            os.getpid(),
            kinds,
            self.limit,
            self.block,
            self.block,
        )
        return True


#: The count of this process, shared by the reward function, the single-turn loop and AgentEnvAgentLoop.
COUNTER: Final[KeptOut] = KeptOut()
