"""agentenv-kv: an example agentenv plugin, written from the hook docs as any third party would.

``kind: kv`` envs (``KvStore``), ``kind: kv-has`` verifiers, the ``kv-all`` reward rule, the
``agentenv kv`` command and an episode log (``$AGENTENV_KV_LOG``) all come from ``agentenv_kv.plugin``.
"""

from __future__ import annotations

from .store import KvStore

__all__ = ["KvStore"]
