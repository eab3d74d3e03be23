"""``agentenv run`` (a task with its deployed agents against an endpoint), ``agentenv plugins`` listing agent kinds,
and harness rollouts whose episodes are played on an agentenv server that restarts."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import free_port
from tests.support.harness import HARNESS, prompt_of
from tools.matrix import MATRIX


def agentenv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentenv.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_PROXY": "127.0.0.1"})  # fmt: skip


def test_agentenv_run_plays_a_task_with_its_agents_and_prints_the_reward_and_scores(engine):
    done = agentenv("run", str(HARNESS), "multiply", "--llm-url", f"{engine.url}/v1", "--model", "tiny/policy")
    assert done.returncode == 0, done.stderr
    assert "score answer: 1\nscore used-tool: 1\nreward: 1\n" in done.stdout
    assert "The answer is 42." in done.stdout  # the solver's reply, in the table of its runs


def test_agentenv_run_keep_prints_the_kept_folders_and_they_hold_the_agents_logs(engine):
    # before, --keep kept them and said nowhere where
    done = agentenv(
        "run", str(HARNESS), "multiply", "--llm-url", f"{engine.url}/v1", "--model", "tiny/policy", "--keep"
    )
    assert done.returncode == 0, done.stderr
    kept = Path(done.stdout.split("kept the agents' folders: ", 1)[1].splitlines()[0])
    try:
        assert kept.is_dir() and any(kept.rglob("logs/*.out"))
    finally:
        shutil.rmtree(kept)


def test_agentenv_run_agent_swaps_the_solver(engine):
    done = agentenv("run", str(HARNESS), "smoke", "--llm-url", f"{engine.url}/v1", "--model", "tiny/policy",
                    "--agent", "signed")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "(solved by the signed agent)" in done.stdout and "reward: 1" in done.stdout


def test_agentenv_run_capture_reports_the_trainable_turns(engine):
    done = agentenv("run", str(HARNESS), "direct", "--llm-url", engine.url, "--model", "tiny/policy", "--capture")
    assert done.returncode == 0, done.stderr
    assert "reward: 1" in done.stdout and "capture: 1 model call(s), " in done.stdout


def test_agentenv_run_capture_refusal_keeps_openenvs_whole_finding(engine):
    # before, the refusal kept OpenEnv's heading alone: "... the capture proxy: engine NOT reachable:."
    done = agentenv("run", str(HARNESS), "direct", "--llm-url", engine.url, "--model", "tiny/other", "--capture")
    assert done.returncode == 2
    assert (
        "cannot be trained on through the capture proxy: engine NOT reachable: model 'tiny/other' is not served "
        "here; available: ['tiny/policy']. Serve the model with vLLM" in done.stderr
    )


def test_agentenv_run_refuses_a_solver_that_is_not_installed_with_the_install_command(engine):
    # before, the deploy ran and failed: "solver 'absent' could not be started: No such file or directory"
    asked = len(engine.chats())  # the stand-in serves the whole module
    done = agentenv(
        "run", str(HARNESS), "multiply", "--llm-url", f"{engine.url}/v1", "--model", "tiny/policy", "--agent", "absent"
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "error: program 'agentenv-no-such-agent-program' of agent 'absent' is not installed (not on PATH); then run "
        "again (agentenv plugins shows which agent kinds run here)"
    )
    assert len(engine.chats()) == asked  # refused before any deploy


def test_agentenv_run_agent_process_says_how_to_declare_one(engine):
    done = agentenv(
        "run", str(HARNESS), "multiply", "--llm-url", f"{engine.url}/v1", "--model", "tiny/policy", "--agent", "process"
    )
    assert done.returncode == 2
    assert "error: --agent process: a process agent is a program of yours; declare it under agents: in bundle.yaml" in (
        done.stderr
    )


def test_agentenv_run_shows_a_failed_run_as_unscored(engine):
    done = agentenv("run", str(HARNESS), "crash", "--llm-url", f"{engine.url}/v1", "--model", "tiny/policy")
    assert done.returncode == 1
    assert "failed (crash during agent): solver 'crash' (process) exited with 3 on turn 1" in done.stdout
    assert "reward: None (a failed run is never trained on)" in done.stdout


def test_agentenv_plugins_lists_the_agent_kinds_and_the_harness_ranges():
    done = agentenv("plugins")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split()[:4] == ["claude-code", "anthropic", "over", "MCP"] for line in lines)
    assert any(line.split()[:3] == ["process", "openai", "over"] and line.endswith("ok") for line in lines)
    trl = MATRIX["harness-trl"].declared().removeprefix("trl")  # the range as agentenv-harness declares it
    assert any(line.split()[:3] == ["harness", "trl", trl] for line in lines)
    openenv = MATRIX["harness-openenv"].declared().removeprefix("openenv")
    installed = importlib.metadata.version("openenv")
    assert any(line.split()[:4] == ["harness-openenv", "openenv", openenv, installed] for line in lines)


def test_rollouts_waiting_for_a_restarting_env_server_say_so_once(make_factory, serve_process, caplog):
    port = free_port()
    server = serve_process(HARNESS, port=port)
    factory = make_factory(split="train", env_url=server.url)
    code, _ = server.terminate()  # the server goes down (a restart): the rollouts wait for it
    with caplog.at_level(logging.WARNING, logger="agentenv.session"):
        sessions = [factory.create(prompt_of(HARNESS, "direct", "train")) for _ in range(2)]
        serve_process(HARNESS, port=port)  # back, on the same address
        for session in sessions:
            session.wait_for_completion()
        verdicts = [session.verify([]) for session in sessions]
        for session in sessions:
            session.close()
    waits = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "waiting for" in r.getMessage()]
    assert code == 0 and [v.env_reward for v in verdicts] == [1.0, 1.0]
    assert len(waits) == 1 and waits[0].startswith(f"waiting for the agentenv server at {server.url}")
