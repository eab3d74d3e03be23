"""Deploy ahead (``agentenv serve --warm N``) against deploying per rollout, side by side.

Two bundles: ``slow`` (a python env whose deploy takes 2 s, on the event loop) and the box bundle of
``tests/containers`` (its env's program in a container, ``kind: container``). For each bundle two ``agentenv serve``
processes run at once, one with ``--warm`` and one without; rounds alternate between them so that load on the
machine hits both alike. A round is ``--concurrent`` workers, each playing ``--rollouts`` rollouts one after
another: start, a first tool call, ``--think`` seconds standing for the model's turn, the answer. Measured: from
the rollout's start to its first tool answer (median and p99), and rollouts per minute over the round. The first
round of each server is not counted (the warm server fills its pool then: the figures are steady state).

Needs a Docker engine and the images for the container bundle (made here if missing; ``--no-container``: the slow
bundle alone).

usage: python bench/warm_pool.py [--rounds R] [--concurrent C] [--rollouts N] [--think S] [--no-container]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentenv.client.session import Session
from agentenv.client.settings import Shared

sys.path.insert(0, str(Path(__file__).resolve().parent))
from container_start import BASE, BOX, TASK, p99, serve

SLOW_ENV = """
import asyncio
from agentenv import Env, tool


class Slow(Env):
    async def deploy(self):
        await asyncio.sleep(2.0)

    @tool({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})
    def read_note(self, key):
        "Read the note stored under a key."
        return "4217"
"""
SLOW = """name: slow
envs:
  slow: {kind: python, target: slow_env:Slow}
tasks: tasks/*.yaml
"""


def slow_bundle(folder: Path) -> Path:
    target = folder / "slow"
    (target / "tasks").mkdir(parents=True)
    (target / "bundle.yaml").write_text(SLOW)
    (target / "slow_env.py").write_text(SLOW_ENV)
    for n in range(4):
        (target / "tasks" / f"t{n}.yaml").write_text(TASK.format(id=f"t{n}", env="slow", split="train"))
    return target


def box_bundle(folder: Path) -> Path:
    target = shutil.copytree(BOX, folder / "box")
    shutil.rmtree(target / "tasks")
    (target / "tasks").mkdir()
    for n in range(4):
        (target / "tasks" / f"t{n}.yaml").write_text(TASK.format(id=f"t{n}", env="box", split="train"))
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def worker(shared: Shared, rollouts: int, think: float, n: int, firsts: list[float]) -> None:
    session = Session(shared)  # one session per worker, a rollout after another on it (as TRL's and verl's loops do)
    try:
        for i in range(rollouts):
            began = time.perf_counter()
            rollout = session.rollout(f"t{(n + i) % 4}")
            await rollout.start()
            answer = await rollout.call("read_note", {"key": "code"})
            firsts.append(time.perf_counter() - began)
            assert answer.text == "4217", answer.text
            await asyncio.sleep(think)
            await rollout.end_turn("4217")
    finally:
        await session.close()


async def round_of(shared: Shared, concurrent: int, rollouts: int, think: float) -> tuple[list[float], float]:
    """First-answer seconds of every rollout, and rollouts per minute over the round."""
    firsts: list[float] = []
    began = time.perf_counter()
    await asyncio.gather(*(worker(shared, rollouts, think, n, firsts) for n in range(concurrent)))
    return firsts, len(firsts) * 60 / (time.perf_counter() - began)


def bench(name: str, path: Path, args: argparse.Namespace, folder: Path) -> None:
    ports = {"per rollout": free_port(), "--warm": free_port()}
    capacity = str(args.concurrent + args.warm + 8)
    options = ["--max-concurrent-envs", capacity, "--reset-timeout", "600"]
    warm = ["--warm", str(args.warm)]
    servers = {
        label: serve(path, port, folder / f"{name}-{port}.log", options + (warm if label == "--warm" else []))
        for label, port in ports.items()
    }
    firsts: dict[str, list[float]] = {label: [] for label in ports}
    rates: dict[str, list[float]] = {label: [] for label in ports}
    try:
        for r in range(args.rounds + 1):
            for label, port in ports.items():
                shared = Shared(f"http://127.0.0.1:{port}", reset_timeout=600, tool_timeout=300)
                got, rate = asyncio.run(round_of(shared, args.concurrent, args.rollouts, args.think))
                if r:  # the first round of each is not counted
                    firsts[label] += got
                    rates[label].append(rate)
    finally:
        for proc in servers.values():
            proc.terminate()
        for proc in servers.values():
            proc.wait(timeout=120)
    print(f"\n{name}: {args.concurrent} concurrent rollouts, {args.think:g} s of model time each, --warm {args.warm}")
    print(f"{'deploys':<12}  {'n':>4}  {'first answer median':>20}  {'p99':>8}  {'rollouts/min':>12}")
    for label in ports:
        median, tail = statistics.median(firsts[label]) * 1e3, p99(firsts[label]) * 1e3
        rate = statistics.median(rates[label])
        print(f"{label:<12}  {len(firsts[label]):>4}  {median:>17.0f} ms  {tail:>5.0f} ms  {rate:>12.0f}")
    warm, cold = firsts["--warm"], firsts["per rollout"]
    print(f"--warm / per rollout: first answer median {statistics.median(warm) / statistics.median(cold):.3f}x, "
          f"p99 {p99(warm) / p99(cold):.3f}x; rollouts per minute "
          f"{statistics.median(rates['--warm']) / statistics.median(rates['per rollout']):.2f}x")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="counted rounds per server (one more is not counted)")
    parser.add_argument("--concurrent", type=int, default=32)
    parser.add_argument("--rollouts", type=int, default=3, help="rollouts per worker per round")
    parser.add_argument("--think", type=float, default=3.0, help="seconds of model time per rollout")
    parser.add_argument("--warm", type=int, default=32, help="the warm server's --warm")
    parser.add_argument("--no-container", action="store_true", help="the slow bundle only (no Docker engine)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bench("slow (2 s deploy)", slow_bundle(folder), args, folder)
        if not args.no_container:
            from agentenv_docker import build_base, build_bundle

            build_base(BASE, echo=lambda _: None)
            build_bundle(BOX, base=BASE, echo=lambda _: None)
            bench("container (box)", box_bundle(folder), args, folder)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
