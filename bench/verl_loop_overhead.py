"""What AgentEnvAgentLoop costs over verl's stock ToolAgentLoop on the same scripted rollout.

Both loops play one rollout of N tool calls to a no-op tool and a final reply, against the same
stand-in rollout server and the same prompt (the fake bundle's echo task, whose tools the stock loop
gets as in-process verl tools answering "ok"). The stock loop calls its tools in this process;
AgentEnvAgentLoop plays an episode on an `agentenv serve` process (OpenEnv over a loopback
WebSocket; ``--in-process`` serves it from a thread of this process instead): the session, the
deploy, N calls, the end of turn and the scoring. Seconds per rollout (median of R) and the ratio
are printed; nothing is asserted.

Run it inside the verl environment (the nox session's):

    .nox/verl-verl-0-9-1/bin/python bench/verl_loop_overhead.py [--calls N] [--rollouts R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.verl: the verl tier's tokenizer and stand-in rollout server
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(tempfile.gettempdir(), "agentenv-verl-bench-datasets"))

from agentenv_server import ServerThread, build_app  # noqa: E402
from agentenv_verl import write  # noqa: E402
from agentenv_verl._schemas import parse_tools, typed_schema  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap  # noqa: E402
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop  # noqa: E402
from verl.tools.base_tool import BaseTool  # noqa: E402
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402

from tests.support.verl import (  # noqa: E402
    FAKE,
    ScriptedServer,
    build_tokenizer,
    dataset_rows,
    make_loop,
    tool_call,
    verl_config,
)

SAMPLING = {"temperature": 1.0}


class OkTool(BaseTool):
    """An in-process verl tool that answers "ok" (the stock loop's side of the comparison)."""

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        return ToolResponse(text="ok"), 0.0, {}


def script(calls: int) -> list[str]:
    return [tool_call("noop")] * calls + ["ping<|im_end|>"]


async def stock_rollout(tokenizer: Any, row: dict[str, Any], tools: list[BaseTool], calls: int) -> float:
    config = verl_config()
    loop = ToolAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=ScriptedServer(tokenizer, script(calls)),
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type="qwen2",
        tools=ToolListWrap(tools),
    )
    loop.tool_schemas = [t.as_openai() for t in parse_tools(row["extra_info"]["tools"])]  # the same prompt as ours
    began = time.perf_counter()
    out = await loop.run(SAMPLING, **row)
    seconds = time.perf_counter() - began
    assert out.num_turns == calls * 2 + 2, out.num_turns
    return seconds


async def agentenv_rollout(tokenizer: Any, row: dict[str, Any], url: str, calls: int) -> float:
    loop = make_loop(tokenizer, ScriptedServer(tokenizer, script(calls)), url)
    began = time.perf_counter()
    out = await loop.run(SAMPLING, **row)
    seconds = time.perf_counter() - began
    assert out.num_turns == calls * 2 + 2 and out.reward_score is not None, out.num_turns
    return seconds


async def measure(tokenizer: Any, row: dict[str, Any], url: str, calls: int, rollouts: int) -> tuple[float, float]:
    with contextlib.redirect_stdout(io.StringIO()):  # BaseTool prints its schema when built
        tools = [
            OkTool(config={}, tool_schema=OpenAIFunctionToolSchema.model_validate(typed_schema(t)))
            for t in parse_tools(row["extra_info"]["tools"])
        ]
    await stock_rollout(tokenizer, row, tools, calls)  # warm both up
    await agentenv_rollout(tokenizer, row, url, calls)
    stock, ours = [], []
    for _ in range(rollouts):  # interleaved, so both see the same machine load
        stock.append(await stock_rollout(tokenizer, row, tools, calls))
        ours.append(await agentenv_rollout(tokenizer, row, url, calls))
    return statistics.median(stock), statistics.median(ours)


class _Served:
    """``agentenv serve`` of the fake bundle as its own process, as a training run has it."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str) -> None:
        self.proc, self.url = proc, url

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def serve_process() -> _Served:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "AGENTENV_FAKE_LEDGER"}
    proc = subprocess.Popen([sys.executable, "-m", "agentenv.cli", "serve", str(FAKE), "--port", str(port),
                             "--log-level", "warning"], env=env)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return _Served(proc, url)
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("agentenv serve did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=8, help="tool calls per rollout (default: 8)")
    parser.add_argument("--rollouts", type=int, default=10, help="rollouts per loop (default: 10)")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="serve the bundle in this process (a thread) instead of an `agentenv serve` process: the two then "
        "share the GIL, which a training run does not",
    )
    args = parser.parse_args()
    tokenizer = build_tokenizer()
    server: Any = ServerThread(build_app(FAKE)).start() if args.in_process else serve_process()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            written = write(server.url, Path(tmp) / "out", splits=["train"])
            row = dataset_rows(written.files["train"], tokenizer, Path(tmp) / "cache")["echo"]
        stock, ours = asyncio.run(measure(tokenizer, row, server.url, args.calls, args.rollouts))
    finally:
        server.stop()
    where = "in this process" if args.in_process else "agentenv serve, loopback"
    print(f"rollout of {args.calls} tool calls and a reply, median of {args.rollouts}:")
    print(f"  verl ToolAgentLoop, in-process no-op tool:   {stock * 1000:8.1f} ms")
    print(f"  AgentEnvAgentLoop, agentenv server ({where}): {ours * 1000:8.1f} ms")
    print(f"  ratio: {ours / stock:.2f}x  ({(ours - stock) / (args.calls + 1) * 1000:.1f} ms more per env step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
