"""How long ``load_bundle`` takes, and how much memory, at 1k, 10k and 100k tasks, in four layouts.

Layouts: ``single`` (every task in one YAML list file), ``files`` (one YAML file per task),
``jsonl`` and ``parquet`` (one row per task, through the ``dataset`` task source's template). Every
task has one env and one contains-verifier, the shape of an RL prompt set. Each load runs in a fresh
interpreter; next to it, also fresh, the baseline: only parsing the same files (PyYAML with libyaml,
json, pyarrow), so the ratio says what loading costs against reading alone. Wall and CPU seconds are
both printed: on a shared machine the wall time grows with the load average, the CPU time much less
(the ratio is of CPU times). Peak memory is the process's maximum resident size (the interpreter and
imports included: see the ``python -c pass`` row).

``--writer`` also serves the largest bundle of the first layout given and times, end to end, what
reads it through the paged Task API: the verl writer, the NeMo Gym writer and ``AgentEnv(url).dataset``
(where TRL is installed; run the bench in the trl nox session's environment for it).

    python bench/bundle_load.py [--sizes 1000,10000,100000] [--layouts single,files,jsonl,parquet] [--writer]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = '''from agentenv import Env, tool


class Calc(Env):
    @tool({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})
    def add(self, a: float, b: float) -> float:
        """Add two numbers."""
        return a + b
'''
HEAD = "name: gen\nsplits: [train, eval]\nenvs:\n  calc: {kind: python, target: calc:Calc}\n"
HEAD += "defaults:\n  system: Answer with the number.\n  toolset: {envs: [calc]}\n"
TEMPLATE = (
    '  task:\n    id: "t{n}"\n    split: "{split}"\n'
    '    turns: [{prompt: "{question}", verifiers: [{id: answer, kind: contains, answer: "{answer}"}]}]\n'
)


def row(n: int) -> dict[str, object]:
    return {"n": n, "split": "eval" if n % 10 == 0 else "train", "question": f"What is {n} + {n + 1}?",
            "answer": 2 * n + 1}  # fmt: skip


def task(n: int) -> dict[str, object]:
    r = row(n)
    verifier = {"id": "answer", "kind": "contains", "answer": str(r["answer"])}
    return {"id": f"t{n}", "split": r["split"], "turns": [{"prompt": r["question"], "verifiers": [verifier]}]}


def make(root: Path, size: int, layout: str) -> Path:
    """Write a bundle of ``size`` tasks in ``layout`` under ``root``; returns its folder."""
    import yaml

    folder = root / f"{layout}-{size}"
    folder.mkdir(parents=True)
    (folder / "calc.py").write_text(ENV)
    dump = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    if layout == "single":
        (folder / "bundle.yaml").write_text(HEAD + "tasks: tasks.yaml\n")
        (folder / "tasks.yaml").write_text(yaml.dump([task(n) for n in range(size)], Dumper=dump, sort_keys=False))
    elif layout == "files":
        (folder / "bundle.yaml").write_text(HEAD + "tasks: tasks/*.yaml\n")
        (folder / "tasks").mkdir()
        for n in range(size):
            (folder / "tasks" / f"t{n:06d}.yaml").write_text(yaml.dump(task(n), Dumper=dump, sort_keys=False))
    elif layout == "jsonl":
        (folder / "bundle.yaml").write_text(HEAD + "tasks:\n  source: dataset\n  path: rows.jsonl\n" + TEMPLATE)
        (folder / "rows.jsonl").write_text("".join(json.dumps(row(n)) + "\n" for n in range(size)))
    elif layout == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        (folder / "bundle.yaml").write_text(HEAD + "tasks:\n  source: dataset\n  path: rows.parquet\n" + TEMPLATE)
        pq.write_table(pa.Table.from_pylist([row(n) for n in range(size)]), folder / "rows.parquet")
    else:
        raise SystemExit(f"unknown layout {layout!r}; the layouts: single, files, jsonl, parquet")
    return folder


# The process's peak resident memory in MB: VmHWM starts afresh at exec (ru_maxrss would report the
# forking parent's peak, this script's, on Linux)
PEAK = """
def peak_mb():
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""
# Run in a fresh interpreter each: prints {"seconds", "peak_mb", "tasks"} as its last line.
LOAD = (
    PEAK
    + """
import json, sys, time
from agentenv import load_bundle
from agentenv.plugins import plugins
plugins().task_sources(); plugins().env_kinds()  # entry points loaded before the clock starts
if sys.argv[2] == "parquet":
    import pyarrow.parquet  # as in the baseline: imported before the clock (about 0.5 s more once)
began, cpu = time.perf_counter(), time.process_time()
bundle = load_bundle(sys.argv[1])
seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mb": peak_mb(), "tasks": len(bundle.tasks)}))
"""
)
PARSE = (
    PEAK
    + """
import glob, json, sys, time
from pathlib import Path
import yaml
folder, layout = Path(sys.argv[1]), sys.argv[2]
if layout == "parquet":
    import pyarrow.parquet
began, cpu = time.perf_counter(), time.process_time()
if layout == "single":
    tasks = len(yaml.load((folder / "tasks.yaml").read_text(), Loader=yaml.CSafeLoader))
elif layout == "files":
    paths = sorted(glob.glob(str(folder / "tasks" / "*.yaml")))
    tasks = len([yaml.load(Path(p).read_text(), Loader=yaml.CSafeLoader) for p in paths])
elif layout == "jsonl":
    tasks = len([json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()])
else:
    tasks = len(pyarrow.parquet.ParquetFile(folder / "rows.parquet").read().to_pylist())
seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mb": peak_mb(), "tasks": tasks}))
"""
)
IDLE = PEAK + "import json; print(json.dumps({'peak_mb': peak_mb()}))"
WRITE = (
    PEAK
    + """
import json, os, socket, subprocess, sys, tempfile, time
import httpx
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
began = time.perf_counter()
server = subprocess.Popen([sys.executable, "-m", "agentenv", "serve", sys.argv[1], "--port", str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
url = f"http://127.0.0.1:{port}"
while True:
    try:
        if httpx.get(url + "/health").status_code == 200:
            break
    except httpx.TransportError:
        time.sleep(0.1)
served = time.perf_counter() - began
def server_cpu():
    try:
        with open(f"/proc/{server.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")
def consume(what):
    if what == "verl":
        from agentenv_verl.writer import write
        return sum(write(url, tempfile.mkdtemp()).rows.values())
    if what == "nemo-gym":
        from agentenv_verl.nemo_gym import write_nemo_gym
        out = os.path.join(tempfile.mkdtemp(), "gym")
        write_nemo_gym(url, out)
        return sum(sum(1 for _ in open(os.path.join(out, f))) for f in os.listdir(out) if f.endswith(".jsonl"))
    if what == "tasks-route":  # OpenEnv's (ORS's) list_tasks: a whole split in one answer, as that API defines it
        name = httpx.get(url + "/list_environments").json()[0]
        answer = httpx.post(f"{url}/{name}/tasks", json={"split": "train"}, timeout=600)
        answer.raise_for_status()
        return len(answer.json()["tasks"])
    from agentenv_trl.env import AgentEnv
    with AgentEnv(url, split="train") as env:
        return len(env.dataset)
try:
    began, cpu, serving = time.perf_counter(), time.process_time(), server_cpu()
    rows = consume(sys.argv[2])
    seconds, cpu, serving = time.perf_counter() - began, time.process_time() - cpu, server_cpu() - serving
finally:
    server.terminate()
    server.wait()
print(json.dumps({"served": served, "seconds": seconds, "cpu": cpu, "server_cpu": serving,
                  "rows": rows, "peak_mb": peak_mb()}))
"""
)


CONSUMERS = {
    "verl": "verl writer (paged Task API, one probe per toolset, parquet files)",
    "nemo-gym": "NeMo Gym writer (paged Task API, one probe per toolset, JSONL files)",
    "trl": "AgentEnv(url).dataset (TRL's train split as a datasets.Dataset)",
    "tasks-route": "POST /<bundle>/tasks (OpenEnv's list_tasks: the whole train split in one answer)",
}
CONSUMER_MODULES = {
    "verl": "agentenv_verl.writer",
    "nemo-gym": "agentenv_verl.nemo_gym",
    "trl": "agentenv_trl.env",
    "tasks-route": "httpx",
}


def _importable(module: str) -> bool:
    """Whether ``module`` imports in a fresh interpreter (agentenv_trl needs TRL installed)."""
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def fresh(code: str, *args: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="task counts, comma-separated")
    parser.add_argument("--layouts", default="single,files,jsonl,parquet", help="layouts, comma-separated")
    parser.add_argument("--writer", action="store_true", help="also time the writers and AgentEnv(url).dataset")
    parser.add_argument("--keep", type=Path, help="generate the bundles here and keep them (default: a temp folder)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    layouts = args.layouts.split(",")
    root = args.keep or Path(tempfile.mkdtemp(prefix="agentenv-bundle-load-"))
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load[0]:.2f} at the start")
    print(f"python -c pass: peak {fresh(IDLE)['peak_mb']:.0f} MB\n")
    header = f"{'layout':<8} {'tasks':>7}  {'load_bundle s':>13}  {'cpu s':>6}  {'peak MB':>7}  "
    header += f"{'parse only s':>12}  {'cpu s':>6}  {'peak MB':>7}  cpu ratio"
    print(header)
    print("-" * len(header))
    for layout in layouts:
        for size in sizes:
            folder = root / f"{layout}-{size}"
            if not folder.exists():
                make(root, size, layout)
            parsed = fresh(PARSE, str(folder), layout)
            loaded = fresh(LOAD, str(folder), layout)
            assert loaded["tasks"] == parsed["tasks"] == size, (loaded, parsed)
            ratio = loaded["cpu"] / max(parsed["cpu"], 1e-3)
            cells = f"{loaded['seconds']:>13.2f}  {loaded['cpu']:>6.2f}  {loaded['peak_mb']:>7.0f}  "
            cells += f"{parsed['seconds']:>12.2f}  {parsed['cpu']:>6.2f}  {parsed['peak_mb']:>7.0f}  {ratio:8.1f}x"
            print(f"{layout:<8} {size:>7}  {cells}", flush=True)
    if args.writer:
        folder = root / f"{layouts[0]}-{max(sizes)}"
        print(f"\nconsumers of `agentenv serve` on {layouts[0]}-{max(sizes)}, each in a fresh interpreter:")
        for what, label in CONSUMERS.items():
            if not _importable(CONSUMER_MODULES[what]):
                print(f"{label}: not timed ({CONSUMER_MODULES[what]} does not import here)")
                continue
            done = fresh(WRITE, str(folder), what)
            print(f"{label}: {done['rows']:.0f} rows in {done['seconds']:.2f} s (CPU: {done['cpu']:.2f} s the "
                  f"client's, {done['server_cpu']:.2f} s the server's; peak {done['peak_mb']:.0f} MB); the server "
                  f"loaded the bundle and answered in {done['served']:.2f} s", flush=True)  # fmt: skip
    load = os.getloadavg()
    print(f"\nload average {load[0]:.2f} at the end")
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
