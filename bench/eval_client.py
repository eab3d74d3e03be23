"""agentenv eval's model-endpoint client at 1 to 4,000 requests in flight, against the candidate clients side by side.

``agentenv eval`` talks to the model through ``agentenv.evaluate.chat.ChatClient`` (aiohttp, with retries, status
mapping and the completion's parsing). NeMo Gym saw httpx's pool degrade with thousands of requests queued; this
measures each candidate: at each concurrency N, N coroutines each send ``--rounds`` chat completions to a stand-in
engine (a minimal ASGI app under uvicorn, in a process of its own, answering at once), through ``httpx unbounded``
(httpx as ChatClient had it: no pool limit, 64 idle connections kept), ``httpx pool`` and ``aiohttp pool`` (pools of
N connections, at most ``--pool``, no timeout on the wait for one) and ``ChatClient``, in turn, ``--repeat`` times;
each level gets new clients. Reported per contender: the client process's CPU per request (what the client costs,
whatever the engine's speed), the median and p99 latency, and both as ratios to the first contender. A CPU per
request that grows with N is the super-linear degradation to look for.

    python bench/eval_client.py [--levels 1 100 1000 4000] [--rounds 3] [--repeat 2] [--only NAME...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POOL = 1024  # agentenv.evaluate.chat.POOL, the cap on the bounded pools
MESSAGES = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "What is 6 times 7?"}]
ENGINE = r"""
import json, sys, uvicorn
ANSWER = json.dumps({"id": "c1", "object": "chat.completion", "model": "stand-in", "choices": [{"index": 0,
    "finish_reason": "stop", "message": {"role": "assistant", "content": "42"}}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}).encode()
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": ANSWER})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", backlog=8192, access_log=False)
"""


def _raise_nofile() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # thousands of connections at once


def _engine() -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", ENGINE, str(port)], preexec_fn=_raise_nofile)
    import httpx

    for _ in range(200):
        try:
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={}, timeout=1)
            return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError("the stand-in engine did not start")


async def _wave(send, n: int, rounds: int) -> tuple[list[float], float]:  # type: ignore[no-untyped-def]
    """``n`` coroutines each sending ``rounds`` requests in turn; every latency, and the CPU seconds spent."""
    latencies: list[float] = []

    async def one() -> None:
        for _ in range(rounds):
            began = time.perf_counter()
            await send()
            latencies.append(time.perf_counter() - began)

    cpu = time.process_time()
    await asyncio.gather(*(one() for _ in range(n)))
    return latencies, time.process_time() - cpu


def _contenders(url: str, n: int, pool: int, which: list[str]):  # type: ignore[no-untyped-def]
    """Each candidate client for ``n`` in flight: a send (one completion, the answer parsed) and a close."""
    import aiohttp
    import httpx
    from agentenv.evaluate.chat import ChatClient, Endpoint

    body = {"model": "stand-in", "messages": MESSAGES, "temperature": 1.0}
    size = min(n, pool)
    made: dict[str, tuple] = {}

    def httpx_client(limits: httpx.Limits):  # type: ignore[no-untyped-def]
        client = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600.0, connect=30.0, pool=None), limits=limits)

        async def send() -> None:
            answer = await client.post("/chat/completions", json=body)
            json.loads(answer.content)["choices"][0]["message"]

        return send, client.aclose

    if "httpx unbounded" in which:  # ChatClient's pool before this change
        made["httpx unbounded"] = httpx_client(httpx.Limits(max_connections=None, max_keepalive_connections=64))
    if "httpx pool" in which:
        made["httpx pool"] = httpx_client(httpx.Limits(max_connections=size, max_keepalive_connections=size))
    if "aiohttp pool" in which:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=size, limit_per_host=size),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=600.0),
        )

        async def send_aiohttp() -> None:
            async with session.post(url + "/chat/completions", json=body) as answer:
                json.loads(await answer.read())["choices"][0]["message"]

        made["aiohttp pool"] = (send_aiohttp, session.close)
    if "ChatClient" in which:
        ours = ChatClient(Endpoint(url, "stand-in", timeout=600.0), connections=n)

        async def send_ours() -> None:
            await ours.complete(MESSAGES, [])

        made["ChatClient"] = (send_ours, ours.aclose)
    return made


async def _measure(url: str, levels: list[int], rounds: int, repeat: int, pool: int, which: list[str]):  # type: ignore[no-untyped-def]
    found: dict[int, dict[str, list]] = {n: {name: [[], 0.0, 0] for name in which} for n in levels}
    for n in levels:  # a pool sized for each level, as ChatClient's is for --concurrency
        made = _contenders(url, n, pool, which)
        try:
            for send, _ in made.values():  # warmed up: the first requests pay for imports and a connection
                await _wave(send, 4, 5)
            for _ in range(repeat):
                for name, (send, _) in made.items():  # interleaved: each sees the same machine load
                    began = time.perf_counter()
                    latencies, cpu = await _wave(send, n, rounds)
                    wall = time.perf_counter() - began
                    print(f"  {n} in flight, {name}: {cpu / len(latencies) * 1e6:.0f}us CPU/req, wave {wall:.1f}s",
                          file=sys.stderr, flush=True)  # fmt: skip
                    row = found[n][name]
                    row[0] += latencies
                    row[1] += cpu
                    row[2] += len(latencies)
        finally:
            for _, close in made.values():
                await close()
    return found


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


CONTENDERS = ["httpx unbounded", "httpx pool", "aiohttp pool", "ChatClient"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 100, 1000, 4000])
    parser.add_argument("--rounds", type=int, default=3, help="requests each coroutine sends in turn")
    parser.add_argument("--repeat", type=int, default=2, help="alternations of the contenders per level")
    parser.add_argument("--pool", type=int, default=POOL, help=f"the bounded pools' size cap (default {POOL})")
    parser.add_argument("--only", nargs="+", choices=CONTENDERS, default=CONTENDERS, help="the contenders to run")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    _raise_nofile()
    proc, url = _engine()
    try:
        found = asyncio.run(_measure(url, args.levels, args.rounds, args.repeat, args.pool, args.only))
    finally:
        proc.terminate()
        proc.wait()
    base = args.only[0]
    print(f"{'in flight':>9}  {'client':<15} {'CPU/req':>9} {'median':>9} {'p99':>9}   CPU, median against {base}")
    for n, rows in found.items():
        stats = {}
        for name, (latencies, cpu, count) in rows.items():
            stats[name] = (cpu / count * 1e6, statistics.median(latencies) * 1e3, _p(latencies, 0.99) * 1e3)
            cpu_us, median, p99 = stats[name]
            ratio = f"{cpu_us / stats[base][0]:.2f}x, {median / stats[base][1]:.2f}x"
            print(f"{n:>9}  {name:<15} {cpu_us:>7.0f}us {median:>7.1f}ms {p99:>7.1f}ms   {ratio}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
