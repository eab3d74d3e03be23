"""Hostile bundles are refused at ``agentenv serve`` before it serves, naming the file, the line (or the dataset row and
column) and the fix: alias bombs, aliases in loops, ids that are not names, rows too large for a frame."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support import FAKE, free_port
from tests.support.bundles import copy_bundle

# runs a program with its address space (soft and hard) capped at argv[1] bytes: a runaway load fails fast, not the
# machine
_AS = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_AS, (n, n)); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)
MEMORY = 2 * 1024**3


def serve_refused(bundle: Path) -> str:
    """Run ``agentenv serve BUNDLE`` (2 GiB of address space at most); return its stderr once it exits refusing.

    Fails if it starts serving instead, or exits otherwise than with a refusal (2).
    """
    serve = [sys.executable, "-m", "agentenv.cli", "serve", str(bundle), "--port", str(free_port())]
    argv = [sys.executable, "-c", _AS, str(MEMORY), *serve]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    err = ""
    for line in process.stderr:  # ends when it exits; "serving bundle" means it did not refuse
        err += line
        if "serving bundle" in line:
            process.terminate()
            process.communicate(timeout=60)
            raise AssertionError(f"agentenv serve served the bundle instead of refusing it:\n{err}")
    assert process.wait(timeout=60) == 2, err
    return err


def dataset_bundle(root: Path, rows: list[dict[str, object]], task: str) -> Path:
    """A bundle whose tasks are ``rows`` (data/rows.jsonl) through the template ``task`` (YAML)."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    template = "\n".join("    " + line for line in task.strip().splitlines())
    (root / "bundle.yaml").write_text(
        f"name: rows\ntasks:\n  source: dataset\n  path: data/*.jsonl\n  task:\n{template}\n"
    )
    return root


TEMPLATE = """
id: '{name}'
split: train
turns:
  - prompt: '{prompt}'
"""


def test_an_alias_bomb_in_bundle_yaml_is_refused_at_its_line_without_expanding_it(tmp_path):
    bundle = copy_bundle(tmp_path, FAKE)
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefg", "bcdefgh", strict=True):
        levels.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    bomb = "".join(f"    {level}\n" for level in levels)  # 9**8 values from under 400 bytes
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("defaults:\n", f"defaults:\n  metadata:\n{bomb}", 1))
    err = serve_refused(bundle)
    line = next(n for n, text in enumerate((bundle / "bundle.yaml").read_text().splitlines(), 1) if "h: &h" in text)
    assert re.search(rf"bundle.yaml:{line}: aliases expand this file to [\d,]{{10,}} values, more than", err), err
    assert "the alias here alone repeats 5,380,840; write the repeated part out, or repeat it less" in err


def test_an_alias_inside_the_value_it_names_is_refused_at_its_line(tmp_path):
    bundle = copy_bundle(tmp_path, FAKE)
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("defaults:\n", "defaults: &d\n  metadata: {again: *d}\n", 1))
    err = serve_refused(bundle)
    line = next(n for n, text in enumerate((bundle / "bundle.yaml").read_text().splitlines(), 1) if "*d" in text)
    assert f"bundle.yaml:{line}: alias *d is inside the value it names (a loop); write the value out instead" in err


def test_task_ids_that_are_not_names_are_refused_naming_the_row_and_column(tmp_path):
    names = ["ok-1", "HumanEval/0", "../scratch", "red\x1b[31m", "two\nlines", "x" * 129, "-flag"]
    bundle = dataset_bundle(tmp_path / "b", [{"name": n, "prompt": "Say hi."} for n in names], TEMPLATE)
    err = serve_refused(bundle)
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    assert len(problems) == len(names) - 1, err
    for row, problem in enumerate(problems, start=1):
        assert problem.startswith(f"  - data/rows.jsonl:{row + 1}: row {row}, column 'name' -> id: task id "), problem
        assert "is not a name: use ASCII letters, digits, '.', '_' and '-', at most 128" in problem
    assert "\x1b" not in err and "two\nlines" not in err  # shown escaped, never raw to the terminal


def test_a_split_that_is_not_a_name_is_refused_before_a_writer_makes_a_file_of_it(tmp_path):
    task = TEMPLATE.replace("split: train", "split: '{split}'")
    bundle = dataset_bundle(tmp_path / "b", [{"name": "t1", "prompt": "Hi.", "split": "../../etc/x"}], task)
    err = serve_refused(bundle)
    assert "data/rows.jsonl:1: row 0, column 'split' -> split: split '../../etc/x' is not a name" in err


def test_a_row_too_large_for_a_frame_is_refused_naming_the_task_not_lost_at_every_start(tmp_path):
    rows = [{"name": "small", "prompt": "Say hi."}, {"name": "huge", "prompt": "y" * (65 * 1024 * 1024)}]
    err = serve_refused(dataset_bundle(tmp_path / "b", rows, TEMPLATE))
    assert (
        "data/rows.jsonl:2: row 1, column 'prompt' -> turns[0].prompt: task 'huge' would be sent in a frame of" in err
    )
    assert "over the 63.9 MiB a client reads: every start of it would be lost" in err


# found by the bundle fuzzer (tests/fuzz/test_bundles.py): each was a traceback, or raw bytes for the terminal


def test_a_character_yaml_does_not_allow_is_refused_at_its_line(tmp_path):
    bundle = copy_bundle(tmp_path, FAKE)
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("name: fake", "name: fa\x00ke", 1))
    err = serve_refused(bundle)
    assert "bundle.yaml:4: YAML cannot hold the character '\\x00' (control characters are not allowed)" in err, err


def test_a_number_python_cannot_make_is_refused_at_its_line(tmp_path):
    bundle = copy_bundle(tmp_path, FAKE)
    with (bundle / "tasks" / "echo.yaml").open("a") as f:
        f.write(f"metadata:\n  big: {'9' * 5000}\n  when: 2024-13-45\n")
    err = serve_refused(bundle)
    assert "tasks/echo.yaml:16: '999999999999999999999999999999... (5,000 characters)' reads as a YAML int" in err, err
    assert "quote it to keep it as text" in err


def test_a_field_name_with_a_terminal_escape_is_shown_escaped(tmp_path):
    bundle = copy_bundle(tmp_path, FAKE)
    text = (bundle / "bundle.yaml").read_text()
    (bundle / "bundle.yaml").write_text(text.replace("name: fake", 'name: fake\n"\\e[2J\\u202e": x', 1))
    err = serve_refused(bundle)
    assert "bundle.yaml:5: \\x1b[2J\\u202e: unknown field; the fields are" in err, err
    assert "\x1b" not in err and "\u202e" not in err


def test_dataset_rows_json_cannot_read_are_refused_at_their_row(tmp_path):
    bundle = dataset_bundle(tmp_path / "b", [{"name": "ok", "prompt": "Hi."}], TEMPLATE)
    deep = '{"name": "deep", "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}"
    huge = '{"name": "huge", "prompt": ' + "9" * 5000 + "}"
    with (bundle / "data" / "rows.jsonl").open("a") as f:
        f.write(f"{deep}\n{huge}\n")
    err = serve_refused(bundle)
    assert "data/rows.jsonl:2: row 1: is nested too deeply for Python's JSON reader" in err, err
    assert "data/rows.jsonl:3: row 2: cannot be read as JSON (Exceeds the limit (4300 digits)" in err
