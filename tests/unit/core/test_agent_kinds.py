"""Agents in bundles: agent kinds are plugins, deploy steps are checked at load, each kind's launch record."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from agentenv import load_bundle
from agentenv.engine.agents import AgentRequest, Endpoint, Launch, McpServer
from agentenv.plugins import AgentKind, Plugins, hookimpl
from agentenv.specs import AgentSpec

from tests.support.bundles import copy_bundle, line_of, only_problem, patch, refused
from tests.support.harness import HARNESS


def request(kind: str, tmp_path: Path, *, turn: int = 0, mcp: bool = True, **options) -> AgentRequest:
    return AgentRequest(
        spec=AgentSpec(name="solver", kind=kind, **options),
        role="solver",
        prompt="Fix the test.",
        system="You are careful.",
        turn=turn,
        endpoint=Endpoint("http://127.0.0.1:7000/v1", "trl-policy-v3", "ak-secret"),
        workdir=tmp_path / "work",
        home=tmp_path / "home",
        bundle_dir=tmp_path / "bundle",
        mcp=McpServer("http://127.0.0.1:7001/mcp", "mcp-token") if mcp else None,
    )


class SandboxPlugin:
    """A plugin's agent kind: what a container-sandbox plugin would register."""

    @hookimpl
    def agentenv_agent_kinds(self):
        def check(spec, bundle_dir):
            return [] if "image" in spec.options else ["missing 'image'"]

        yield AgentKind(
            name="sandboxed", launch=lambda request: Launch(argv=("sandbox-run", request.prompt)), check=check
        )


def test_agentenv_agent_kinds_registers_kinds_bundles_deploy(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(bundle / "bundle.yaml", "  claude:\n    kind: claude-code", "  claude:\n    kind: sandboxed\n    image: x")
    loaded = Plugins(entry_points=True, extra=[("sandbox", SandboxPlugin())])
    assert {"process", "claude-code", "codex", "opencode", "mini-swe-agent", "sandboxed"} <= set(loaded.agent_kinds())
    assert load_bundle(bundle, plugin_set=loaded).agents["claude"].options == {"image": "x"}


def test_an_unknown_agent_kind_is_refused_at_load_naming_the_known_ones(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(bundle / "bundle.yaml", "kind: claude-code", "kind: claud-code")
    problem = only_problem(refused(bundle))
    assert (problem.file, problem.field) == ("bundle.yaml", "agents.claude.kind")
    assert problem.line == line_of(bundle / "bundle.yaml", "kind: claud-code")
    assert (
        "unknown agent kind 'claud-code'; known: claude-code, codex, mini-swe-agent, opencode, process"
        in problem.message
    )


def test_a_kinds_check_refuses_a_bad_agent_spec(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(
        bundle / "bundle.yaml", "  opencode:\n    kind: opencode", "  opencode:\n    kind: opencode\n    max_turns: 3"
    )
    problem = only_problem(refused(bundle))
    assert problem.field == "agents.opencode"
    assert "unknown field 'max_turns'; a opencode agent takes args, command, env" in problem.message


def test_a_deploy_step_naming_an_unknown_agent_is_refused(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(
        bundle / "tasks" / "faults.yaml",
        "deploy: [{agent: crash, role: solver}]",
        "deploy: [{agent: crsh, role: solver}]",
    )
    problem = only_problem(refused(bundle))
    assert (problem.file, problem.field) == ("tasks/faults.yaml", "deploy[0].agent")
    assert "agent 'crsh' is not in agents: of bundle.yaml; known: absent, chat, claude" in problem.message


def test_a_judge_verifier_with_no_endpoint_needs_a_judge_step(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(
        bundle / "tasks" / "judged.yaml",
        "    - {role: judge, endpoint: {base_url: 'http://127.0.0.1:9/v1', model: tiny/judge}}\n",
        "",
    )
    problem = only_problem(refused(bundle))
    assert problem.field == "turns[0].verifiers[0]"
    assert "judge verifier 'judged' has no endpoint and task 'judged' deploys no judge" in problem.message


def test_a_judge_verifier_never_asks_the_policy(tmp_path):
    bundle = copy_bundle(tmp_path, HARNESS)
    patch(bundle / "tasks" / "leftout.yaml", "endpoint: {base_url: 'http://127.0.0.1:9/v1', model: tiny/judge, "
          "key_var: AGENTENV_TEST_UNSET_JUDGE_KEY}", "endpoint: policy")  # fmt: skip
    problem = only_problem(refused(bundle))
    assert problem.field == "turns[0].verifiers[0].endpoint"
    assert "a judge never asks the model being trained" in problem.message


def test_the_process_kind_fills_its_placeholders_and_gives_the_endpoint_in_the_environment(tmp_path):
    kind = Plugins(entry_points=False).agent_kinds()["process"]
    first = kind.launch(request("process", tmp_path, command=["python", "{bundle}/a.py", "{prompt}"],
                                resume=["python", "{bundle}/a.py", "--resume"], env={"X": 1}))  # fmt: skip
    later = kind.launch(request("process", tmp_path, turn=1, command=["python", "a.py"], resume=["python", "b.py"]))
    assert first.argv == (sys.executable, f"{tmp_path}/bundle/a.py", "You are careful.\n\nFix the test.")
    assert later.argv == (sys.executable, "b.py")
    assert first.env["OPENAI_BASE_URL"] == "http://127.0.0.1:7000/v1" and first.env["OPENAI_API_KEY"] == "ak-secret"
    assert first.env["AGENTENV_MCP_URL"] == "http://127.0.0.1:7001/mcp" and first.env["X"] == "1"


def test_claude_code_speaks_anthropic_to_its_endpoint_and_gets_the_episode_tools_over_mcp(tmp_path):
    kind = Plugins().agent_kinds()["claude-code"]
    launch = kind.launch(request("claude-code", tmp_path))
    resumed = kind.launch(request("claude-code", tmp_path, turn=1, mcp=False))
    assert kind.dialect == "anthropic"
    assert (
        launch.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:7000" and launch.env["ANTHROPIC_API_KEY"] == "ak-secret"
    )
    assert launch.stdin == "Fix the test." and launch.argv[launch.argv.index("--model") + 1] == "trl-policy-v3"
    config = json.loads(launch.files[".agentenv/mcp.json"])
    assert config == {"mcpServers": {"env": {"type": "http", "url": "http://127.0.0.1:7001/mcp",
                                             "headers": {"Authorization": "Bearer mcp-token"}}}}  # fmt: skip
    assert "--strict-mcp-config" in launch.argv and "--append-system-prompt" in launch.argv
    assert "--continue" in resumed.argv and "--mcp-config" not in resumed.argv


def test_codex_opencode_and_mini_swe_agent_are_pointed_at_their_endpoint(tmp_path):
    kinds = Plugins().agent_kinds()
    codex = kinds["codex"].launch(request("codex", tmp_path))
    opencode = kinds["opencode"].launch(request("opencode", tmp_path))
    mini = kinds["mini-swe-agent"].launch(request("mini-swe-agent", tmp_path, mcp=False))
    assert 'model_providers.agentenv.base_url="http://127.0.0.1:7000/v1"' in codex.argv
    assert (
        'mcp_servers.env.url="http://127.0.0.1:7001/mcp"' in codex.argv and codex.env["AGENTENV_API_KEY"] == "ak-secret"
    )
    config = json.loads(opencode.env["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["agentenv"]["options"] == {"baseURL": "http://127.0.0.1:7000/v1", "apiKey": "ak-secret"}
    assert config["mcp"]["env"]["headers"] == {"Authorization": "Bearer mcp-token"}
    assert opencode.argv[-1] == "You are careful.\n\nFix the test." and "--continue" not in opencode.argv
    assert mini.argv[mini.argv.index("-m") + 1] == "openai/trl-policy-v3" and not kinds["mini-swe-agent"].mcp
    assert mini.env["OPENAI_API_BASE"] == "http://127.0.0.1:7000/v1"


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        ('{"type":"text","part":{"type":"text","messageID":"m1","text":"thinking"}}\n'
         '{"type":"text","part":{"type":"text","messageID":"m2","text":"The answer is 42."}}', "The answer is 42."),
        ("not json\n", ""),
    ],
)  # fmt: skip
def test_opencodes_reply_is_its_last_text_part(text, reply):
    from agentenv_harness.kinds import _opencode_reply

    assert _opencode_reply(text) == reply
