"""A bare OpenEnv 0.10 server stepping a no-op env: the baseline of bench/server_roundtrip.py.

usage: python bench/_bare_openenv.py PORT {async|sync} [MAX_CONCURRENT_ENVS]
"""

from __future__ import annotations

import sys

from agentenv_server._openenv import import_openenv

import_openenv()  # the same import path as agentenv's server, so both processes start alike

import uvicorn  # noqa: E402
from openenv.core import Action, Environment, Observation, State, create_fastapi_app  # noqa: E402


class NoopAction(Action):
    op: str = "noop"


class NoopObservation(Observation):
    text: str = ""


class SyncNoop(Environment[NoopAction, NoopObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id="bare", step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs):
        return NoopObservation(text="ready")

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        return NoopObservation(text="ok")

    @property
    def state(self) -> State:
        return self._state


class AsyncNoop(SyncNoop):
    async def reset_async(self, seed=None, episode_id=None, **kwargs):
        return NoopObservation(text="ready")

    async def step_async(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        return NoopObservation(text="ok")


if __name__ == "__main__":
    port, mode = int(sys.argv[1]), sys.argv[2]
    capacity = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    env = AsyncNoop if mode == "async" else SyncNoop
    app = create_fastapi_app(env, NoopAction, NoopObservation, max_concurrent_envs=capacity)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_ping_interval=20, ws_ping_timeout=20)
