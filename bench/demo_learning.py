"""Does the quickstart learn from the env's reward? ``agentenv demo`` on the env's reward and on a control arm, 3 seeds.

Each run is a fresh ``python -m agentenv demo --seed S --reward ARM`` (what a user runs), one after
another, the arms interleaved so both see the same machine load. The control arm trains on the
env's rewards shuffled within each group (``--reward shuffled``): the same episodes, the same
update sizes, no link between a rollout and its reward. Prints, per seed and arm, the eval reward
before and after GRPO and the gain, then the means, and draws every run into one PNG.

    python bench/demo_learning.py [--seeds 0 1 2] [--control shuffled] [--out DIR] [-- DEMO FLAGS...]

(``uvx --from "nox==2026.10.20" nox -s demo_learning -- ...`` installs what it needs and runs it.)
Exit code 1 when the env arm misses the target: a mean gain of at least 0.25, every seed improving.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_GAIN = 0.25


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--control", choices=["shuffled", "constant"], default="shuffled")
    parser.add_argument("--out", type=Path, default=Path("agentenv-demo") / "demo-learning")
    parser.add_argument("--png", type=Path, help="where to draw the picture (default: OUT/demo_learning.png)")
    parser.add_argument("demo_args", nargs="*", help="flags passed on to agentenv demo (after --)")
    args = parser.parse_args()
    arms = ["env", args.control]
    reports: dict[str, list[dict]] = {arm: [] for arm in arms}
    walls: list[float] = []
    cpus: list[float] = []  # CPU seconds of each run: near its wall time on a quiet machine (one torch thread)
    began = time.monotonic()
    print(f"load average at start: {_load()}  ({os.cpu_count()} CPUs)", flush=True)
    for seed in args.seeds:
        for arm in arms:
            folder = args.out / f"{arm}-seed{seed}"
            log = args.out / f"{arm}-seed{seed}.log"
            folder.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, "-m", "agentenv", "demo", "--seed", str(seed), "--reward", arm]
            command += ["--output-dir", str(folder), *args.demo_args]
            start, cpu_start = time.monotonic(), _cpu()
            with log.open("w", encoding="utf-8") as handle:
                code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False).returncode
            wall, cpu = time.monotonic() - start, _cpu() - cpu_start
            if code != 0:
                print(f"{arm} seed {seed}: agentenv demo exited {code}; see {log}", file=sys.stderr)
                return 2
            report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
            reports[arm].append(report)
            walls.append(wall)
            cpus.append(cpu)
            before, after = _eval(report, "before GRPO"), _eval(report, "after GRPO")
            print(
                f"{arm:>8} seed {seed}: eval {before:.3f} -> {after:.3f} ({after - before:+.3f})  "
                f"{wall:.0f} s wall, {cpu:.0f} s CPU  load {_load()}",
                flush=True,
            )
    print()
    print(_table(args.seeds, arms, reports))
    print(
        f"\n{len(walls)} runs: wall {statistics.fmean(walls):.0f} s on average (min {min(walls):.0f}, max "
        f"{max(walls):.0f}); CPU {statistics.fmean(cpus):.0f} s on average (max {max(cpus):.0f}); "
        f"{time.monotonic() - began:.0f} s in all; load average at the end: {_load()}"
    )
    png = _draw(reports, args.png or args.out / "demo_learning.png", len(args.seeds))
    if png is not None:
        print(f"picture: {png}")
    gains = [_eval(r, "after GRPO") - _eval(r, "before GRPO") for r in reports["env"]]
    met = statistics.fmean(gains) >= TARGET_GAIN and all(g > 0 for g in gains)
    print(
        f"target (env arm: mean gain >= {TARGET_GAIN}, every seed improving): {'met' if met else 'NOT met'}",
        flush=True,
    )
    return 0 if met else 1


def _eval(report: dict, when: str) -> float:
    return next(e["reward"] for e in report["evals"] if e["when"] == when)


def _table(seeds: list[int], arms: list[str], reports: dict[str, list[dict]]) -> str:
    header = ["seed"]
    for arm in arms:
        header += [f"{arm}: before", "after", "gain"]
    rows = []
    columns: list[list[float]] = [[] for _ in range(3 * len(arms))]
    for i, seed in enumerate(seeds):
        row = [str(seed)]
        for a, arm in enumerate(arms):
            before, after = _eval(reports[arm][i], "before GRPO"), _eval(reports[arm][i], "after GRPO")
            for c, value in enumerate((before, after, after - before)):
                columns[3 * a + c].append(value)
            row += [f"{before:.3f}", f"{after:.3f}", f"{after - before:+.3f}"]
        rows.append(row)
    mean = ["mean"]
    for c, values in enumerate(columns):
        mean.append(f"{statistics.fmean(values):+.3f}" if c % 3 == 2 else f"{statistics.fmean(values):.3f}")
    rows.append(mean)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, lines[1])
    return "\n".join(lines)


def _draw(reports: dict[str, list[dict]], path: Path, seeds: int) -> Path | None:
    from agentenv_trl.demo_plot import plot_reports
    from agentenv_trl.demo_report import DemoReport

    arms = {arm: [DemoReport.from_dict(r) for r in runs] for arm, runs in reports.items()}
    title = f"agentenv demo on the arith bundle: the env's reward against a control, {seeds} seeds"
    return plot_reports(arms, path, title=title)


def _cpu() -> float:
    """CPU seconds (user and system) the finished child processes have used."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
