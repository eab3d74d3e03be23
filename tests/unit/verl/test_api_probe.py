"""The API probe: an integration refuses a trainer that lacks an internal it leans on, before any rollout runs.

The trainer is a real package on disk (a stand-in ``verl`` with its distribution metadata, first on the
path of a fresh interpreter), and the code under test is agentenv-verl's loop module as verl imports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import ROOT

# verl's agent loop modules as agentenv_verl.loop imports and probes them; {merge} is the Continuous Token helper
_AGENT_LOOP = """
class AgentLoopOutput:
    def __init__(self):
        self.response_ids = []
        self.response_mask = []
        self.reward_score = None
        self.num_turns = 0
        self.extra_fields = {{}}


class AgentLoopBase:
    def __init__(self, *args, **kwargs):
        self.tokenizer = None
        self.rollout_config = None

    async def {merge}(self, previous_messages, updated_messages, runtime_token_ids, response_mask,
                      response_logprobs=None, tools=None):
        return "merged"

    def _cap_text_prompt_length(self, prompt_ids):
        return prompt_ids
"""
_TOOL_AGENT_LOOP = """
import enum

from verl.experimental.agent_loop.agent_loop import AgentLoopBase


class AgentState(enum.Enum):
    GENERATING = "generating"
    TERMINATED = "terminated"


class AgentData:
    def __init__(self):
        self.messages = []
        self.prompt_ids = []
        self.response_ids = []
        self.response_mask = []
        self.response_logprobs = []
        self.tool_calls = []
        self.user_turns = 0
        self.metrics = {{}}


class ToolAgentLoop(AgentLoopBase):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tools = {{}}
        self.tool_schemas = []
        self.response_length = 0
        self.max_tool_response_length = 0
        self.tool_response_truncate_side = "middle"

    async def run(self, sampling_params, **kwargs): ...
    async def _handle_pending_state(self, agent_data, sampling_params): ...
    async def _handle_generating_state(self, agent_data, sampling_params, {generating}): ...
    async def _handle_processing_tools_state(self, agent_data): ...
    async def _call_tool(self, tool_call, tools_kwargs, agent_data): ...
"""
_SCHEMAS = """
class OpenAIFunctionToolSchema:
    pass


class ToolResponse:
    text = None
"""


def fake_verl(root: Path, version: str, *, merge: str, generating: str = "ignore_termination=False") -> Path:
    """A ``verl`` distribution at ``version`` in ``root``: its metadata and the agent loop modules the loop imports."""
    files = {
        "verl/__init__.py": "",
        "verl/experimental/__init__.py": "",
        "verl/experimental/agent_loop/__init__.py": "",
        "verl/experimental/agent_loop/agent_loop.py": _AGENT_LOOP.format(merge=merge),
        "verl/experimental/agent_loop/tool_agent_loop.py": _TOOL_AGENT_LOOP.format(generating=generating),
        "verl/tools/__init__.py": "",
        "verl/tools/schemas.py": _SCHEMAS,
        f"verl-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: verl\nVersion: {version}\n",
        f"verl-{version}.dist-info/RECORD": "",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def load_loop(fake: Path, code: str = "") -> subprocess.CompletedProcess[str]:
    """Import agentenv_verl.loop in a fresh interpreter whose first path entry is the stand-in verl."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])}
    program = f"import agentenv_verl.loop as loop\n{code}"
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def verl_range() -> str:
    from agentenv_verl import SUPPORTED

    return SUPPORTED


def test_a_verl_without_the_context_merge_helper_is_refused_naming_version_range_and_name(tmp_path, verl_range):
    fake = fake_verl(tmp_path, "0.9.7", merge="ct_merge_turn_msg")  # a release that renamed it
    done = load_loop(fake)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("agentenv.plugins.internals.MissingInternal: agentenv-verl leans on verl internals")
    assert "verl 0.9.7 lacks" in last and f"supports {verl_range}" in last
    assert "verl.experimental.agent_loop.agent_loop.AgentLoopBase.ct_merge_context_msg (not found)" in last
    assert "pip install 'agentenv-verl[verl]'" in last


def test_a_state_handler_without_a_parameter_the_loop_passes_is_refused(tmp_path):
    fake = fake_verl(tmp_path, "0.9.7", merge="ct_merge_context_msg", generating="stop=False")
    done = load_loop(fake)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "ToolAgentLoop._handle_generating_state's parameter(s) ignore_termination" in last
    assert "(it takes self, agent_data, sampling_params, stop)" in last


def test_a_verl_with_every_internal_loads_and_the_loop_is_its_tool_agent_loop(tmp_path):
    fake = fake_verl(tmp_path, "0.9.7", merge="ct_merge_context_msg")
    shown = "from importlib.metadata import version; print(loop.AgentEnvAgentLoop.__base__.__module__, version('verl'))"
    done = load_loop(fake, shown)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "verl.experimental.agent_loop.tool_agent_loop 0.9.7"
