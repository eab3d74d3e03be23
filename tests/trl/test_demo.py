"""The quickstart, ``agentenv demo --quick``: it trains, its reward table is made of episodes the server played,
and it writes its metrics and picture into the folder it names last."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from typing import Any

import pytest
from agentenv import load_bundle
from agentenv.cli import main
from agentenv.evaluate import Summary
from agentenv_trl.demo import DemoConfig
from agentenv_trl.demo_report import STEP_COLUMNS

from tests.support.trl import ARITH


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("demo")
    printed, progress = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(progress):  # the table; the progress lines
        code = main(["demo", "--quick", "--json", str(out / "report.json"), "--output-dir", str(out / "run")])
    return code, json.loads((out / "report.json").read_text()), printed.getvalue(), progress.getvalue(), out / "run"


def test_the_quick_demo_exits_cleanly(demo: Any) -> None:
    code, report, *_ = demo
    assert code == 0
    assert report["bundle"] == "arith" and report["reward_source"] == "env" and report["seed"] == 0
    assert report["warm_start_steps"] == 60 and report["warm_start_loss"] is not None


def test_the_training_steps_happened_each_on_a_batch_of_real_episodes(demo: Any) -> None:
    _, report, *_ = demo
    steps = report["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert step["episodes"] == 8  # 2 prompts x 4 rollouts, each an episode get_reward scored
        assert step["scored"] + step["failed"] <= step["episodes"]
        assert step["scored"] > 0
        assert step["reward_std"] is not None and step["seconds"] > 0


def test_the_reward_table_agrees_with_what_trl_logged(demo: Any) -> None:
    _, report, *_ = demo
    for row in report["steps"] + report["evals"]:
        if row["trl_reward"] is None:  # TRL logs None when no rollout of the batch was scored
            assert row["reward"] is None
        else:
            assert row["reward"] == pytest.approx(row["trl_reward"], abs=1e-6)


def test_the_eval_reward_was_measured_before_and_after_on_the_eval_split(demo: Any) -> None:
    _, report, *_ = demo
    assert [e["when"] for e in report["evals"]] == ["before GRPO", "after GRPO"]
    for row in report["evals"]:
        assert row["episodes"] == len(load_bundle(ARITH).split("eval")) * DemoConfig.quick().eval_generations
        assert row["reward"] is not None


def test_every_reported_episode_was_played(demo: Any) -> None:
    _, report, *_ = demo
    reported = sum(s["episodes"] for s in report["steps"]) + sum(e["episodes"] for e in report["evals"])
    references = len(load_bundle(ARITH).split("train"))  # the warm start's reference plays, one per train task
    assert report["episodes_played"] >= reported + references


def test_the_demo_prints_a_reward_table_and_the_eval_gain(demo: Any) -> None:
    _, report, printed, *_ = demo
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["step", "episodes"])
    for offset, step in enumerate(report["steps"], start=2):
        assert lines[header + offset].split()[:2] == [str(step["step"]), str(step["episodes"])]
    assert any(line.startswith("before GRPO") for line in lines)
    assert any(line.startswith("after GRPO") for line in lines)
    before, after = (e["reward"] for e in report["evals"])
    assert f"eval reward {before:.3f} -> {after:.3f} ({after - before:+.3f}), GRPO on the env's reward" in lines


def test_the_last_line_names_the_output_folder_and_the_files_written_there(demo: Any) -> None:
    _, report, printed, _, folder = demo
    files = "steps.csv, report.json, eval-before-grpo.json, eval-after-grpo.json, reward.png"
    assert printed.splitlines()[-2] == f"wrote {files} to {folder}"
    assert printed.splitlines()[-1] == (
        f"per task: agentenv eval --compare {folder / 'eval-before-grpo.json'} {folder / 'eval-after-grpo.json'}"
    )
    assert report["output_dir"] == str(folder)
    assert json.loads((folder / "report.json").read_text()) == report


def test_the_eval_rows_are_agentenv_evals_summaries_and_compare_as_its_runs_do(demo: Any) -> None:
    _, report, _, _, folder = demo
    before, after = (Summary.read(folder / name) for name in ("eval-before-grpo.json", "eval-after-grpo.json"))
    for row, summary in zip(report["evals"], (before, after)):
        assert summary.run["when"] == row["when"] and summary.splits.keys() == {"eval"}
        assert (summary.overall.samples, summary.overall.scored) == (row["episodes"], row["scored"])
        assert summary.overall.mean_reward == pytest.approx(row["reward"])
        assert summary.overall.pass_at["1"] == row["pass_at_1"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["eval", "--compare", str(folder / "eval-before-grpo.json"), str(folder / "eval-after-grpo.json")])
    assert code == 0
    assert f"{before.overall.mean_reward:.3f}" in printed.getvalue()
    assert f"{after.overall.mean_reward:.3f}" in printed.getvalue()


def test_steps_csv_has_a_row_per_grpo_step_with_the_reported_numbers(demo: Any) -> None:
    _, report, _, _, folder = demo
    with (folder / "steps.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == STEP_COLUMNS
    assert [int(r["step"]) for r in rows] == [s["step"] for s in report["steps"]]
    for row, step in zip(rows, report["steps"]):
        assert int(row["episodes"]) == step["episodes"] and float(row["reward"]) == pytest.approx(step["reward"])


def test_the_picture_is_a_png(demo: Any) -> None:
    *_, folder = demo
    assert (folder / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_off_a_terminal_is_whole_lines_for_each_phase(demo: Any) -> None:
    _, _, _, progress, _ = demo
    assert "\r" not in progress
    lines = progress.splitlines()
    for phase, total in (("warm start", 60), ("eval before GRPO", None), ("GRPO", 2), ("eval after GRPO", None)):
        mine = [line for line in lines if line.startswith(f"{phase}  ")]
        assert mine, f"no progress line for {phase}: {progress}"
        done, of = mine[-1].split()[len(phase.split())].split("/")
        assert done == of and (total is None or int(of) == total)
