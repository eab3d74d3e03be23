"""The same episodes against one plain ``agentenv serve`` process, 1 Ray Serve replica and 2 replicas.

Each episode of the burn bundle (bench/bundles/burn) calls a tool that burns a fixed slice of CPU
(``--ms``, thread CPU time) ``--calls`` times, then ends its turn (scored). ``--concurrency`` sessions
play ``--episodes`` episodes through the session layer. The plain server is a subprocess; the two
Ray Serve applications share one local Ray and one proxy (route prefixes /one and /two). Rounds are
interleaved so that load on the machine hits each alike. Prints episodes/s and p50/p99 per tool
call, and each as a ratio to the plain server.

A replica is one process, and a Python tool holds the GIL while it burns: one replica uses one core
at most, two replicas two. On a 2-core machine the client, Ray's proxy and the replicas share those
two cores, so the 2-replica ratio is bounded well below 2.

usage: python bench/ray_scaleout.py [--episodes N] [--concurrency C] [--calls K] [--ms MS] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from agentenv.client.session import Session, Shared

ROOT = Path(__file__).resolve().parent.parent
BURN = ROOT / "bench" / "bundles" / "burn"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain_server(port: int, capacity: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "agentenv.cli", "serve", str(BURN), "--port", str(port), "--log-level", "warning",
            "--max-concurrent-envs", str(capacity)]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"agentenv serve did not start: {proc.stderr.read().decode() if proc.stderr else ''}")


async def play(url: str, episodes: int, concurrency: int, calls: int, ms: float) -> tuple[list[float], float]:
    """Per-call seconds of the burn calls of ``episodes`` episodes over ``concurrency`` sessions, and the wall time."""
    shared = Shared(url, reset_timeout=300, tool_timeout=120)
    per_call: list[float] = []
    left = list(range(episodes))

    async def player() -> None:
        async with Session(shared) as session:
            while left:
                left.pop()
                await session.start("burn")
                for _ in range(calls):
                    began = time.perf_counter()
                    answer = await session.call("burn", {"ms": ms})
                    per_call.append(time.perf_counter() - began)
                    assert not answer.error, answer.text
                result = (await session.end_turn("done")).result
                assert result is not None and result.outcome == "scored", result

    began = time.perf_counter()
    await asyncio.gather(*(player() for _ in range(concurrency)))
    return per_call, time.perf_counter() - began


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64, help="episodes per measurement")
    parser.add_argument("--concurrency", type=int, default=16, help="sessions playing at once")
    parser.add_argument("--calls", type=int, default=4, help="burn calls per episode")
    parser.add_argument("--ms", type=float, default=20.0, help="CPU milliseconds each call burns")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported)")
    args = parser.parse_args()

    from agentenv_server.ray import deploy

    port, plain_port = free_port(), free_port()
    capacity = max(64, args.concurrency)
    plain = plain_server(plain_port, capacity)
    # 0.5 CPU each: three replicas fit a 2-core local Ray (Ray's CPUs are bookkeeping, not a limit)
    one = deploy(BURN, replicas=1, port=port, name="one", route_prefix="/one", max_concurrent_envs=capacity,
                 replica_cpus=0.5, local_cpus=os.cpu_count() or 2)  # fmt: skip
    two = deploy(BURN, replicas=2, port=port, name="two", route_prefix="/two", max_concurrent_envs=capacity,
                 replica_cpus=0.5)  # fmt: skip
    targets = {"agentenv serve": f"http://127.0.0.1:{plain_port}", "ray 1 replica": one.url, "ray 2 replicas": two.url}
    runs: dict[str, dict[str, list[float]]] = {name: {"eps": [], "p50": [], "p99": []} for name in targets}
    try:
        for url in targets.values():  # warm up: every replica imports the bundle and deploys an env once
            asyncio.run(play(url, 2 * args.concurrency, args.concurrency, 1, 1.0))
        for _ in range(args.rounds):
            for name, url in targets.items():
                calls, wall = asyncio.run(play(url, args.episodes, args.concurrency, args.calls, args.ms))
                runs[name]["eps"].append(args.episodes / wall)
                runs[name]["p50"].append(pct(calls, 0.50) * 1e3)
                runs[name]["p99"].append(pct(calls, 0.99) * 1e3)
    finally:
        two.shutdown()
        one.shutdown()  # owns the local Ray: stops it
        plain.terminate()
        plain.wait(30)

    med = {name: {k: statistics.median(v) for k, v in m.items()} for name, m in runs.items()}
    base = med["agentenv serve"]
    print(f"{args.episodes} episodes x {args.calls} calls burning {args.ms:g} ms CPU each, {args.concurrency} "
          f"sessions at once, median of {args.rounds} interleaved rounds, {os.cpu_count()} cores; load: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    print("| server | episodes/s | p50 ms/call | p99 ms/call | episodes/s ratio | p50 ratio | p99 ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, m in med.items():
        print(f"| {name} | {m['eps']:.1f} | {m['p50']:.1f} | {m['p99']:.1f} | {m['eps'] / base['eps']:.2f} | "
              f"{m['p50'] / base['p50']:.2f} | {m['p99'] / base['p99']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
