"""What OpenEnv's capture proxy adds to a model call, and how long a harness rollout takes per agent.

1. A chat completion (a system prompt, a task, a bash tool: the first call of an agent) sent straight to the
   stand-in engine (tests/support/standin/vllm.py) and through the capture proxy as agentenv-harness serves
   it (a ``CaptureProxy`` in its own process, a capture session per 32 calls as per rollout), in interleaved
   rounds so load on the machine hits both alike. Prints median and p99 per call and what the proxy adds
   (goal: under 2 ms at the median), and the CPU the proxy's process spends per call (what it costs
   whatever the load: on a busy machine the wall numbers include waiting for a CPU at each extra hop).
2. Rollout seconds per agent: the harness bundle's ``smoke`` task played by ``AgentEnvSessionFactory`` with
   each agent (the bundle's scripted ``chat`` process agent; claude-code and opencode when ``--agent-bin``
   names the folder that has them, e.g. the harness nox session's ``.nox/harness-trl-1-16-0/agents/node_modules/.bin``).

    python bench/capture_overhead.py [--calls 400] [--rollouts 3] [--agent-bin DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HARNESS = ROOT / "tests" / "fixtures" / "bundles" / "harness"
BODY = {
    "model": "tiny/policy",
    "messages": [
        {"role": "system", "content": "You solve tasks with the tools you have, then answer with the number."},
        {"role": "user", "content": "What is 6 times 7? Answer with the number."},
    ],
    "tools": [{"type": "function", "function": {"name": "bash", "description": "Run a bash command.",
               "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}],
}  # fmt: skip
PER_SESSION = 32


def _serve(kind: str, *args: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Start this script in ``--serve-KIND`` mode in a process of its own; returns it and what it printed."""
    proc = subprocess.Popen([sys.executable, __file__, f"--serve-{kind}", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def serve_engine() -> None:
    from tests.support.standin.vllm import serve

    _, served = serve(["tiny/policy"])
    print(json.dumps({"url": served.url}), flush=True)
    sys.stdin.read()  # until the bench closes our stdin


def serve_proxy(engine_url: str) -> None:
    import asyncio

    from agentenv_harness.capture import CaptureProxy

    proxy = CaptureProxy(engine_url, "tiny/policy")

    async def keys() -> list[str]:
        async with httpx.AsyncClient(timeout=60) as http:
            return [await proxy.open(http, model="tiny/policy") for _ in range(64)]

    print(json.dumps({"url": proxy.url, "keys": ",".join(asyncio.run(keys()))}), flush=True)
    sys.stdin.read()
    proxy.stop()


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process used so far (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def call_overhead(calls: int) -> dict[str, float]:
    engine, engine_info = _serve("engine")
    proxy, proxy_info = _serve("proxy", engine_info["url"])
    keys = proxy_info["keys"].split(",")
    direct, proxied = [], []
    cpu: dict[str, float] = {}
    try:
        with httpx.Client(timeout=60, trust_env=False) as http:
            for i in range(calls + 20):
                if i == 20:  # after the warm-up: the CPU the proxy and the engine spend on the counted calls
                    cpu = {"proxy": _cpu_seconds(proxy.pid), "engine": _cpu_seconds(engine.pid)}
                key = keys[(i // PER_SESSION) % len(keys)]
                for url, headers, into in (
                    (engine_info["url"], {}, direct),
                    (proxy_info["url"], {"Authorization": f"Bearer {key}"}, proxied),
                ):
                    began = time.perf_counter()
                    response = http.post(f"{url}/v1/chat/completions", json=BODY, headers=headers)
                    elapsed = time.perf_counter() - began
                    response.raise_for_status()
                    if i >= 20:  # warm-up calls are not counted
                        into.append(elapsed * 1000)
        cpu = {"proxy": _cpu_seconds(proxy.pid) - cpu["proxy"], "engine": _cpu_seconds(engine.pid) - cpu["engine"]}
    finally:
        for proc in (proxy, engine):
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(30)
    out = {
        "direct median ms": statistics.median(direct),
        "direct p99 ms": _percentile(direct, 0.99),
        "proxy median ms": statistics.median(proxied),
        "proxy p99 ms": _percentile(proxied, 0.99),
    }
    out["added median ms"] = out["proxy median ms"] - out["direct median ms"]
    out["added p99 ms"] = out["proxy p99 ms"] - out["direct p99 ms"]
    # the engine answers every call twice (straight and through the proxy); the proxy sees only its own
    out["proxy CPU ms per call"] = cpu["proxy"] * 1000 / calls
    out["engine CPU ms per call"] = cpu["engine"] * 1000 / (2 * calls)
    return out


def rollout_seconds(rollouts: int, agent_bin: str | None) -> dict[str, float]:
    from agentenv_harness import AgentEnvSessionFactory, prompt_rows

    from tests.support.standin.vllm import serve

    if agent_bin:
        os.environ["PATH"] = f"{Path(agent_bin).resolve()}{os.pathsep}{os.environ['PATH']}"
    _, served = serve(["tiny/policy"])
    prompt = next(r["prompt"] for r in prompt_rows(HARNESS, "train") if r["task_id"] == "smoke")
    agents = ["chat"] + (["claude-code", "opencode"] if agent_bin else [])
    out: dict[str, float] = {}
    try:
        for agent in agents:
            factory = AgentEnvSessionFactory(HARNESS, llm_url=served.url, model="tiny/policy", split="train",
                                             agent=agent, deadline=600)  # fmt: skip
            seconds = []
            try:
                for _ in range(rollouts):
                    began = time.monotonic()
                    session = factory.create(prompt)
                    session.wait_for_completion()
                    reward = session.verify([]).env_reward
                    session.close()
                    if reward != 1.0:
                        raise SystemExit(f"{agent}: a rollout was not scored 1.0 ({reward})")
                    seconds.append(time.monotonic() - began)
            finally:
                factory.close()
            out[f"{agent} rollout median s"] = statistics.median(seconds)
    finally:
        served.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="model calls each way (after 20 warm-up calls)")
    parser.add_argument("--rollouts", type=int, default=3, help="rollouts of the smoke task per agent")
    parser.add_argument("--agent-bin", help="a folder with the claude and opencode CLIs (also times those agents)")
    parser.add_argument("--serve-engine", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-proxy", metavar="ENGINE_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_engine:
        serve_engine()
        return 0
    if args.serve_proxy:
        serve_proxy(args.serve_proxy)
        return 0
    load = os.getloadavg()[0]
    numbers = {**call_overhead(args.calls), **rollout_seconds(args.rollouts, args.agent_bin)}
    print(f"capture overhead ({args.calls} calls each way, load {load:.1f} at start, {os.cpu_count()} CPUs)")
    for name, value in numbers.items():
        print(f"  {name:32s} {value:8.2f}")
    goal = numbers["added median ms"] < 2.0
    print(
        f"  goal: under 2 ms added per call at the median: {'met' if goal else 'NOT met'} (wall); the proxy's own "
        f"CPU per call: {numbers['proxy CPU ms per call']:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
