"""A subprocess env's program in its sandbox (real bubblewrap): the policy's arguments reach a program that sees only
the bundle files it declares, cannot change them, and has no network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from agentenv import load_bundle

from tests.support.bundles import copy_bundle, patch, play

ROOT = Path(__file__).resolve().parents[3]

# a subprocess env whose one tool runs what the policy sends: a Python expression (an env that executes code)
PROBE = """import json, sys
for line in sys.stdin:
    req = json.loads(line)
    out = {"id": req["id"], "ok": True}
    if req["op"] == "tools":
        schema = {"type": "object", "properties": {"code": {"type": "string"}}}
        out["result"] = [{"name": "run", "description": "d", "parameters": schema}]
    elif req["op"] == "call":
        try:
            out["result"] = repr(eval(req["args"]["code"]))
        except Exception as exc:
            out["result"] = type(exc).__name__
    print(json.dumps(out), flush=True)
    if req["op"] == "teardown":
        break
"""
ENV = """  probe:
    kind: subprocess
    command: [python, probe.py{extra}]
    sandbox: {files: [data]}
"""
TASK = """id: probe
split: train
toolset: {envs: [probe]}
turns:
- prompt: Probe.
  verifiers: [{id: v, kind: contains, answer: hi}]
"""


# "." as an argument: before, the bundle folder a command named was bound whole, tasks and verifiers with it
@pytest.mark.parametrize("extra", ["", ", ."], ids=["files", "dot-argument"])
async def test_the_program_sees_its_files_and_nothing_else_of_the_bundle(tmp_path, extra):
    bundle = copy_bundle(tmp_path)
    (bundle / "probe.py").write_text(PROBE)
    (bundle / "data").mkdir()
    (bundle / "data" / "notes.json").write_text(json.dumps({"code": 4217}))
    (bundle / "tasks" / "probe.yaml").write_text(TASK)
    patch(bundle / "bundle.yaml", "envs:\n", "envs:\n" + ENV.replace("{extra}", extra))
    codes = [
        "open('data/notes.json').read()",
        "open('tasks/echo.yaml').read()",
        "open('bundle.yaml').read()",
        "open('probe.py', 'a').write('x')",
        "open('/proc/1/environ').read()",
        "__import__('socket').create_connection(('127.0.0.1', 22), 2)",
        "open(__import__('os').environ['HOME'] + '/kept', 'w').write('ok')",
    ]
    _, steps, result = await play(load_bundle(bundle), "probe", [("run", {"code": c}) for c in codes], ["hi"])
    answers = [s.text for s in steps[:-1]]
    assert answers[0] == repr(json.dumps({"code": 4217}))
    assert answers[1:4] == ["FileNotFoundError", "FileNotFoundError", "OSError"]  # read-only: EROFS
    names = {pair.split("=", 1)[0] for pair in eval(answers[4]).split("\0") if pair}  # its sandbox's init's
    assert names <= {"PATH", "LANG", "HOME", "TMPDIR", "AGENTENV_OWNERS", "PWD"}, names
    assert answers[5] in ("ConnectionRefusedError", "OSError")
    assert answers[6] == "2"
    assert (result.outcome, result.reward) == ("scored", 1.0)
    assert (bundle / "probe.py").read_text() == PROBE


def test_an_interpreter_reached_through_a_folder_of_links_starts_in_the_sandbox(tmp_path):
    # a venv made by a linked Python (nox links pyenv's into .nox/pythons; uv venv --python LINK) names that link as
    # its python: before, the sandbox bound the venv and the interpreter but not the link between them, and every
    # env program of such a venv failed with "bwrap: execvp .../bin/python: No such file or directory"
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "python").symlink_to(sys.executable)
    subprocess.run([tmp_path / "links" / "python", "-m", "venv", "--without-pip", tmp_path / "v"], check=True)
    assert os.readlink(tmp_path / "v" / "bin" / "python") == str(tmp_path / "links" / "python")
    site_packages = next((tmp_path / "v" / "lib").glob("python3.*/site-packages"))
    (site_packages / "parent.pth").write_text(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    bundle = ROOT / "tests" / "fixtures" / "bundles" / "envbugs"
    argv = [tmp_path / "v" / "bin" / "python", "-m", "agentenv.cli", "play", bundle, "sync-check", "--reference"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reward: 1" in done.stdout and "No such file" not in done.stdout
    assert not (tmp_path / "links" / "python").is_dir()  # it stays one link: the folder itself is not shown
