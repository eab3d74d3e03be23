"""A no-op tool call through the client's ``Session`` on a bundle played in this process vs on a server of it.

The same ``Session`` code on both sides: ``agentenv.local.Here`` (the engine's ``Service`` answering in this process)
against ``agentenv serve`` in a process of its own on loopback (``Transport`` over ``/ws``, the server's guard,
OpenEnv's handler). Interleaved rounds, so load on the machine hits both alike; prints the median latency of a call,
this process's CPU per call, the time to start and end an episode, and the ratios (in process / server).

usage: python bench/in_process.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from agentenv.client import Session, Shared
from agentenv.local import Here

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' support package, run from anywhere
from tests.support.paths import FAKE
from tests.support.servers import ServeProcess


async def measure(shared: Shared, calls: int) -> tuple[float, float, float]:
    """(median seconds per call, CPU seconds of this process per call, seconds to start and end an episode)."""
    session = Session(shared)
    try:
        began = time.perf_counter()
        await session.start("echo")
        await session.call("noop", {})  # the deploy is behind us
        times = []
        cpu = time.process_time()
        for _ in range(calls):
            t = time.perf_counter()
            await session.call("noop", {})
            times.append(time.perf_counter() - t)
        cpu = (time.process_time() - cpu) / calls
        await session.end_turn("ping")
        episode = time.perf_counter() - began - sum(times)
        return statistics.median(times), cpu, episode
    finally:
        await session.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--port", type=int, default=8791)
    args = parser.parse_args()
    server = ServeProcess(FAKE, port=args.port).start()
    here = Here(FAKE)
    sides = {"in process": here.shared(), "server": Shared(f"http://127.0.0.1:{args.port}")}
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    try:
        for shared in sides.values():
            await measure(shared, 50)  # warm both
        for _ in range(args.rounds):
            for name, shared in sides.items():
                got[name].append(await measure(shared, args.calls))
    finally:
        await here.aclose()
        server.terminate()
    print(f"{'':<12}{'call p50':>12}{'client CPU/call':>18}{'episode start+end':>20}")
    med = {name: [statistics.median(r[i] for r in rows) for i in range(3)] for name, rows in got.items()}
    for name, (p50, cpu, episode) in med.items():
        print(f"{name:<12}{p50 * 1e6:>10.0f}us{cpu * 1e6:>16.0f}us{episode * 1e3:>18.2f}ms")
    a, b = med["in process"], med["server"]
    print(f"{'ratio':<12}{a[0] / b[0]:>11.2f}x{a[1] / b[1]:>17.2f}x{a[2] / b[2]:>19.2f}x")
    print(f"{args.rounds} rounds x {args.calls} calls; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
