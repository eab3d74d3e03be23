"""OpenEnv's capture proxy beside the trainer: one proxy per factory, one capture session per rollout.

The proxy (``openenv.core.harness.capture``) sits between a solver agent and the trainer's engine; it
normalizes every call to a chat completion, asks the engine for token ids and log-probs, and records
each call of a session (keyed by the API key the agent sends) as a turn TRL can train on. Here it is
served on a free loopback port with its session routes (create, list, read, delete) behind a random
admin key that only this process knows, so an agent can neither list nor read other rollouts; each
rollout gets a fresh key, handed only to its solver. A sandboxed solver reaches the proxy through its sandbox's
relay, which is bound to the key it was given (``agentenv.sandbox.relay``): a call through it with any other key
(a sibling's, the admin key) is refused with 403, so no rollout can write into another's trace.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from agentenv.errors import AgentEnvError
from agentenv_server.access import FOREIGN_KEY, Turned, turn_away

from ._threads import LoopbackServer

if TYPE_CHECKING:
    import httpx
    from openenv.core.harness import TrainingTrace

__all__ = ["VLLM_FLAGS", "CaptureProxy", "policy_model", "require_tokens"]

# what makes vLLM return what the proxy records (>= 0.10.2); the capture proxy's own hint says the same
VLLM_FLAGS: Final = "--return-tokens-as-token-ids --logprobs-mode processed_logprobs"


def require_tokens(llm_url: str, model: str, *, timeout: float = 120.0) -> None:
    """Refuse an engine that cannot return token ids and processed log-probs (OpenEnv's ``require_llm``).

    Raises ``AgentEnvError`` naming the engine and the vLLM flags that give them.
    """
    from openenv.core.harness.capture import require_llm

    try:
        require_llm(llm_url, model, timeout=timeout, require_tokens=True)
    except RuntimeError as exc:
        finding = _finding(exc)
        raise AgentEnvError(
            f"the engine at {llm_url} ({model}) cannot be trained on through the capture proxy: {finding}. "
            f"Serve the model with vLLM >= 0.10.2 and {VLLM_FLAGS} (vllm serve MODEL {VLLM_FLAGS}; with LoRA "
            "add --enable-lora --max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1), or with SGLang built "
            "from main; check_llm=False skips this check (the rollouts are then not trainable)"
        ) from None


def _finding(exc: Exception) -> str:
    """OpenEnv's summary (its first paragraph, before the engine hint we replace) on one line: its heading, then
    each finding (``engine NOT reachable: HTTP 404 from /v1/chat/completions ...``), never the heading alone."""
    summary = str(exc).strip().split("\n\n", 1)[0]
    lines = [line.strip() for line in summary.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "")


async def policy_model(http: httpx.AsyncClient, llm_url: str, model: str, lora_name: str | None) -> str:
    """The name the policy is served as now: the newest ``{lora_name}-vN`` the engine lists, else ``model``.

    TRL's AsyncGRPO loads each new LoRA adapter as ``trl-policy-vN`` and tells the harness nothing; a
    rollout pins the name it started with, so all of its calls sample one version.
    """
    if not lora_name:
        return model
    response = await http.get(f"{llm_url.rstrip('/')}/v1/models")
    response.raise_for_status()
    pattern = re.compile(re.escape(lora_name) + r"-v(\d+)")
    versions = [
        (int(m.group(1)), entry["id"])
        for entry in response.json().get("data") or []
        if (m := pattern.fullmatch(str(entry.get("id"))))
    ]
    return max(versions)[1] if versions else model


class _RelayKeyGuard:
    """ASGI middleware: an HTTP request that came through a sandbox's keyed relay carrying another key gets 403."""

    def __init__(self, app: Any) -> None:
        from agentenv.sandbox import relayed_key
        from openenv.core.harness.capture.sessions import extract_api_key

        self.app = app
        self._bound_to = relayed_key
        self._key_of = extract_api_key  # the proxy's own reading of a request's key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        client = scope.get("client") if scope["type"] == "http" else None
        bound = self._bound_to(client[1]) if client else None
        if bound is not None:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []}
            if not secrets.compare_digest((self._key_of(headers) or "").encode(), bound.encode()):
                await turn_away(_NOT_ITS_KEY, scope, receive, send)
                return
        await self.app(scope, receive, send)


_NOT_ITS_KEY = Turned(
    403,
    FOREIGN_KEY,
    "this API key was not given to this sandbox: each rollout calls the model with its own key",
)


class CaptureProxy:
    """The capture proxy for one engine, served on ``127.0.0.1``; ``url`` is what a solver is pointed at.

    ``max_model_calls`` caps the model calls of one rollout (0: no cap): past it the proxy itself ends
    the agent's loop with a stop reply that is not recorded.
    """

    def __init__(self, llm_url: str, model: str, *, max_model_calls: int = 0, max_output_tokens: int = 8192) -> None:
        from openenv.core.harness.capture.server import create_app

        self.llm_url = llm_url.rstrip("/")
        self.model = model
        self._admin = secrets.token_urlsafe(32)
        self.app = create_app(
            llm_url=self.llm_url,
            model=model,
            admin_key=self._admin,
            capture_level="tokens",
            max_model_calls=max_model_calls,
            max_output_tokens=max_output_tokens,
        )
        self._server = LoopbackServer(_RelayKeyGuard(self.app), name="agentenv-capture-proxy")
        self.url = self._server.url

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header of the session routes (never given to an agent)."""
        return {"Authorization": f"Bearer {self._admin}"}

    async def open(
        self,
        http: httpx.AsyncClient,
        *,
        model: str,
        sampling: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Open a capture session whose calls are sent to the engine as ``model``; returns its key.

        The key is a fresh secret: the solver sends it as its API key, and no other rollout's calls can
        land in this session.
        """
        key = "ak-" + secrets.token_hex(20)
        body: dict[str, Any] = {
            "session_id": key,
            "purpose": "train",
            "llm_url": self.llm_url,
            "model": model,  # pinned for the whole rollout, even after the trainer publishes a newer policy
            "metadata": dict(metadata or {}),
        }
        if sampling:
            body["sampling"] = dict(sampling)
        response = await http.post(f"{self.url}/sessions", json=body, headers=self.admin_headers)
        if response.status_code != 200:
            raise AgentEnvError(f"the capture proxy refused a session for {model}: {response.text[:300]}")
        created = response.json()
        if created.get("rollout_type") != "train":
            await self.close(http, key)
            raise AgentEnvError(
                f"the engine at {self.llm_url} serves {model} at capture level {created.get('capture_level')!r}, "
                f"so nothing of this rollout could be trained on; serve it with {VLLM_FLAGS}"
            )
        return key

    def calls(self, key: str) -> int:
        """How many model calls the session recorded."""
        session = self.app.state.registry.get(key)
        return 0 if session is None else len(session.graph.nodes())

    def trace(self, key: str) -> TrainingTrace:
        """The session's calls as OpenEnv's ``TrainingTrace`` (token ids, log-probs and masks per turn).

        Raises ``LookupError`` for an unknown session and ``ValueError`` (OpenEnv's) for a capture that
        cannot be trained on (no model call, or fatal findings).
        """
        from openenv.core.harness.capture import to_training_trace
        from openenv.core.harness.capture.export import export_session

        session = self.app.state.registry.get(key)
        if session is None:
            raise LookupError(f"the capture proxy has no session {key[:8]}...")
        document = export_session(session, include_messages=True, capture_level=session.capture_level or "tokens")
        return to_training_trace(session.graph, document)

    async def close(self, http: httpx.AsyncClient, key: str) -> None:
        """Delete the session (its captured calls go with it)."""
        await http.delete(f"{self.url}/sessions/{key}", headers=self.admin_headers)

    def stop(self) -> None:
        """Stop serving."""
        self._server.stop()
