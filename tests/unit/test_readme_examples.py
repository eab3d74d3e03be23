"""The Python examples of the READMEs and the docs run as written.

Each ``python`` block runs as a program from the repository's root. A block that talks to
``localhost:8000`` runs against a real ``agentenv serve examples/bundles/inbox`` (on a free port, put in
its place). A block that cannot run here (it needs a trainer, a model, or serves until stopped) says why
in a ``<!-- not run: REASON -->`` comment on the line before it: a block with neither fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import INBOX, ROOT, ServeProcess

FILES = [ROOT / "README.md", *sorted((ROOT / "packages").glob("*/README.md")), *sorted((ROOT / "docs").rglob("*.md"))]
NOT_RUN = re.compile(r"^<!-- not run: (.+\S) -->$")


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    code: str
    not_run: str | None

    def __str__(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """Every fenced ``python`` block of a Markdown file, with the reason it is not run, if one is given."""
    lines, blocks, i = path.read_text().splitlines(), [], 0
    while i < len(lines):
        opened = re.match(r"^(\s*)```python\s*$", lines[i])
        if not opened:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        before = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        reason = NOT_RUN.match(before)
        code = textwrap.dedent("\n".join(body))
        if not code.startswith("--8<--"):  # a file of the repository included by the site: run where it lives
            blocks.append(Block(path, start + 1, code, reason.group(1) if reason else None))
        i += 1
    return blocks


BLOCKS = [block for path in FILES for block in python_blocks(path)]


@pytest.fixture(scope="module")
def inbox_server():
    server = ServeProcess(INBOX).start()
    yield server
    server.terminate()


def test_the_examples_are_found():
    assert len(BLOCKS) >= 10
    assert any(block.not_run is None and "localhost:8000" in block.code for block in BLOCKS)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.not_run is None], ids=str)
def test_the_example_runs_as_written(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    code = block.code
    if "localhost:8000" in code:
        code = code.replace("localhost:8000", f"127.0.0.1:{request.getfixturevalue('inbox_server').port}")
    program = tmp_path / "example.py"
    program.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, program], cwd=ROOT, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, f"{block} does not run as written:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.not_run is not None], ids=str)
def test_an_example_that_is_not_run_says_why(block: Block) -> None:
    assert len(block.not_run or "") > 10, f"{block}: say why it cannot run here"
