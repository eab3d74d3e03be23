"""Every file agentenv writes is whole or absent: a killed writer, a full disk or a second writer on one folder
leaves no half file, no mixed set and no doubled results (agentenv.files)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from agentenv import load_bundle
from agentenv.errors import AgentEnvError
from agentenv.files import MANIFEST, FolderBusy, locked, write_set

from tests.support import INBOX, wait_until
from tests.support.standin.openai import Conversation, Reference, StandIn


def _eval_argv(standin: StandIn, out: Path, *flags: str) -> list[str]:
    model = ["--llm-url", standin.url, "--model", "stand-in"]
    return [
        sys.executable,
        "-m",
        "agentenv.cli",
        "eval",
        str(INBOX),
        *model,
        "--out",
        str(out),
        "--concurrency",
        "1",
        *flags,
    ]


def test_a_second_eval_on_the_same_out_folder_is_refused_while_the_first_runs(tmp_path):
    reference = Reference(load_bundle(INBOX))
    gate = threading.Event()

    def held(c: Conversation) -> Any:  # every answer waits until the test has seen what the second run does
        gate.wait(60)
        return reference(c)

    out = tmp_path / "run"
    with StandIn(held) as standin:
        first = subprocess.Popen(_eval_argv(standin, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_until(lambda: standin.in_flight >= 1, 120), "the first run never asked the model"
            second = subprocess.Popen(
                _eval_argv(standin, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            wait_until(lambda: second.poll() is not None or standin.in_flight >= 2, 120)
        finally:
            gate.set()
        _, second_err = second.communicate(timeout=300)
        _, first_err = first.communicate(timeout=300)
    assert second.returncode == 2, second_err
    assert f"--out {out} is being written by another agentenv process" in second_err
    assert first.returncode == 0, first_err
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    keys = [(line["task"], line["sample"]) for line in lines]
    assert len(keys) == len(set(keys)) == len(load_bundle(INBOX).split("eval"))  # one run's samples, once each


def test_a_folder_is_held_by_one_holder_and_free_again_once_it_lets_go(tmp_path):
    with locked(tmp_path, "--out"), pytest.raises(FolderBusy, match="give another --out"), locked(tmp_path, "--out"):
        pass
    with locked(tmp_path, "--out"):  # let go: a later run takes it
        pass


# a results line the disk takes only part of -------------------------------------------------------------------------

# runs a program with its largest file size (soft and hard) set to argv[1] bytes: a write across it is cut short
_FSIZE = (
    "import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def test_a_results_line_the_disk_cuts_short_is_cut_off_and_the_run_stops_naming_the_file(tmp_path):
    reference = Reference(load_bundle(INBOX))
    with StandIn(reference) as standin:
        whole = tmp_path / "whole"
        done = subprocess.run(_eval_argv(standin, whole, "--limit", "2"), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        first, second = (whole / "results.jsonl").read_bytes().splitlines(keepends=True)
        # the results file may grow past its first line but not hold the second: that write is cut short
        limit = len(first) + len(second) // 2
        assert (whole / "summary.json").stat().st_size < limit  # the summary itself still fits
        out = tmp_path / "cut"
        argv = [sys.executable, "-c", _FSIZE, str(limit), *_eval_argv(standin, out, "--limit", "2")]
        cut = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert cut.returncode == 2, cut.stderr
    assert f"{out / 'results.jsonl'}: cannot write the result of task" in cut.stderr
    assert "run again with --resume" in cut.stderr
    data = (out / "results.jsonl").read_bytes()
    assert data.endswith(b"\n") and [json.loads(line)["task"] for line in data.splitlines()] == [
        json.loads(first)["task"]
    ]  # the first line whole, nothing of the second


# a killed writer -----------------------------------------------------------------------------------------------------


def _dataset_bundle(root: Path, rows: int, word: str) -> Path:
    """A bundle of ``rows`` one-turn tasks from a JSONL file (long prompts: a dataset worth a while to write)."""
    root.mkdir()
    (root / "bundle.yaml").write_text(
        "name: big\nsplits: [train, eval]\ntasks:\n  source: dataset\n  path: rows.jsonl\n"
        "  task:\n    id: 't-{_row}'\n    split: '{split}'\n    turns:\n      - prompt: '{prompt}'\n"
        "        verifiers: [{id: answer, kind: exact, answer: '{answer}'}]\n"
    )
    with (root / "rows.jsonl").open("w") as f:
        for i in range(rows):
            row = {"split": "eval" if i % 10 == 0 else "train", "prompt": f"{word} {i} " * 40, "answer": str(i)}
            f.write(json.dumps(row) + "\n")
    return root


def _whole(out: Path) -> dict[str, Any]:
    """Every file under ``out``, read whole (a parquet file that does not read, or YAML that does not parse, fails)."""
    seen: dict[str, Any] = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        name = str(path.relative_to(out))
        if ".parquet" in path.name:
            seen[name] = pq.read_table(path).num_rows
        elif ".yaml" in path.name or path.name.startswith(MANIFEST) or f".{MANIFEST}." in path.name:
            seen[name] = yaml.safe_load(path.read_text())
        else:
            seen[name] = path.read_bytes()
    return seen


def _matches_manifest(out: Path) -> None:
    manifest = json.loads((out / MANIFEST).read_text())
    for name, listed in manifest["files"].items():
        data = (out / name).read_bytes()
        assert {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} == listed, name


def _started(argv: list[str], when: str) -> subprocess.Popen[bytes]:
    """The writer, returned once its progress bar says it is writing (``when="writing"``: its rows are read,
    its files not yet written) or once its out folder changes (``when="change"``)."""
    out = Path(argv[-1])
    before = _entries(out)
    writer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert writer.stderr is not None
    if when == "writing":
        said = b""
        while b"writing" not in said:
            chunk = os.read(writer.stderr.fileno(), 4096)
            assert chunk, f"the writer ended before writing: {said!r}"
            said += chunk
    else:
        assert wait_until(lambda: _entries(out) != before or writer.poll() is not None, 300)
    return writer


def _entries(folder: Path) -> set[tuple[str, int, int]]:
    """What the folder holds now, by name, inode and change time; a file the writer renames meanwhile (its temporary
    file, listed then gone) is left out (before, its stat raised FileNotFoundError and failed the test)."""
    found = set()
    with os.scandir(folder) as entries:
        for e in entries:
            with contextlib.suppress(FileNotFoundError):
                found.add((e.name, e.inode(), e.stat(follow_symlinks=False).st_mtime_ns))
    return found


# when to kill the writer: once it says it is writing (its files not yet named) or once its folder changes, and
# that many seconds after
KILLS = [("writing", 0.0), ("change", 0.0), ("change", 0.01), ("change", 0.05), ("change", 0.3)]


def test_a_writer_killed_at_any_moment_leaves_only_whole_files_and_the_manifest_names_a_whole_set(serve, tmp_path):
    servers = [serve(_dataset_bundle(tmp_path / "a", 2000, "a")), serve(_dataset_bundle(tmp_path / "b", 1000, "b"))]
    out = tmp_path / "out"

    def argv(server: Any) -> list[str]:
        return [sys.executable, "-m", "agentenv_verl", server.url, str(out)]

    assert subprocess.run(argv(servers[1]), capture_output=True, timeout=300).returncode == 0
    kills = 0
    for step, (when, after) in enumerate(KILLS):  # each kill cuts short a write of the other set
        writer = _started(argv(servers[step % 2]), when)
        time.sleep(after)
        if writer.poll() is None:
            os.kill(writer.pid, signal.SIGKILL)
            kills += 1
        writer.communicate(timeout=60)
        files = _whole(out)  # raises on a half file
        assert not [p for p in out.rglob("*") if p.is_dir()], files  # no staging folder left behind
        if MANIFEST in files:
            _matches_manifest(out)
    assert kills >= 3  # most were cut short somewhere in their writing
    assert subprocess.run(argv(servers[0]), capture_output=True, timeout=300).returncode == 0
    _matches_manifest(out)
    assert sorted(_whole(out)) == ["agent_loop.yaml", "eval.parquet", MANIFEST, "train.parquet"]  # leftovers cleared
    assert pq.read_table(out / "train.parquet").num_rows == 1800


def test_a_set_whose_writer_fails_leaves_the_folder_as_it_was(tmp_path):
    write_set(tmp_path, {"a.txt": "old a", "b.txt": "old b"})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def breaks(file: Any) -> None:
        file.write(b"half of b")
        raise AgentEnvError("the writer broke")

    with pytest.raises(AgentEnvError, match="the writer broke"):
        write_set(tmp_path, {"a.txt": "new a", "b.txt": breaks})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
