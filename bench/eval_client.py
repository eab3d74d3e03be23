"""agentenv eval's model-endpoint client at 1 to 4,000 requests in flight, against bare httpx side by side.

``agentenv eval`` talks to the model through ``agentenv.evaluate.chat.ChatClient`` (httpx's AsyncClient with retries,
status mapping and the completion's parsing). NeMo Gym saw httpx's pool degrade with thousands of requests queued;
this measures whether ours does: at each concurrency N, N coroutines each send ``--rounds`` chat completions to a
stand-in engine (a minimal ASGI app under uvicorn, in a process of its own, answering at once), first through
``ChatClient`` then through a bare ``httpx.AsyncClient`` (no pool limit, the same body), alternating, ``--repeat``
times. Reported per contender: the client process's CPU per request (what the client costs, whatever the engine's
speed) and the median and p99 latency, and the ratio of ChatClient to bare httpx. A CPU per request that grows
with N is the super-linear degradation to look for.

    python bench/eval_client.py [--levels 1 100 1000 4000] [--rounds 4] [--repeat 2]
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


async def _contenders(url: str):  # type: ignore[no-untyped-def]
    import httpx
    from agentenv.evaluate.chat import ChatClient, Endpoint

    ours = ChatClient(Endpoint(url, "stand-in", timeout=600.0))
    bare = httpx.AsyncClient(base_url=url, timeout=600.0, limits=httpx.Limits(max_connections=None))
    body = {"model": "stand-in", "messages": MESSAGES, "temperature": 1.0}

    async def send_ours() -> None:
        await ours.complete(MESSAGES, [])

    async def send_bare() -> None:
        answer = await bare.post("/chat/completions", json=body)
        json.loads(answer.content)["choices"][0]["message"]

    return {"ChatClient": send_ours, "bare httpx": send_bare}, (ours.aclose, bare.aclose)


async def _measure(url: str, levels: list[int], rounds: int, repeat: int) -> dict[int, dict[str, list]]:
    sends, closers = await _contenders(url)
    found: dict[int, dict[str, list]] = {n: {name: [[], 0.0, 0] for name in sends} for n in levels}
    try:
        for send in sends.values():  # warmed up: the first requests pay for imports and a connection
            await _wave(send, 4, 5)
        for n in levels:
            for _ in range(repeat):
                for name, send in sends.items():
                    latencies, cpu = await _wave(send, n, rounds)
                    row = found[n][name]
                    row[0] += latencies
                    row[1] += cpu
                    row[2] += len(latencies)
    finally:
        for close in closers:
            await close()
    return found


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 100, 1000, 4000])
    parser.add_argument("--rounds", type=int, default=4, help="requests each coroutine sends in turn")
    parser.add_argument("--repeat", type=int, default=2, help="alternations of the two contenders per level")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    _raise_nofile()
    proc, url = _engine()
    try:
        found = asyncio.run(_measure(url, args.levels, args.rounds, args.repeat))
    finally:
        proc.terminate()
        proc.wait()
    print(f"{'in flight':>9}  {'client':<11} {'CPU/req':>9} {'median':>9} {'p99':>9}   ratio CPU, median")
    for n, rows in found.items():
        stats = {}
        for name, (latencies, cpu, count) in rows.items():
            stats[name] = (cpu / count * 1e6, statistics.median(latencies) * 1e3, _p(latencies, 0.99) * 1e3)
            print(f"{n:>9}  {name:<11} {stats[name][0]:>7.0f}us {stats[name][1]:>7.1f}ms {stats[name][2]:>7.1f}ms")
        ours, bare = stats["ChatClient"], stats["bare httpx"]
        print(f"{'':>9}  {'':<11} {'':>9} {'':>9} {'':>9}   {ours[0] / bare[0]:.2f}x, {ours[1] / bare[1]:.2f}x")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
