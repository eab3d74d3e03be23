"""The fuzz campaign run long: ``tests/fuzz`` with a large budget, then its report.

    uv run python bench/fuzz.py                      # 2,000 inputs per test (each test runs on both loops)
    uv run python bench/fuzz.py --examples 20000 --report runs/fuzz.json

Runs pytest on ``tests/fuzz`` (real ``agentenv serve`` processes on asyncio's loop and on uvloop, and the bundle
loader) with ``$AGENTENV_FUZZ_EXAMPLES`` set, and prints what the campaign tried and saw: the inputs per kind, the
servers' crashes, the sessions lost, each server's peak RSS, the time taken and the load average. Exits as pytest
did: a failing input is printed by Hypothesis with the seed to reproduce it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="inputs per test (default 2000)")
    parser.add_argument("--report", type=Path, help="also write the report (JSON) here")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (-k, -x, ...)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = args.report or Path(tmp) / "fuzz.json"
        env = {**os.environ, "AGENTENV_FUZZ_EXAMPLES": str(args.examples), "AGENTENV_FUZZ_REPORT": str(report)}
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/fuzz", *args.pytest_args]
        code = subprocess.run(argv, cwd=ROOT, env=env).returncode
        found = json.loads(report.read_text()) if report.exists() else {}
    print(f"\nfuzz campaign, {args.examples} inputs per test: pytest exit {code}")
    for kind, n in found.get("inputs", {}).items():
        print(f"  {n:>8}  {kind}")
    print(f"  {found.get('inputs_total', 0):>8}  in all, in {found.get('seconds', 0):.0f} s")
    print(f"  crashes: {len(found.get('crashes', []))}  {found.get('crashes', [])}")
    print(f"  sessions lost: {len(found.get('sessions_lost', []))}  {found.get('sessions_lost', [])[:5]}")
    print(f"  peak RSS (MiB): {found.get('peak_rss_mib', {})}")
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return code


if __name__ == "__main__":
    sys.exit(main())
