"""How long ``import agentenv`` takes in a fresh interpreter, and which heavy modules it loads.

Each statement runs in a new interpreter ``--runs`` times (15 by default; 5 for loading the entry
points, which takes seconds), interleaved with a bare ``python -c pass`` so both see the same
machine load; the median of each is printed in ms, with the difference (what the import costs).
Heavy modules are those a training process may not want dragged in by the core: torch,
transformers, gradio, OpenEnv's server side, fastapi, uvicorn, and (ideally) pydantic.

    python bench/import_time.py [--runs N]

Exit code 1 when ``import agentenv`` loads a heavy module or its median (interpreter start included)
is over the 150 ms target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGET_MS = 150.0
# the top-level packages a light core must not import (pydantic is reported, but allowed)
HEAVY = ("torch", "transformers", "gradio", "fastapi", "uvicorn", "datasets", "pyarrow", "trl", "verl")
HEAVY_SUBMODULES = ("openenv.core.env_server",)
REPORTED = ("pydantic", "jsonschema", "yaml", "pluggy", "httpx", "openenv")

# label -> (statement, most runs): loading the entry points takes seconds, so it gets fewer runs
STATEMENTS = {
    "import agentenv": ("import agentenv", None),
    "from agentenv import load_bundle": ("from agentenv import load_bundle", None),
    "import agentenv.client.session": ("import agentenv.client.session", None),
    "agentenv.plugins.plugins() (entry points)": ("import agentenv.plugins as p; p.plugins()", 5),
}

PROBE = """
import sys, json
{statement}
names = set(sys.modules)
tops = sorted({{n.split('.')[0] for n in names}})
print(json.dumps({{"heavy": [m for m in {heavy!r} if m in tops]
                        + [m for m in {heavy_sub!r} if any(n == m or n.startswith(m + '.') for n in names)],
                   "reported": [m for m in {reported!r} if m in tops]}}))
"""


def _run(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return (time.perf_counter() - started) * 1000


def modules_loaded(statement: str) -> dict[str, list[str]]:
    """The heavy and the reported top-level modules that ``statement`` leaves in ``sys.modules``."""
    code = PROBE.format(statement=statement, heavy=HEAVY, heavy_sub=HEAVY_SUBMODULES, reported=REPORTED)
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh interpreters per statement (default 15)")
    args = parser.parse_args(argv)

    print(f"python {sys.version.split()[0]} at {sys.executable}; {args.runs} runs each, median in ms\n")
    _run("pass")  # warm the file cache
    rows = []
    verdict = 0
    for label, (statement, most) in STATEMENTS.items():
        base, timed = [], []
        _run(statement)  # warm the file cache (and .pyc files) for this statement
        for _ in range(min(args.runs, most or args.runs)):
            base.append(_run("pass"))
            timed.append(_run(statement))
        base_ms, timed_ms = statistics.median(base), statistics.median(timed)
        loaded = modules_loaded(statement)
        rows.append((label, base_ms, timed_ms, timed_ms - base_ms, loaded))
        if label == "import agentenv" and (loaded["heavy"] or timed_ms > TARGET_MS):
            verdict = 1

    width = max(len(r[0]) for r in rows)
    print(f"{'statement':<{width}}  {'python -c pass':>14}  {'with it':>8}  {'cost':>8}  heavy modules / also loaded")
    for label, base_ms, timed_ms, cost, loaded in rows:
        heavy = ", ".join(loaded["heavy"]) or "none"
        also = ", ".join(loaded["reported"]) or "-"
        print(f"{label:<{width}}  {base_ms:>14.1f}  {timed_ms:>8.1f}  {cost:>8.1f}  {heavy} / {also}")
    _, base_ms, timed_ms, cost, _ = rows[0]
    status = "ok" if verdict == 0 else "OVER TARGET OR HEAVY"
    print(
        f"\nimport agentenv: {timed_ms:.1f} ms in a fresh interpreter (target < {TARGET_MS:g} ms), "
        f"{cost:.1f} ms more than python -c pass ({base_ms:.1f} ms): {status}"
    )
    return verdict


if __name__ == "__main__":
    sys.exit(main())
