"""The sandbox's cost: a ``bash`` call, and a program's start, in bubblewrap against no sandbox, side by side.

In one process, rounds interleave three ways of running a no-op ``bash`` command (``true``), so load on the
machine hits them alike:

- ``bwrap``: the ``bash`` env as agentenv runs it (``agentenv.engine.bash.BashEnv``): a bubblewrap sandbox per episode,
  a shell in it, each call a fork and exec inside;
- ``none``: the same env with the ``none`` sandbox (the same shell, on the host);
- ``spawn``: what a call cost before the sandbox, one owned process per call (``procs.spawn(["bash", "-c", ...])``).

And a program's start to its exit (``/bin/true``) through ``agentenv.sandbox.spawn``: what a subprocess env's or
an agent's start costs, in bwrap against none. Prints the medians, the ratios and the machine's load.

usage: python bench/sandbox.py [--rounds R] [--calls N] [--starts N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from agentenv import procs, sandbox
from agentenv.engine.bash import BashEnv
from agentenv.sandbox.bwrap import BwrapBackend
from agentenv.sandbox.spawn import spawn
from agentenv.specs import EnvSpec

SPEC = EnvSpec(name="bash", kind="bash")


async def sandboxed_calls(backend: str, calls: int) -> list[float]:
    sandbox.use(backend)
    env = BashEnv(SPEC, Path("."))
    await env.deploy()
    took = []
    try:
        for _ in range(calls):
            began = time.perf_counter()
            answer = await env.call("bash", {"command": "true"})
            took.append(time.perf_counter() - began)
            assert answer.endswith("[exit code 0]"), answer
    finally:
        await env.teardown()
    return took


async def spawned_calls(calls: int) -> list[float]:
    took = []
    with tempfile.TemporaryDirectory() as work:
        environ = sandbox.program_environ(work, work)
        for _ in range(calls):
            began = time.perf_counter()
            child = await procs.spawn(["bash", "-c", "true"], cwd=work, env=environ, stdin=False, stderr_to_stdout=True)
            await child.exited
            await child.stdout.read()
            await child.end()
            took.append(time.perf_counter() - began)
    return took


async def starts(backend: str, count: int) -> list[float]:
    sandbox.use(backend)
    took = []
    with tempfile.TemporaryDirectory() as work:
        program = sandbox.Program(("/bin/true",), sandbox.program_environ(work, work), Path(work), name="bench")
        for _ in range(count):
            began = time.perf_counter()
            box = await spawn(program, stdin=False)
            await box.child.exited
            await box.end()
            took.append(time.perf_counter() - began)
    return took


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100, help="bash calls per round and way")
    parser.add_argument("--starts", type=int, default=20, help="program starts per round and backend")
    args = parser.parse_args()
    found: dict[str, list[float]] = {k: [] for k in ("bwrap", "none", "spawn", "start bwrap", "start none")}
    for _ in range(args.rounds):
        found["bwrap"] += await sandboxed_calls("bwrap", args.calls)
        found["none"] += await sandboxed_calls("none", args.calls)
        found["spawn"] += await spawned_calls(args.calls)
        found["start bwrap"] += await starts("bwrap", args.starts)
        found["start none"] += await starts("none", args.starts)
    median = {k: statistics.median(v) for k, v in found.items()}
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    print(f"sandbox: {BwrapBackend().describe()}")
    print(
        f"bash call, median of {len(found['bwrap'])}: bwrap {ms(found['bwrap'])}, none {ms(found['none'])}, "
        f"one process per call (before) {ms(found['spawn'])}"
    )
    print(
        f"  bwrap / none: {median['bwrap'] / median['none']:.2f}x; bwrap / before: "
        f"{median['bwrap'] / median['spawn']:.2f}x"
    )
    print(
        f"program start to exit, median of {len(found['start bwrap'])}: bwrap {ms(found['start bwrap'])}, "
        f"none {ms(found['start none'])}: {median['start bwrap'] / median['start none']:.2f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
