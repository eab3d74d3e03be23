"""Load: many concurrent episodes on one `agentenv serve` process, and the same against a bare OpenEnv server.

Each episode opens a session, starts a task, makes 3 tool calls (a sync tool, an async one, a sync one),
ends its turn (a Python verifier runs) and closes. All N sessions are opened first (a few hundred at a
time, as a trainer ramps up) and held open, then every episode plays at once. Reports errors (must be 0),
the server's peak RSS and threads, p50/p99 per call, and the time of each phase. Then, at ``--baseline``
episodes, the same shape against agentenv and against a bare OpenEnv 0.10 server stepping a no-op async
env, both driven through agentenv's own transport (the same client code), as ratios.

The client is one Python process (asyncio; its soft limit on open files is raised to the hard limit: one
descriptor per connection). The bundle is the fake bundle's `ok` env alone, so a session costs the
server one descriptor (see agentenv_server.limits).

usage: python bench/load.py [--episodes 10000] [--baseline 1000] [--ramp 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from agentenv.client.session import Session
from agentenv.client.settings import Shared
from agentenv.client.transport import Transport
from agentenv.wire import PROTOCOL

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fixtures" / "bundles" / "fake"
BUNDLE = """name: load
description: One Python env (the fake bundle's), one task.
envs:
  ok: {kind: python, target: fake_env:FakeEnv}
defaults:
  system: You are a test agent.
  toolset: {envs: [ok]}
tasks: tasks/*.yaml
"""
CALLS = [("echo", {"text": "ping"}), ("noop", {}), ("add", {"a": 1, "b": 2})]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_bundle_dir(folder: Path) -> Path:
    """The bench's bundle: the fake env's module and its echo task."""
    (folder / "tasks").mkdir(parents=True)
    shutil.copy(FAKE / "fake_env.py", folder / "fake_env.py")
    shutil.copy(FAKE / "tasks" / "echo.yaml", folder / "tasks" / "echo.yaml")
    (folder / "bundle.yaml").write_text(BUNDLE)
    return folder


def start(args: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTENV_FAKE_LEDGER"}
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{args} did not start: {proc.stderr.read().decode() if proc.stderr else ''}")


def stop(proc: subprocess.Popen[bytes]) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")


class Sampler:
    """The server process's peak resident memory and thread count (read from /proc every half second), and the
    CPU seconds it used."""

    def __init__(self, pid: int) -> None:
        self.pid, self.rss_mb, self.threads, self.cpu_s = pid, 0.0, 0, 0.0

    def sample(self) -> None:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            self.cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.rss_mb = max(self.rss_mb, int(line.split()[1]) / 1024)
                elif line.startswith("Threads:"):
                    self.threads = max(self.threads, int(line.split()[1]))
        except OSError:
            pass

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.5)


class Tally:
    """Latencies per operation, errors by type, phase times."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = {}
        self.errors: dict[str, int] = {}
        self.phases: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    async def timed(self, op: str, call: Awaitable[Any]) -> Any:
        began = time.perf_counter()
        value = await call
        self.latency.setdefault(op, []).append(time.perf_counter() - began)
        return value

    def failed(self, exc: BaseException) -> None:
        name = f"{type(exc).__name__}: {str(exc)[:120]}"
        self.errors[name] = self.errors.get(name, 0) + 1

    def every_call(self) -> list[float]:
        return [v for values in self.latency.values() for v in values]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


Step = Callable[[Any], Awaitable[None]]


async def episodes(n: int, ramp: int, open_one: Callable[[], Awaitable[Any]], play_one: Step, close_one: Step,
                   tally: Tally) -> None:  # fmt: skip
    """Open ``n`` sessions ``ramp`` at a time and hold them, then play every episode at once, then close them."""
    gate = asyncio.Semaphore(ramp)

    async def opened() -> Any:
        async with gate:
            try:
                return await open_one()
            except Exception as exc:  # counted: the bench reports errors, it does not stop at the first
                tally.failed(exc)
                return None

    began = time.perf_counter()
    sessions = await asyncio.gather(*(opened() for _ in range(n)))
    tally.phases["open"] = time.perf_counter() - began

    async def played(session: Any) -> None:
        if session is None:
            return
        try:
            await play_one(session)
        except Exception as exc:
            tally.failed(exc)

    began = time.perf_counter()
    await asyncio.gather(*(played(s) for s in sessions))
    tally.phases["play"] = time.perf_counter() - began
    began = time.perf_counter()
    await asyncio.gather(*(close_one(s) for s in sessions if s is not None), return_exceptions=True)
    tally.phases["close"] = time.perf_counter() - began


async def with_sessions(url: str, n: int, ramp: int, tally: Tally) -> None:
    """Episodes through agentenv's session layer (``Session``: typed frames, deadlines), as integrations play."""
    shared = Shared(url, tool_timeout=600, reset_timeout=600)

    async def open_one() -> Session:
        session = Session(shared)
        await tally.timed("start", session.start("echo"))
        return session

    async def play_one(session: Session) -> None:
        for tool, args in CALLS:
            answer = await tally.timed("call", session.call(tool, args))
            if answer.error:
                raise RuntimeError(f"{tool}: {answer.text}")
        result = (await tally.timed("end_turn", session.end_turn("ping"))).result
        if result is None or result.reward != 1.0:
            raise RuntimeError(f"episode not scored 1.0: {result}")

    await episodes(n, ramp, open_one, play_one, lambda s: s.close(), tally)


async def with_transport(url: str, n: int, ramp: int, tally: Tally, bare: bool) -> None:
    """The same shape over agentenv's transport alone (raw OpenEnv frames), against agentenv or a bare server."""
    ws = url.replace("http://", "ws://") + "/ws"
    reset = {} if bare else {"task_id": "echo", "protocol": PROTOCOL}
    steps = [{"op": "noop"}] * 3 if bare else [{"op": "call", "tool": t, "args": a} for t, a in CALLS]
    end = {"op": "noop"} if bare else {"op": "end_turn", "reply": "ping"}

    async def open_one() -> Transport:
        transport = Transport(ws, open_timeout=600, use_proxy=False)
        await tally.timed("start", transport.request("reset", reset))
        return transport

    async def play_one(transport: Transport) -> None:
        for step in steps:
            await tally.timed("call", transport.request("step", step))
        await tally.timed("end_turn", transport.request("step", end))

    await episodes(n, ramp, open_one, play_one, lambda t: t.close(), tally)


def measure(args: list[str], port: int, run: Callable[[str, Tally], Awaitable[None]]) -> tuple[Tally, Sampler, str]:
    proc = start(args, port)
    sampler = Sampler(proc.pid)
    tally = Tally()

    async def main() -> None:
        watching = asyncio.ensure_future(sampler.run())
        sampler.sample()
        server_before, client_before = sampler.cpu_s, _cpu()
        try:
            began = time.perf_counter()
            await run(f"http://127.0.0.1:{port}", tally)
            tally.phases["total"] = time.perf_counter() - began
        finally:
            watching.cancel()
        sampler.sample()
        tally.cpu = {"server_cpu_s": sampler.cpu_s - server_before, "client_cpu_s": _cpu() - client_before}

    try:
        asyncio.run(main())
        sampler.sample()
    finally:
        log = stop(proc)
    return tally, sampler, log


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report(name: str, n: int, tally: Tally, sampler: Sampler) -> dict[str, float]:
    calls = tally.every_call()
    row = {
        "episodes": n,
        "errors": sum(tally.errors.values()),
        "rss_mb": sampler.rss_mb,
        "threads": sampler.threads,
        "p50_ms": statistics.median(calls) * 1e3 if calls else float("nan"),
        "p99_ms": pct(calls, 0.99) * 1e3,
        **{f"{op}_p50_ms": statistics.median(v) * 1e3 for op, v in tally.latency.items()},
        **{f"{op}_p99_ms": pct(v, 0.99) * 1e3 for op, v in tally.latency.items()},
        **{f"{phase}_s": s for phase, s in tally.phases.items()},
        **tally.cpu,
        "server_cpu_ms_per_episode": tally.cpu["server_cpu_s"] / n * 1e3,
    }
    print(f"\n{name}: {n} episodes (open, {len(CALLS)} tool calls, end_turn, close)")
    for key, value in row.items():
        print(f"  {key:<26}{value:>12.1f}" if isinstance(value, float) else f"  {key:<26}{value:>12}")
    for error, count in sorted(tally.errors.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  ! {count} x {error}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000, help="concurrent episodes on agentenv (10000)")
    parser.add_argument("--baseline", type=int, default=1_000, help="concurrent episodes in the bare comparison")
    parser.add_argument("--ramp", type=int, default=200, help="sessions opening at once while ramping up")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one descriptor per client connection
    need = max(args.episodes, args.baseline) + 256
    if hard < need:
        parser.error(f"the hard limit on open files is {hard}; {need} are needed (ulimit -Hn, or fewer --episodes)")
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start; fd limit {hard}")

    with tempfile.TemporaryDirectory() as tmp:
        bundle = load_bundle_dir(Path(tmp) / "load")

        def agentenv_serve(port: int, n: int) -> list[str]:
            return [sys.executable, "-m", "agentenv.cli", "serve", str(bundle), "--port", str(port), "--log-level",
                    "warning", "--max-concurrent-envs", str(n + 64), "--idle-timeout", "3600"]  # fmt: skip

        port = free_port()
        tally, sampler, log = measure(agentenv_serve(port, args.episodes), port,
                                      lambda url, t: with_sessions(url, args.episodes, args.ramp, t))  # fmt: skip
        big = report("agentenv serve, agentenv.Session", args.episodes, tally, sampler)
        print("  server log:", " | ".join(line for line in log.splitlines() if line.strip())[:400])

        rows = {}
        for name, bare in (("agentenv", False), ("bare OpenEnv", True)):
            port = free_port()
            cmd = (
                [sys.executable, str(ROOT / "bench" / "_bare_openenv.py"), str(port), "async", str(args.baseline + 64)]
                if bare
                else agentenv_serve(port, args.baseline)
            )
            tally, sampler, _ = measure(cmd, port, lambda url, t, b=bare: with_transport(url, args.baseline, args.ramp,
                                                                                          t, b))  # fmt: skip
            rows[name] = report(f"{name}, agentenv.client.transport", args.baseline, tally, sampler)

    a, b = rows["agentenv"], rows["bare OpenEnv"]
    print(f"\nat {args.baseline} concurrent episodes, agentenv / bare OpenEnv (async no-op env), same client:")
    for key in ("p50_ms", "p99_ms", "total_s", "server_cpu_ms_per_episode", "rss_mb", "threads"):
        print(f"  {key:<26}{a[key]:>10.1f}{b[key]:>10.1f}{a[key] / b[key]:>8.2f}x")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if big["errors"] or a["errors"] or b["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
