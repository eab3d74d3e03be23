"""A hostile policy against real ``agentenv serve`` processes: what its ``bash`` commands and the programs it steers
can reach. Each row asserts the server survives, the rollout's outcome, and that what it went for was not there.

Unlike the rest of the matrix, these rows run on one event loop, uvloop (what ``agentenv serve`` picks wherever it is
installed): the sandbox decides what a policy reaches, not the loop that answers its calls, and every row passed on
both loops in every run while it ran on both (to 2026-12-03).
"""

from __future__ import annotations

import re
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from agentenv.client.settings import Shared

from tests.support import running, wait_until
from tests.support.bundles import copy_bundle, patch
from tests.support.faults import Matrix, play, run


@pytest.fixture
def loop() -> str:
    """One event loop for these rows (see the module's docstring)."""
    return "uvloop"


TOKEN_VAR = "AGENTENV_FAULT_TOKEN"
TOKEN = "tok-hostile-9d2f61c0"
OUTSIDE = {"OPENAI_API_KEY": "sk-outside-31c5", "AWS_SECRET_ACCESS_KEY": "aws-outside-77e0", "HF_TOKEN": "hf-ou-02"}


def shell(shared: Shared, *commands: str, task: str = "bash") -> tuple[list[str], Any]:
    """Play ``task`` with each of ``commands`` as a ``bash`` call, then the reply ``hi``; returns the answers and
    the rollout's record."""
    answers: list[str] = []

    async def first(rollout: Any) -> None:
        for command in commands:
            answers.append((await rollout.call("bash", {"command": command})).text)

    return answers, run(play(shared, task, (), "hi", first=first))


def test_env_shows_no_server_token_and_no_outside_key(matrix: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    server = matrix.serve("--token-var", TOKEN_VAR, env={TOKEN_VAR: TOKEN, **OUTSIDE})
    monkeypatch.setenv(TOKEN_VAR, TOKEN)  # the client reads the token from its own environment
    shared = Shared(server.url, token_var=TOKEN_VAR)
    answers, record = shell(shared, "env", f"printenv {TOKEN_VAR} OPENAI_API_KEY; echo done")
    result = matrix.saw(record)
    assert (result.outcome, result.reward) == ("scored", 1.0)
    for secret in (TOKEN, *OUTSIDE.values()):
        assert secret not in answers[0] and secret not in answers[1]
    assert "HOME=" in answers[0] and "done" in answers[1]
    assert server.proc is not None and server.proc.poll() is None
    code, stderr = server.terminate()
    assert code == 0, stderr


def test_a_bundle_passing_the_servers_token_variable_is_refused_at_start(matrix: Matrix, tmp_path: Path) -> None:
    bundle = copy_bundle(tmp_path)
    patch(
        bundle / "bundle.yaml",
        "pass_env: [AGENTENV_FAKE_LEDGER, AGENTENV_FAULT_MARK]",
        f"pass_env: [AGENTENV_FAKE_LEDGER, AGENTENV_FAULT_MARK, {TOKEN_VAR}]",
    )
    try:
        matrix.serve("--token-var", TOKEN_VAR, bundle=bundle, env={TOKEN_VAR: TOKEN})
    except RuntimeError as exc:
        refusal = str(exc)
    else:
        raise AssertionError("agentenv serve started with a bundle that passes its token to an env program")
    assert "envs.proc.pass_env lists AGENTENV_FAULT_TOKEN, the server's token variable (--token-var)" in refusal
    assert TOKEN not in refusal


# --- the sandbox rows: each ran on the host before it (AGENTENV_SANDBOX=none shows them fail) -------------------

LIMITS = "{call_seconds: 5, memory_mb: 128, pids: 64, file_mb: 4, disk_mb: 16}"


def limited(tmp_path: Path) -> Path:
    """The fake bundle with a ``bash`` env of tight limits (the fault mark passed, so what it leaves is found)."""
    bundle = copy_bundle(tmp_path)
    bash = f"  bash:\n    kind: bash\n    pass_env: [AGENTENV_FAULT_MARK]\n    sandbox: {LIMITS}\n"
    patch(bundle / "bundle.yaml", "envs:\n", "envs:\n" + bash)
    return bundle


def hostile(matrix: Matrix, tmp_path: Path, *commands: str, **serve: Any) -> tuple[list[str], Any, Any]:
    """Serve the limited bundle, play ``commands`` as bash calls; the answers, the result, the server."""
    bundle = limited(tmp_path)
    server = matrix.serve(bundle=bundle, **serve)
    filled = [c.replace("{bundle}", str(bundle)).replace("{port}", str(server.port)) for c in commands]
    answers, record = shell(Shared(server.url), *filled)
    result = matrix.saw(record)
    assert server.proc is not None and server.proc.poll() is None, "the server died"
    assert (result.outcome, result.reward) == ("scored", 1.0)
    return answers, result, server


def test_the_answer_key_verifiers_and_bundle_files_are_not_there(matrix: Matrix, tmp_path: Path) -> None:
    answers, _, _ = hostile(
        matrix, tmp_path, "cat {bundle}/tasks/echo.yaml", "cat {bundle}/fake_env.py", "ls {bundle} {bundle}/.."
    )
    for answer in answers:
        assert "No such file or directory" in answer, answer
    assert "said_echo" not in "".join(answers) and "solution:" not in "".join(answers)


def test_the_bundle_files_cannot_be_written(matrix: Matrix, tmp_path: Path) -> None:
    answers, _, _ = hostile(matrix, tmp_path, "echo 'raise SystemExit  # rewritten' >> {bundle}/fake_proc.py; echo $?")
    assert "rewritten" not in (tmp_path / "fake" / "fake_proc.py").read_text()
    assert answers[0].splitlines()[-2] != "0"


def test_the_servers_environment_is_not_there(matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    bundle = limited(tmp_path)
    server = matrix.serve("--token-var", TOKEN_VAR, bundle=bundle, env={TOKEN_VAR: TOKEN, **OUTSIDE})
    answers, record = shell(
        Shared(server.url, token_var=TOKEN_VAR),
        "cat /proc/$PPID/environ /proc/1/environ; echo",
        "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -a -e tok- -e outside -e hf-ou; env",
    )
    assert (matrix.saw(record).outcome, matrix.saw(record).reward) == ("scored", 1.0)
    for secret in (TOKEN, *OUTSIDE.values()):
        assert all(secret not in answer for answer in answers)


def test_the_server_cannot_be_signalled(matrix: Matrix, tmp_path: Path) -> None:
    bundle = limited(tmp_path)
    server = matrix.serve(bundle=bundle)
    assert server.proc is not None
    answers, record = shell(
        Shared(server.url), f"kill -9 {server.proc.pid}; kill -9 -1; kill -9 1; echo sent", "echo on"
    )
    assert server.proc.poll() is None, "the server was killed"
    assert "No such process" in answers[0] and answers[1].startswith("on")
    assert record.result is not None and record.result.outcome == "scored"


def test_the_servers_port_and_other_loopback_services_are_not_reachable(matrix: Matrix, tmp_path: Path) -> None:
    with socket.socket() as other:  # a loopback service of the host (a trainer's vLLM, a database)
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        elsewhere = f"echo > /dev/tcp/127.0.0.1/{other.getsockname()[1]} && echo reached"
        answers, _, _ = hostile(matrix, tmp_path, "echo > /dev/tcp/127.0.0.1/{port} && echo reached", elsewhere)
    for answer in answers:
        assert "reached" not in answer and "Connection refused" in answer, answer


def test_no_user_namespace_of_its_own_gives_it_root(matrix: Matrix, tmp_path: Path) -> None:
    # a user namespace of its own makes the policy root there, with capabilities: the door most kernel privilege
    # escalations go through (nftables, overlayfs); bwrap --disable-userns shuts it
    answers, _, _ = hostile(matrix, tmp_path, "unshare --user --map-root-user id -u; echo rc=$?", "id -u")
    assert "rc=1" in answers[0] and "unshare failed" in answers[0], answers[0]
    assert answers[1].startswith("1000\n")


def test_a_fork_bomb_stops_at_the_process_limit(matrix: Matrix, tmp_path: Path) -> None:
    answers, _, _ = hostile(matrix, tmp_path, "bomb() { bomb | bomb & }; bomb; sleep 2; echo tried", "echo alive")
    assert "[process limit (64 processes) reached]" in answers[0]
    assert answers[1].startswith("alive")


def test_a_memory_hog_stops_at_the_memory_limit(matrix: Matrix, tmp_path: Path) -> None:
    answers, _, _ = hostile(matrix, tmp_path, "perl -e '$x = \"a\" x 1_000_000_000'; echo done", "echo alive")
    assert "[memory limit (128 MiB) reached]" in answers[0]
    assert answers[1].startswith("alive")


def test_the_disk_fills_at_its_limit_not_the_hosts(matrix: Matrix, tmp_path: Path) -> None:
    # 192 MB asked for against disk_mb 16: the writes stop at the episode's own tmpfs, in RAM, never the host's disk.
    # (Before, the row compared the host's free space in /tmp before and after, and failed whenever anything else on
    # the machine wrote there.)
    fill = "for i in $(seq 64); do head -c 3000000 /dev/zero > f$i || break; done; echo kept $(du -sk . | cut -f1) KiB"
    answers, _, _ = hostile(matrix, tmp_path, fill)
    assert "No space left on device" in answers[0]
    kept = re.search(r"kept (\d+) KiB", answers[0])
    assert kept, answers[0]
    kept_kb = int(kept.group(1))
    assert 12 * 1024 <= kept_kb <= 16 * 1024 + 64, kept_kb  # it filled its 16 MiB, and no more


def test_a_symlink_leads_nowhere_outside(matrix: Matrix, tmp_path: Path) -> None:
    answers, _, _ = hostile(matrix, tmp_path, "ln -s {bundle}/tasks t; ln -s / root; cat t/echo.yaml root/etc/shadow")
    assert answers[0].count("No such file or directory") == 2


def test_nothing_it_starts_outlives_the_episode(matrix: Matrix, tmp_path: Path) -> None:
    marker = f"agentenv-hostile-{uuid.uuid4().hex}"
    hostile(matrix, tmp_path, f"(setsid nohup bash -c 'exec -a {marker} sleep 600' >/dev/null 2>&1 &); echo left")
    assert wait_until(lambda: not running(marker), 5)  # and the row's fixture finds no process with its mark
