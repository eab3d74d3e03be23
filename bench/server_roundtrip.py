"""A no-op tool call through agentenv's server vs a bare OpenEnv 0.10 server stepping a no-op env.

Each server runs in its own process; one client process drives them all with OpenEnv's own client,
in interleaved rounds so that load on the machine hits each alike. ``--pin`` (Linux, two or more
CPUs) puts the servers on the first CPU and the client on the second: at concurrency 64 the server's
core is then the bottleneck, and the ratio is the servers' CPU cost per call. Prints median and p99
latency at concurrency 1 and 64, calls per second, sessions opened per second, and the ratios
(agentenv / bare).

usage: python bench/server_roundtrip.py [--calls N] [--rounds R] [--pin]
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
from agentenv.wire import PROTOCOL

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "bundles" / "fake"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpus() -> tuple[set[int], set[int]] | None:
    """(the servers' CPU, the client's CPU), or None where the process can't be pinned to two."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    mine = sorted(os.sched_getaffinity(0))
    return ({mine[0]}, {mine[1]}) if len(mine) >= 2 else None


def start(
    args: list[str], port: int, env: dict[str, str] | None = None, cpu: set[int] | None = None
) -> subprocess.Popen[bytes]:
    pin = (lambda: os.sched_setaffinity(0, cpu)) if cpu else None
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, preexec_fn=pin)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server {args} did not start: {proc.stderr.read().decode() if proc.stderr else ''}")


class Target:
    def __init__(self, name: str, url: str, reset: dict, action: dict, pid: int) -> None:
        self.name, self.url, self.reset, self.action, self.pid = name, url, reset, action, pid

    def cpu_seconds(self) -> float:
        """The server process's CPU time so far (user + system): load on the machine stretches wall time, not this."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def client(self):
        from agentenv_server._openenv import import_openenv

        import_openenv()
        from openenv.core.generic_client import GenericEnvClient

        return GenericEnvClient(base_url=self.url, message_timeout_s=120)


async def latencies(target: Target, concurrency: int, calls: int) -> tuple[list[float], float]:
    """Per-call seconds of ``calls`` no-op steps spread over ``concurrency`` sessions, and the wall time."""
    clients = [target.client() for _ in range(concurrency)]
    for c in clients:
        await c.connect()
        await c.reset(**target.reset)
    per = max(1, calls // concurrency)
    for c in clients:  # warm up
        for _ in range(3):
            await c.step(target.action)
    out: list[float] = []

    async def run(c) -> None:
        for _ in range(per):
            t = time.perf_counter()
            await c.step(target.action)
            out.append(time.perf_counter() - t)

    began = time.perf_counter()
    await asyncio.gather(*(run(c) for c in clients))
    wall = time.perf_counter() - began
    for c in clients:
        await c.close()
    return out, wall


async def sessions_per_second(target: Target, n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        c = target.client()
        await c.connect()
        await c.reset(**target.reset)
        await c.close()
    return n / (time.perf_counter() - began)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="no-op calls per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported)")
    parser.add_argument("--sessions", type=int, default=100, help="sessions opened per measurement")
    parser.add_argument("--pin", action="store_true", help="servers on the first CPU, the client on the second")
    args = parser.parse_args()
    pinned = cpus() if args.pin else None
    if args.pin and pinned is None:
        parser.error("--pin needs Linux and two or more CPUs this process may use")
    server_cpu = pinned[0] if pinned else None
    if pinned:
        os.sched_setaffinity(0, pinned[1])

    a_port, b_port, s_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "AGENTENV_FAKE_LEDGER"}  # the fake env writes no ledger
    procs = [
        start([sys.executable, "-m", "agentenv.cli", "serve", str(FAKE), "--port", str(a_port), "--log-level",
               "warning", "--max-concurrent-envs", "256"], a_port, env, server_cpu),
        start([sys.executable, str(ROOT / "bench" / "_bare_openenv.py"), str(b_port), "async"], b_port, cpu=server_cpu),
        start([sys.executable, str(ROOT / "bench" / "_bare_openenv.py"), str(s_port), "sync"], s_port, cpu=server_cpu),
    ]  # fmt: skip
    targets = [
        Target(
            "agentenv",
            f"http://127.0.0.1:{a_port}",
            {"task_id": "echo", "protocol": PROTOCOL},
            {"op": "call", "tool": "noop", "args": {}},
            procs[0].pid,
        ),
        Target("bare-async", f"http://127.0.0.1:{b_port}", {}, {"op": "noop"}, procs[1].pid),
        Target("bare-sync", f"http://127.0.0.1:{s_port}", {}, {"op": "noop"}, procs[2].pid),
    ]
    results: dict[tuple[str, str], list[float]] = {}

    def add(name: str, metric: str, value: float) -> None:
        results.setdefault((name, metric), []).append(value)

    try:
        for _ in range(args.rounds):
            for target in targets:
                for conc in (1, 64):
                    cpu = target.cpu_seconds()
                    lat, wall = asyncio.run(latencies(target, conc, args.calls))
                    add(target.name, f"server_cpu_us@{conc}", (target.cpu_seconds() - cpu) / len(lat) * 1e6)
                    add(target.name, f"median_ms@{conc}", statistics.median(lat) * 1e3)
                    add(target.name, f"p99_ms@{conc}", p(lat, 0.99) * 1e3)
                    add(target.name, f"calls_per_s@{conc}", len(lat) / wall)
                cpu = target.cpu_seconds()
                add(target.name, "sessions_per_s", asyncio.run(sessions_per_second(target, args.sessions)))
                add(target.name, "server_cpu_us/session", (target.cpu_seconds() - cpu) / args.sessions * 1e6)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)

    metrics = ["median_ms@1", "p99_ms@1", "calls_per_s@1", "server_cpu_us@1", "median_ms@64", "p99_ms@64",
               "calls_per_s@64", "server_cpu_us@64", "sessions_per_s", "server_cpu_us/session"]  # fmt: skip
    med = {k: statistics.median(v) for k, v in results.items()}
    where = f"servers on CPU {sorted(pinned[0])}, client on CPU {sorted(pinned[1])}" if pinned else "not pinned"
    print(f"no-op call round trip, {args.calls} calls per measurement, median of {args.rounds} interleaved rounds, "
          f"{where}")  # fmt: skip
    print(f"{'metric':<22}{'agentenv':>12}{'bare-async':>12}{'bare-sync':>12}{'ratio/async':>13}{'ratio/sync':>12}")
    for m in metrics:
        a, b, s = med[("agentenv", m)], med[("bare-async", m)], med[("bare-sync", m)]
        print(f"{m:<22}{a:>12.3f}{b:>12.3f}{s:>12.3f}{a / b:>13.2f}{a / s:>12.2f}")


if __name__ == "__main__":
    main()
