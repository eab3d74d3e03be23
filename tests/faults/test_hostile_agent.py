"""A hostile agent against real ``agentenv run`` processes: two rollouts at once, each agent going for what the
other rollout, the trainer and the host hold. Each row asserts the run ends normally and what it went for was not
there: the trainer's secrets and token, the sibling's capture key and MCP token, the bundle's tasks and verifiers
(even with ``{bundle}`` in its command), the bundle's own files to rewrite, host files, a loopback service, and a
daemon that drops its tags outliving the run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import running, wait_until
from tests.support.bundles import copy_bundle, patch
from tests.support.harness import HARNESS

SNOOP = r"""
import json, os, socket, subprocess, sys, time, urllib.request
bundle, port, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
time.sleep(2)  # the sibling rollout's agent is running by now
seen = {"environ": dict(os.environ), "procs": {}, "files": {}, "writes": {}}
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("cmdline", "environ"):
        try:
            seen["procs"].setdefault(pid, {})[part] = open(f"/proc/{pid}/{part}", "rb").read().decode(errors="replace")
        except OSError as exc:
            seen["procs"].setdefault(pid, {})[part] = f"unreadable: {exc}"
for name in ("bundle.yaml", "tasks/train.yaml", "calc_env.py"):
    try:
        seen["files"][name] = open(os.path.join(bundle, name)).read()
    except OSError as exc:
        seen["files"][name] = f"unreadable: {exc}"
for target in (os.path.join(bundle, "agents", "snoop.py"), os.path.join(os.environ["SNOOP_OUTSIDE"], "planted")):
    try:
        with open(target, "a") as f:
            f.write("# rewritten by the policy\n")
        seen["writes"][target] = "written"
    except OSError as exc:
        seen["writes"][target] = f"refused: {exc}"
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    seen["port"] = "connected"
except OSError as exc:
    seen["port"] = f"refused: {exc}"
# a daemon in a session of its own, without the owner tags agentenv gave it
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
subprocess.Popen(["sleep", marker], start_new_session=True, env={}, **quiet)
body = json.dumps({"model": os.environ["AGENTENV_MODEL"], "messages": [{"role": "user", "content": "hi"}]}).encode()
headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
ask = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body, headers)
urllib.request.urlopen(ask, timeout=60).read()
with open("findings.json", "w") as f:
    json.dump(seen, f)
print("42")
"""

MARKER = "3171.25"  # sleep's argument: how the daemon is found in the host's process table afterwards


def snoop_bundle(tmp_path: Path, port: int) -> Path:
    bundle = copy_bundle(tmp_path, HARNESS)
    (bundle / "agents" / "snoop.py").write_text(SNOOP, encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    patch(bundle / "bundle.yaml", "agents:\n", "agents:\n  snoop:\n    kind: process\n"
          f"    command: [python, \"{{bundle}}/agents/snoop.py\", \"{{bundle}}\", \"{port}\", \"{MARKER}\"]\n"
          f"    env: {{SNOOP_OUTSIDE: \"{outside}\"}}\n")  # fmt: skip
    return bundle


def start_run(bundle: Path, engine: Any, secrets: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "agentenv.cli", "run", str(bundle), "multiply", "--llm-url", engine.url,
            "--model", "tiny/policy", "--agent", "snoop", "--capture", "--keep"]  # fmt: skip
    env = {**os.environ, "NO_PROXY": "127.0.0.1", **secrets}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def findings(stdout: str) -> dict[str, Any]:
    kept = Path(stdout.split("kept the agents' folders: ", 1)[1].splitlines()[0])
    (found,) = kept.rglob("findings.json")
    return json.loads(found.read_text(encoding="utf-8"))


def daemons() -> list[int]:
    return running(MARKER)


def test_two_hostile_agents_at_once_reach_nothing_of_the_trainer_the_host_or_each_other(engine, tmp_path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # a loopback service of the host: not the agent's
    port = listener.getsockname()[1]
    secrets = [
        {"AGENTENV_TOKEN": "tok-trainer-a-5e1", "AWS_SECRET_ACCESS_KEY": "aws-a-90f3", "HF_TOKEN": "hf-a-11"},
        {"AGENTENV_TOKEN": "tok-trainer-b-7c2", "AWS_SECRET_ACCESS_KEY": "aws-b-4d18", "HF_TOKEN": "hf-b-22"},
    ]
    bundles = [snoop_bundle(tmp_path / name, port) for name in ("a", "b")]
    try:
        runs = [start_run(bundle, engine, s) for bundle, s in zip(bundles, secrets, strict=True)]
        outs = [run.communicate(timeout=300) for run in runs]
    finally:
        listener.close()
    for run, (stdout, stderr) in zip(runs, outs, strict=True):
        assert run.returncode == 0, stderr
        assert "reward: " in stdout and "capture: 1 model call(s)" in stdout
    seen = [findings(stdout) for stdout, _ in outs]
    texts = [json.dumps(s) for s in seen]
    for i, (mine, text) in enumerate(zip(seen, texts, strict=True)):
        other = seen[1 - i]["environ"]
        # no secret of either trainer anywhere it looked: its environment, every /proc/<pid>/environ it saw
        assert not [v for s in secrets for v in s.values() if v in text]
        # the sibling's keys: its capture key and its MCP token are not in anything it could read
        assert mine["environ"]["AGENTENV_API_KEY"] != other["AGENTENV_API_KEY"]
        assert other["AGENTENV_API_KEY"] not in text and other["AGENTENV_MCP_TOKEN"] not in text
        # its own process table: no trainer, no sibling
        assert not [p for p in mine["procs"].values() if "agentenv" in p["cmdline"] and "snoop.py" not in p["cmdline"]]
        # {bundle} in its command shows its program, never the tasks, verifiers or bundle file
        assert all(v.startswith("unreadable") for v in mine["files"].values()), mine["files"]
        assert all(v.startswith("refused") for v in mine["writes"].values()), mine["writes"]
        assert mine["port"].startswith("refused")
    for bundle in bundles:  # the next run would run the bundle's agent as written, not the policy's rewrite
        assert (bundle / "agents" / "snoop.py").read_text(encoding="utf-8") == SNOOP
        assert not any((bundle.parent / "outside").iterdir())
    wait_until(lambda: daemons() == [], timeout=10)  # the tagless daemon died with its sandbox
    assert daemons() == []
