"""A large bundle's tasks cross the Task API a page at a time, and a task deep in a split is reached directly.

The bundle: 2,500 tasks from a generated JSONL file (the dataset task source), served by the real
server on loopback. A pure ASGI wrapper around the app records each request's path and the size of
its answer, so the tests can see how the client read the tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from agentenv import load_bundle
from agentenv.client.settings import Shared
from agentenv.client.taskapi import iter_tasks, read_tasks
from agentenv_server import ServerThread, build_app
from agentenv_verl.writer import write

from tests.support.wire import ask, open_ws, reset_data

N = 2_500


class Recorder:
    """An ASGI app around another that records (path, bytes answered) of each HTTP request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[tuple[str, int]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = 0

        async def counting(message: Any) -> None:
            nonlocal size
            if message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, counting)
        self.requests.append((scope["path"], size))

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("paging") / "big"
    (root / "data").mkdir(parents=True)
    (root / "calc.py").write_text(
        "from agentenv import Env, tool\n\n\nclass Calc(Env):\n"
        '    @tool({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})\n'
        "    def double(self, a: float) -> float:\n        return 2 * a\n"
    )
    (root / "bundle.yaml").write_text(
        "name: big\nsplits: [train, eval]\nenvs:\n  calc: {kind: python, target: calc:Calc}\n"
        "defaults:\n  toolset: {envs: [calc]}\n"
        "tasks:\n  source: dataset\n  path: data/rows.jsonl\n  task:\n"
        '    id: "q{n}"\n    split: "{split}"\n'
        '    turns: [{prompt: "What is twice {n}?", verifiers: [{id: answer, kind: exact, answer: "{double}"}]}]\n'
    )
    with (root / "data" / "rows.jsonl").open("w") as file:
        for n in range(N):
            file.write(json.dumps({"n": n, "split": "eval" if n % 5 == 0 else "train", "double": 2 * n}) + "\n")
    return root


@pytest.fixture(scope="module")
def served(big: Path) -> Any:
    recorder = Recorder(build_app(big))
    server = ServerThread(recorder).start()
    yield server, recorder
    server.stop()


def test_every_task_is_read_in_pages_of_at_most_the_page_size(served):
    server, recorder = served
    before = len(recorder.requests)
    rows = list(iter_tasks(Shared(server.url), "train", page=500))
    assert [r.id for r in rows] == [f"q{n}" for n in range(N) if n % 5]
    assert [r.index for r in rows] == list(range(len(rows)))
    pages = [size for path, size in recorder.requests[before:] if path == "/big/task_range"]
    assert len(pages) == 4  # 2,000 train tasks, 500 a page
    assert "/big/tasks" not in recorder.paths()[before:]  # never one answer with the whole split
    assert max(pages) < 2 * min(pages)


def test_a_page_past_the_end_is_short_and_rows_keep_their_split_index(served):
    server, _ = served
    answer = httpx.post(f"{server.url}/big/task_range", json={"split": "eval", "start": 480, "stop": 600}).json()
    assert [(t["id"], t["index"]) for t in answer["tasks"]] == [(f"q{5 * i}", i) for i in range(480, 500)]


def test_read_tasks_gives_the_same_rows_as_the_bundle_in_order(served, big):
    server, _ = served
    bundle = load_bundle(big)
    rows = read_tasks(Shared(server.url), "eval")
    assert [(r.id, r.index, r.prompt) for r in rows] == [
        (t.id, bundle.index_of(t), t.turns[0].prompt) for t in bundle.split("eval")
    ]


def test_a_task_deep_in_a_split_starts_by_split_and_index(served):
    server, _ = served
    with open_ws(server.url) as ws:
        started = ask(ws, {"type": "reset", "data": reset_data(split="train", index=1_999)})["data"]
        observation = started["observation"]
        assert (observation["task_id"], observation["index"]) == ("q2499", 1_999)
        by_id = ask(ws, {"type": "reset", "data": reset_data(task_id="q1234")})["data"]["observation"]
        assert (by_id["split"], by_id["index"]) == ("train", 1234 - 1234 // 5 - 1)


def test_the_verl_writer_writes_every_task_of_a_large_bundle(served, tmp_path):
    server, recorder = served
    before = len(recorder.requests)
    written = write(server.url, tmp_path / "out")
    assert written.rows == {"train": N - N // 5, "eval": N // 5}
    table = pq.read_table(tmp_path / "out" / "eval.parquet").to_pylist()
    assert [(r["extra_info"]["task_id"], r["extra_info"]["index"]) for r in table] == [
        (f"q{n}", i) for i, n in enumerate(range(0, N, 5))
    ]
    assert "/big/tasks" not in recorder.paths()[before:]
