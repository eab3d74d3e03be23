"""What ``agentenv eval`` adds up, without a model: summaries of samples and of episode results (the demo's path),
two summaries compared, the results file read back after a crash, the progress lines."""

from __future__ import annotations

import io
import json

import pytest
from agentenv.cli import main
from agentenv.errors import AgentEnvError
from agentenv.evaluate import Sample, Summary, compare, read_samples, summarize, summarize_results
from agentenv.evaluate.progress import Progress
from agentenv.evaluate.results import ResultsFile
from agentenv.wire import EpisodeResult, Failure


def sample(task: str, n: int, reward: float | None, *, split: str = "eval", outcome: str = "scored") -> Sample:
    scores = {"answer-1": reward} if outcome == "scored" else {}
    return Sample(task=task, split=split, sample=n, outcome=outcome, reward=reward, scores=scores)


def test_failed_and_unscored_samples_stay_out_of_every_rate():
    samples = [
        sample("a", 0, 1.0),
        sample("a", 1, None, outcome="failed"),
        sample("a", 2, 0.0),
        sample("b", 0, None, outcome="unscored"),
        sample("b", 1, 0.5),
    ]
    summary = summarize(samples, ks=[1, 2])
    assert summary.tasks["a"].pass_at == {"1": 0.5, "2": 1.0}  # n=2 scored, c=1
    assert summary.tasks["b"].pass_at == {"1": 0.0, "2": None}  # one scored sample: no pass@2
    assert summary.overall.mean_reward == pytest.approx((0.5 + 0.5) / 2)
    assert summary.overall.pass_at == {"1": 0.25, "2": 1.0} and summary.overall.pass_tasks == {"1": 2, "2": 1}
    assert (summary.overall.failed, summary.overall.unscored, len(summary.unscored)) == (1, 1, 1)
    assert "pass@2 over 1 of 2 tasks" in summary.table()


def test_splits_are_summed_apart_and_together():
    samples = [sample("a", 0, 1.0, split="train"), sample("b", 0, 0.0, split="eval"), sample("c", 0, 1.0)]
    summary = summarize(samples)
    assert summary.splits["train"].pass_at == {"1": 1.0} and summary.splits["eval"].pass_at == {"1": 0.5}
    assert summary.overall.pass_at["1"] == pytest.approx(2 / 3) and summary.ks == [1]


def test_a_threshold_below_1_passes_partial_rewards():
    summary = summarize([sample("a", 0, 0.5), sample("a", 1, 0.25)], threshold=0.5)
    assert summary.tasks["a"].passed == 1 and summary.overall.pass_at == {"1": 0.5, "2": 1.0}


def test_episode_results_are_summarized_the_same_way_for_a_trainers_eval():
    lost = Failure("deploy", "deploy", "it broke")
    results = [
        EpisodeResult("a", "scored", 1.0, {"answer-1": 1.0}),
        EpisodeResult("b", "scored", 0.0),
        EpisodeResult("a", "scored", 0.0, {"answer-1": 0.0}),
        EpisodeResult("b", "failed", failure=lost),
    ]
    summary = summarize_results(results, split="eval")
    assert summary.tasks["a"].pass_at == {"1": 0.5, "2": 1.0} and summary.tasks["b"].pass_at == {"1": 0.0, "2": None}
    assert summary.failures == [
        {
            "task": "b",
            "split": "eval",
            "sample": 1,
            "attempts": 1,
            "kind": "deploy",
            "stage": "deploy",
            "fault": "env",
            "message": "it broke",
        }
    ]
    assert summary.overall.scores == {"answer-1": 0.5}


def test_compare_gives_each_change_overall_per_split_and_per_task(tmp_path):
    before = summarize([sample("a", 0, 0.0), sample("a", 1, 1.0), sample("b", 0, 0.0), sample("b", 1, 0.0)])
    after = summarize(
        [sample("a", 0, 1.0), sample("a", 1, 1.0), sample("b", 0, 0.0), sample("b", 1, 1.0), sample("c", 0, 1.0)]
    )
    comparison = compare(before, after)
    overall = {d.name: (d.a, d.b, d.delta) for d in comparison.overall}
    assert overall["mean reward"] == (0.25, pytest.approx(2.5 / 3), pytest.approx(2.5 / 3 - 0.25))
    assert overall["pass@2"][:2] == (0.5, 1.0)
    tasks = {t.task: (t.reward.delta, t.pass1.delta) for t in comparison.tasks}
    assert tasks == {"a": (0.5, 0.5), "b": (0.5, 0.5)} and comparison.only_b == ["c"]
    before.write(tmp_path / "a" / "summary.json")
    after.write(tmp_path / "b" / "summary.json")
    assert Summary.read(tmp_path / "a") == before  # a summary survives its file


def test_the_compare_command_prints_the_table_or_json(capsys, tmp_path):
    summarize([sample("a", 0, 0.0)], run={"model": "base"}).write(tmp_path / "a" / "summary.json")
    summarize([sample("a", 0, 1.0)], run={"model": "tuned"}).write(tmp_path / "b" / "summary.json")
    assert main(["eval", "--compare", str(tmp_path / "a" / "summary.json"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "note: the runs differ in model: 'base' (A) vs 'tuned' (B)" in out
    assert "1 of 1 tasks changed" in out and "+1.000" in out
    scored = next(line.split() for line in out.splitlines() if line.split()[:2] == ["all", "scored"])
    assert scored == ["all", "scored", "1", "1", "+0"]  # counts read as counts, not as 1.000
    assert main(["eval", "--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tasks"] == [
        {
            "task": "a",
            "split": "eval",
            "reward": {"name": "mean reward", "a": 0.0, "b": 1.0, "delta": 1.0},
            "pass@1": {"name": "pass@1", "a": 0.0, "b": 1.0, "delta": 1.0},
        }
    ]


def test_compare_names_a_file_that_is_not_a_summary(capsys, tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    assert main(["eval", "--compare", str(tmp_path / "x.json"), str(tmp_path / "x.json")]) == 2
    assert f"{tmp_path / 'x.json'}: not a summary written by agentenv eval" in capsys.readouterr().err


def test_eval_without_a_target_names_what_is_missing(capsys):
    assert main(["eval", "--model", "m"]) == 2
    assert "agentenv eval needs BUNDLE_OR_URL, --llm-url (or --compare A B)" in capsys.readouterr().err


def test_the_results_file_keeps_the_last_line_of_a_sample_and_cuts_a_half_line(tmp_path):
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.append(sample("a", 0, None, outcome="failed"))
    results.append(sample("a", 0, 1.0))
    results.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"task": "b", "spl')
    assert [(s.task, s.outcome) for s in read_samples(tmp_path)] == [("a", "scored")]
    assert path.read_bytes() == whole  # the half line is gone, so the next line starts clean


def test_a_bad_line_inside_the_results_file_is_named(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"task": "a"\nnot json\n' + json.dumps(sample("a", 0, 1.0).as_dict()) + "\n")
    with pytest.raises(AgentEnvError, match=r"results.jsonl:1: not a results line"):
        read_samples(path)


def test_progress_writes_lines_when_not_a_terminal():
    stream = io.StringIO()
    progress = Progress(20, stream=stream, every=3600)
    progress.start()
    for n in range(20):
        progress.update(sample("a", n, 1.0 if n % 2 else 0.0))
    progress.close()
    shown = stream.getvalue().splitlines()
    assert len(shown) == 11  # the start, then every tenth of the run
    assert shown[-1].startswith("eval [========================] 20/20 samples, 20 scored, 0 failed, mean reward 0.500")
