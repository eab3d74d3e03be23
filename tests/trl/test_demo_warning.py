"""``agentenv demo`` silences TRL's experimental-feature notices in its own process only.

TRL warns that ``environment_factory`` is experimental. In the demo (agentenv's own command) nothing
about it is the user's to act on; in a user's training script that imports agentenv_trl, it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NOTICE = "which is an experimental feature"


def _without_silence() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TRL_EXPERIMENTAL_SILENCE"}


def test_the_demo_prints_no_experimental_notice(tmp_path: Path) -> None:
    agentenv = Path(sys.executable).with_name("agentenv")
    done = subprocess.run(
        [agentenv, "demo", "--quick", "--output-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=_without_silence(),
        cwd=tmp_path,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert NOTICE not in done.stderr + done.stdout


def test_a_process_that_imports_agentenv_trl_still_sees_the_notice() -> None:
    # after everything agentenv_trl and its plugin set up, no filter hides what GRPOTrainer warns
    code = (
        "import warnings\n"
        "from agentenv.plugins import plugins\n"
        "import agentenv_trl, agentenv_trl.plugin\n"
        "plugins().cli_commands()\n"
        "notice = \"You are using 'environment_factory', which is an experimental feature.\"\n"
        "print(sum(1 for f in warnings.filters if f[0] == 'ignore' and f[1] is not None and f[1].match(notice)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_without_silence())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
