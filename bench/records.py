"""What recording costs: episodes and tool calls on a server with ``--record`` and one without, side by side.

Two in-process servers of the fake bundle (``ServerThread``, one ``build_app(record=DIR)``), the same client
playing the same episodes on each, in interleaved rounds so both see the same machine load. An episode is a
session's reset, ``--calls`` echo calls and an end of turn; it is timed whole (per episode) and per call. Prints
the medians and the ratios recorded / not recorded, and how many records were written.

    uv run python bench/records.py [--rounds 7] [--episodes 40] [--calls 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def play(url: str, episodes: int, calls: int) -> tuple[list[float], list[float]]:
    from agentenv.client.settings import Shared
    from agentenv.client.sync import SyncSession

    session = SyncSession(Shared(url, client="bench"))
    per_episode, per_call = [], []
    try:
        for _ in range(episodes):
            began = time.perf_counter()
            rollout = session.rollout("echo")
            rollout.start()
            for _ in range(calls):
                called = time.perf_counter()
                rollout.call("echo", {"text": "ping " * 20})
                per_call.append(time.perf_counter() - called)
            rollout.end_turn("ping")
            rollout.conclude()
            per_episode.append(time.perf_counter() - began)
    finally:
        session.close()
    return per_episode, per_call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args()
    from agentenv import record
    from agentenv_server import ServerThread, build_app

    fake = ROOT / "tests" / "fixtures" / "bundles" / "fake"
    folder = Path(tempfile.mkdtemp(prefix="agentenv-bench-records-")) / "records"
    plain = ServerThread(build_app(fake)).start()
    recorded = ServerThread(build_app(fake, record=folder)).start()
    times: dict[str, tuple[list[float], list[float]]] = {"off": ([], []), "on": ([], [])}
    try:
        play(plain.url, 3, args.calls), play(recorded.url, 3, args.calls)  # warm both
        for n in range(args.rounds):
            order = [("off", plain), ("on", recorded)] if n % 2 == 0 else [("on", recorded), ("off", plain)]
            for name, server in order:
                episodes, calls = play(server.url, args.episodes, args.calls)
                times[name][0].extend(episodes)
                times[name][1].extend(calls)
    finally:
        plain.stop()
        recorded.stop()
    written = sum(1 for _ in record.read(folder))
    load = os.getloadavg()[0]
    rows = []
    for what, index in (("episode", 0), ("call", 1)):
        off, on = statistics.median(times["off"][index]), statistics.median(times["on"][index])
        rows.append(f"{what:<8} off {off * 1e3:8.3f} ms   on {on * 1e3:8.3f} ms   on/off {on / off:5.2f}x")
    print("\n".join(rows))
    print(f"{written} records written ({sum(p.stat().st_size for p in record.shards(folder))} bytes); "
          f"{args.rounds} rounds x {args.episodes} episodes x {args.calls} calls; load average {load:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
