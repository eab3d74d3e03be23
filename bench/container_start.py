"""A container env's episode start against a subprocess env running the same program, side by side.

One ``agentenv serve`` process serves a bundle with both: the box env of ``tests/containers`` (its program in a
container of the box image, ``kind: container``) and its twin (the same file run as a ``kind: subprocess``
program). Measured per episode: from the start of the episode (the session's reset) to the answer of its first
tool call (``read_note``), which is when a policy can first act on the env; and, at concurrency 1, the 10 calls
after the first (what the attached docker CLI adds to a call). Rounds interleave the two kinds at
concurrency 1 (episodes one after another) and 32 (episodes started at once), so that load on the machine hits
both alike. Prints median and p99 per kind and concurrency, the ratios (container / subprocess) and the load.

Needs a Docker engine and the images (made here if missing: ``agentenv image base`` needs root and debootstrap).

usage: python bench/container_start.py [--rounds R] [--sequential N] [--concurrent C]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from agentenv.client.session import Session
from agentenv.client.settings import Shared

ROOT = Path(__file__).resolve().parent.parent
BOX = ROOT / "tests" / "containers" / "bundles" / "box"
BASE = "agentenv-test/python:bookworm"
TWIN = """  twin:
    kind: subprocess
    command: [python, image/box_env.py]
    config: {notes: data/notes.json}
"""
# a task that reads one note from the env it is given (warm_pool.py plays it too)
TASK = """id: {id}
split: {split}
toolset: {{envs: [{env}], role: reader}}
turns:
- prompt: What is the note under 'code'?
  verifiers: [{{id: code, kind: regex, pattern: '4217'}}]
"""


def bundle(folder: Path) -> Path:
    """The box bundle with its twin env and one task on each (``container``, ``subprocess``)."""
    target = shutil.copytree(BOX, folder / "box")
    text = (target / "bundle.yaml").read_text()
    (target / "bundle.yaml").write_text(text.replace("\ndefaults:", "\n" + TWIN.rstrip() + "\ndefaults:", 1))
    shutil.rmtree(target / "tasks")
    (target / "tasks").mkdir()
    for task, env in (("container", "box"), ("subprocess", "twin")):
        (target / "tasks" / f"{task}.yaml").write_text(TASK.format(id=task, env=env, split="eval"))
    return target


def serve(
    path: Path, port: int, log: Path, options: Sequence[str] = ("--max-concurrent-envs", "80")
) -> subprocess.Popen[bytes]:
    """``agentenv serve`` of ``path`` on ``port`` with ``options``, once it answers ``/health``."""
    args = [sys.executable, "-m", "agentenv.cli", "serve", str(path), "--port", str(port), "--log-level", "warning"]
    with log.open("wb") as err:
        proc = subprocess.Popen([*args, *options], stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"agentenv serve did not start:\n{log.read_text()[-3000:]}")


async def first_answer(shared: Shared, task: str, calls: list[float] | None = None) -> float:
    """Seconds from an episode's start to its first tool answer; with ``calls``, each of 10 later calls' seconds are
    appended to it. The episode is then ended and torn down."""
    session = Session(shared)
    try:
        began = time.perf_counter()
        rollout = session.rollout(task)
        await rollout.start()
        answer = await rollout.call("read_note", {"key": "code"})
        took = time.perf_counter() - began
        assert answer.text == "4217", answer.text
        for _ in range(10 if calls is not None else 0):
            began = time.perf_counter()
            await rollout.call("read_note", {"key": "code"})
            calls.append(time.perf_counter() - began)  # type: ignore[union-attr]
        await rollout.end_turn("4217")
        return took
    finally:
        await session.close()


async def measure(shared: Shared, task: str, concurrency: int, count: int, calls: list[float]) -> list[float]:
    if concurrency == 1:
        return [await first_answer(shared, task, calls) for _ in range(count)]
    return list(await asyncio.gather(*(first_answer(shared, task) for _ in range(concurrency))))


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequential", type=int, default=10, help="episodes per round at concurrency 1")
    parser.add_argument("--concurrent", type=int, default=32)
    args = parser.parse_args()

    from agentenv_docker import build_base, build_bundle

    build_base(BASE, echo=lambda _: None)
    build_bundle(BOX, base=BASE, echo=lambda _: None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        server = serve(bundle(Path(folder)), port, Path(folder) / "serve.log")
        try:
            shared = Shared(f"http://127.0.0.1:{port}", reset_timeout=600, tool_timeout=300)
            samples: dict[tuple[str, int], list[float]] = {}
            later: dict[str, list[float]] = {"subprocess": [], "container": []}  # the calls after the first
            asyncio.run(measure(shared, "container", 1, 2, []))  # warm: the server's first episode of each kind
            asyncio.run(measure(shared, "subprocess", 1, 2, []))
            for _ in range(args.rounds):
                for concurrency in (1, args.concurrent):
                    for kind in ("subprocess", "container"):
                        got = asyncio.run(measure(shared, kind, concurrency, args.sequential, later[kind]))
                        samples.setdefault((kind, concurrency), []).extend(got)
        finally:
            server.terminate()
            server.wait(timeout=60)
    print("episode start to first tool answer (ms)")
    print(f"{'concurrency':>11}  {'kind':<10}  {'n':>4}  {'median':>8}  {'p99':>8}")
    for concurrency in (1, args.concurrent):
        for kind in ("subprocess", "container"):
            got = samples[(kind, concurrency)]
            median, tail = statistics.median(got) * 1e3, p99(got) * 1e3
            print(f"{concurrency:>11}  {kind:<10}  {len(got):>4}  {median:>8.0f}  {tail:>8.0f}")
    for kind in ("subprocess", "container"):
        print(f"{'later calls':>11}  {kind:<10}  {len(later[kind]):>4}  {statistics.median(later[kind]) * 1e3:>8.1f}")
    for concurrency in (1, args.concurrent):
        c, s = samples[("container", concurrency)], samples[("subprocess", concurrency)]
        median = statistics.median(c) / statistics.median(s)
        print(f"container / subprocess at concurrency {concurrency}: median {median:.1f}x, p99 {p99(c) / p99(s):.1f}x")
    calls = statistics.median(later["container"]) / statistics.median(later["subprocess"])
    print(f"container / subprocess, a later call's median: {calls:.2f}x")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
