"""``agentenv eval`` against a stand-in OpenAI-compatible server (tests/support/standin/openai.py) and real agentenv
servers: the bundle folder served in process, or a URL."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from agentenv import load_bundle
from agentenv.cli import main
from agentenv.evaluate import Summary, read_samples

from tests.support import ARITH, FAKE, INBOX, free_port
from tests.support.standin.openai import Reference, Scripted, StandIn

SAMPLE_FIELDS = {
    "task",
    "split",
    "sample",
    "outcome",
    "reward",
    "passed",
    "scores",
    "failure",
    "failures",
    "reason",
    "attempts",
    "turns",
    "model_calls",
    "tool_calls",
    "malformed_calls",
    "context_limited",
    "prompt_tokens",
    "completion_tokens",
    "model_seconds",
    "env_seconds",
    "transcript",
}
STATS_FIELDS = {
    "tasks",
    "samples",
    "scored",
    "failed",
    "unscored",
    "mean_reward",
    "pass_at",
    "pass_tasks",
    "scores",
    "tool_calls",
    "malformed_calls",
    "context_limited",
    "prompt_tokens",
    "completion_tokens",
    "model_seconds",
    "env_seconds",
}


@pytest.fixture(scope="module")
def inbox() -> Reference:
    return Reference(load_bundle(INBOX))


def evaluate(capsys: Any, standin: StandIn, target: Path | str, out: Path, *flags: str) -> tuple[int, str, str]:
    code = main(["eval", str(target), "--llm-url", standin.url, "--model", "stand-in", "--out", str(out), *flags])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


# --- scores and pass@k ------------------------------------------------------------------------


def test_scores_and_pass_at_k_match_the_hand_computed_values(capsys, tmp_path, inbox):
    # q-007: 1, 1, 0.5, 0 (c=2 of 4); q-008: 0, 0, 1, 0 (c=1 of 4)
    policy = Scripted(inbox, {"q-007": ["ref", "ref", "half", "wrong"], "q-008": ["wrong", "wrong", "ref", "wrong"]})
    with StandIn(policy) as standin:
        code, out, _ = evaluate(
            capsys, standin, INBOX, tmp_path / "run", "-n", "4", "--concurrency", "1", "--pass-k", "1,2,4"
        )
    assert code == 0
    summary = Summary.read(tmp_path / "run")
    q7, q8 = summary.tasks["q-007"], summary.tasks["q-008"]
    assert (q7.mean_reward, q7.passed, q8.mean_reward, q8.passed) == (0.625, 2, 0.25, 1)
    assert q7.pass_at == {"1": 0.5, "2": pytest.approx(1 - 1 / 6), "4": 1.0}
    assert q8.pass_at == {"1": 0.25, "2": pytest.approx(1 - 3 / 6), "4": 1.0}
    overall = summary.overall
    assert overall.mean_reward == pytest.approx((0.625 + 0.25) / 2)
    assert overall.pass_at == {"1": pytest.approx(0.375), "2": pytest.approx((5 / 6 + 0.5) / 2), "4": 1.0}
    assert overall.scores == {"answer-1": pytest.approx(4 / 8), "answer-2": pytest.approx(3 / 8)}
    assert summary.splits["eval"] == overall
    assert (overall.samples, overall.scored, overall.failed) == (8, 8, 0)
    assert "pass@2" in out and "0.667" in out  # the table shows it


def test_malformed_and_unknown_tool_calls_are_the_models_mistakes_scored_and_answered(capsys, tmp_path, inbox):
    policy = Scripted(inbox, {"q-007": ["malformed"], "q-008": ["unknown"]})
    with StandIn(policy) as standin:
        code, _, _ = evaluate(capsys, standin, INBOX, tmp_path / "run", "--concurrency", "1")
    assert code == 0
    by_task = {line["task"]: line for line in lines(tmp_path / "run")}
    malformed, unknown = by_task["q-007"], by_task["q-008"]
    assert (malformed["outcome"], malformed["malformed_calls"], malformed["attempts"]) == ("scored", 3, 1)
    answers = [m["content"] for m in malformed["transcript"] if m["role"] == "tool"][:3]
    assert "not valid JSON" in answers[0] and "without a tool name" in answers[1] and "JSON object" in answers[2]
    assert malformed["reward"] == 1.0  # it recovered: the mistake was answered, not a lost episode
    assert (unknown["outcome"], unknown["malformed_calls"], unknown["failure"]) == ("scored", 0, None)
    unknown_answer = next(m["content"] for m in unknown["transcript"] if m["role"] == "tool")
    assert "delete_everything" in unknown_answer  # the env's answer to a tool it does not offer


# --- env failures -----------------------------------------------------------------------------


def test_env_failures_are_replayed_then_kept_out_of_the_rates_and_listed(capsys, tmp_path, ledger):
    fake = Reference(load_bundle(FAKE))
    policy = Scripted(fake, {"echo": ["crash"]})  # the first episode of echo breaks its env; the replay goes well
    with StandIn(policy) as standin:
        code, out, _ = evaluate(
            capsys,
            standin,
            FAKE,
            tmp_path / "run",
            "--split",
            "train",
            "--tasks",
            "echo,deploy-fails",
            "-n",
            "2",
            "--attempts",
            "2",
            "--concurrency",
            "2",
        )
    assert code == 0
    summary = Summary.read(tmp_path / "run")
    assert (summary.overall.scored, summary.overall.failed) == (2, 2)
    assert summary.overall.pass_at["1"] == 1.0 and summary.overall.mean_reward == 1.0  # the failures are not zeros
    assert summary.tasks["deploy-fails"].pass_at == {"1": None, "2": None}
    assert [(f["task"], f["kind"], f["attempts"]) for f in summary.failures] == [("deploy-fails", "deploy", 2)] * 2
    assert ledger.count("deploy") == 2 * 2 + 3  # each deploy-fails sample twice; echo twice plus its replay
    echo = {line["sample"]: line for line in lines(tmp_path / "run") if line["task"] == "echo"}
    replayed = next(s for s in echo.values() if s["attempts"] == 2)
    assert [f["kind"] for f in replayed["failures"]] == ["crash"] and replayed["reward"] == 1.0
    assert "env failures kept out of the rates (2" in out and "deploy-fails #0: deploy" in out


# --- concurrency ------------------------------------------------------------------------------


def test_concurrency_is_respected_and_reached(capsys, tmp_path):
    reference = Reference(load_bundle(ARITH))
    with StandIn(reference, hold=3) as standin:
        code, _, _ = evaluate(capsys, standin, ARITH, tmp_path / "run", "--limit", "8", "--concurrency", "3")
    assert code == 0
    assert standin.most_in_flight == 3
    assert len(read_samples(tmp_path / "run")) == 8


# --- resume -----------------------------------------------------------------------------------


def test_resume_replays_nothing_finished_and_repairs_a_half_written_line(capsys, tmp_path, inbox):
    out = tmp_path / "run"
    with StandIn(inbox) as standin:
        assert evaluate(capsys, standin, INBOX, out, "-n", "2", "--concurrency", "1")[0] == 0
    results = out / "results.jsonl"
    kept, dropped = results.read_text().splitlines(keepends=True)[:3], lines(out)[3]
    results.write_text("".join(kept) + '{"task": "q-0')  # a crash while the fourth line was written
    with StandIn(inbox) as standin:
        code, _, _ = evaluate(capsys, standin, INBOX, out, "-n", "2", "--concurrency", "1", "--resume")
        assert code == 0
        assert standin.episodes(inbox) == {dropped["task"]: 1}  # only the unfinished sample was played
    assert len(lines(out)) == 4 and {(line["task"], line["sample"]) for line in lines(out)} == {
        ("q-007", 0),
        ("q-007", 1),
        ("q-008", 0),
        ("q-008", 1),
    }
    assert Summary.read(out).overall.samples == 4 and Summary.read(out).run["complete"] is True


def test_resume_plays_again_only_the_samples_the_env_lost(capsys, tmp_path, ledger):
    fake = Reference(load_bundle(FAKE))
    flags = ("--split", "train", "--tasks", "echo,deploy-fails", "--attempts", "1", "--concurrency", "1")
    with StandIn(fake) as standin:
        assert evaluate(capsys, standin, FAKE, tmp_path / "run", *flags)[0] == 0
    with StandIn(fake) as standin:
        assert evaluate(capsys, standin, FAKE, tmp_path / "run", *flags, "--resume")[0] == 0
        assert set(standin.episodes(fake)) <= {"deploy-fails"}  # echo was finished; deploy-fails is tried again
    assert ledger.count("deploy") == 3  # echo once, deploy-fails once per run
    assert [(s.task, s.outcome) for s in sorted(read_samples(tmp_path / "run"), key=lambda s: s.task)] == [
        ("deploy-fails", "failed"),
        ("echo", "scored"),
    ]


def test_a_second_run_into_the_same_folder_needs_resume_and_the_same_settings(capsys, tmp_path, inbox):
    with StandIn(inbox, models=("stand-in", "other")) as standin:
        assert evaluate(capsys, standin, INBOX, tmp_path / "run", "--limit", "1")[0] == 0
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "run", "--limit", "1")
        assert code == 2 and "pass --resume to continue it, or a new --out DIR" in err
        code = main(
            [
                "eval",
                str(INBOX),
                "--llm-url",
                standin.url,
                "--model",
                "other",
                "--out",
                str(tmp_path / "run"),
                "--limit",
                "1",
                "--resume",
            ]
        )
        err = capsys.readouterr().err
    assert code == 2 and "was run with --model 'stand-in', not 'other'" in err


# --- results and summary fields ----------------------------------------------------------------


def test_results_and_summary_have_the_documented_fields(capsys, tmp_path, inbox):
    with StandIn(inbox) as standin:
        assert evaluate(capsys, standin, INBOX, tmp_path / "run", "--limit", "1")[0] == 0
    (line,) = lines(tmp_path / "run")
    assert set(line) == SAMPLE_FIELDS
    assert line["transcript"][0]["role"] == "system" and line["transcript"][1]["role"] == "user"
    assert [m["role"] for m in line["transcript"]].count("user") == 2  # the second turn's prompt was handed over
    assert line["prompt_tokens"] > 0 and line["model_calls"] == 3 and line["tool_calls"] == 2
    data = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(data) == {"format", "ks", "threshold", "overall", "splits", "tasks", "failures", "unscored", "run"}
    assert set(data["overall"]) == STATS_FIELDS and set(data["splits"]["eval"]) == STATS_FIELDS
    assert {"bundle", "model", "llm_url", "splits", "samples", "temperature", "complete", "wall_seconds"} <= set(
        data["run"]
    )
    assert set(data["tasks"]["q-007"]) == {
        "task",
        "split",
        "samples",
        "scored",
        "failed",
        "unscored",
        "passed",
        "mean_reward",
        "pass_at",
    }


# --- the example bundles ----------------------------------------------------------------------


@pytest.mark.parametrize("bundle", [INBOX, ARITH], ids=["inbox", "arith"])
def test_every_example_task_scores_1_when_the_model_plays_the_reference_solution(capsys, tmp_path, bundle):
    loaded = load_bundle(bundle)
    with StandIn(Reference(loaded)) as standin:
        code, _, _ = evaluate(
            capsys, standin, bundle, tmp_path / "run", "--split", ",".join(loaded.splits), "--concurrency", "8"
        )
    assert code == 0
    summary = Summary.read(tmp_path / "run")
    assert {t.task for t in summary.tasks.values()} == {t.id for t in loaded.tasks}
    assert {t.mean_reward for t in summary.tasks.values()} == {1.0}
    assert summary.overall.pass_at == {"1": 1.0} and summary.overall.failed == 0


def test_an_unknown_split_or_task_is_named_before_any_episode(capsys, tmp_path, inbox):
    with StandIn(inbox) as standin:
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "a", "--split", "nope")
        assert code == 2 and "has no split 'nope'; its splits: train, eval" in err
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "b", "--tasks", "q-007,q-999")
        assert code == 2 and "--tasks: no task 'q-999' in split(s) eval of inbox" in err
        assert standin.requests == []


# --- endpoint errors: told apart from env failures and from the model's mistakes ---------------------


def test_a_refused_connection_names_the_llm_url_fix(capsys, tmp_path):
    code = main(
        [
            "eval",
            str(INBOX),
            "--llm-url",
            f"http://127.0.0.1:{free_port()}/v1",
            "--model",
            "m",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "no OpenAI-compatible server answered at" in err and "or fix --llm-url" in err
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_a_model_the_endpoint_does_not_serve_is_refused_before_any_episode(capsys, tmp_path, inbox):
    with StandIn(inbox, models=("qwen", "llama")) as standin:
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "run")
        assert standin.requests == []
    assert code == 2 and "has no model 'stand-in'; it serves: qwen, llama: fix --model" in err


def test_a_refused_key_stops_the_run_keeping_the_finished_samples(capsys, tmp_path, inbox):
    with StandIn(Scripted(inbox, {"q-008": ["401"]})) as standin:
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "run", "--concurrency", "1")
    assert code == 2
    assert "refused the request (HTTP 401: Incorrect API key provided.): pass --api-key-var NAME" in err
    assert "1 of 2 samples are finished" in err and "--resume" in err
    assert [line["task"] for line in lines(tmp_path / "run")] == ["q-007"]
    assert Summary.read(tmp_path / "run").run["complete"] is False


def test_an_unset_key_variable_is_named(capsys, tmp_path, inbox, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with StandIn(inbox) as standin:
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "run", "--api-key-var", "NO_SUCH_KEY")
    assert code == 2 and "export NO_SUCH_KEY=<key>" in err


def test_an_endpoint_without_tool_calls_names_the_vllm_flags(capsys, tmp_path, inbox):
    with StandIn(Scripted(inbox, {"q-007": ["tools-off"]})) as standin:
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "run", "--concurrency", "1")
    assert code == 2 and "start vLLM with --enable-auto-tool-choice --tool-call-parser NAME" in err


def test_a_url_without_the_api_path_is_named(capsys, tmp_path, inbox):
    with StandIn(inbox) as standin:
        code = main(
            [
                "eval",
                str(INBOX),
                "--llm-url",
                standin.url.removesuffix("/v1"),
                "--model",
                "stand-in",
                "--out",
                str(tmp_path / "run"),
            ]
        )
    err = capsys.readouterr().err
    assert code == 2 and "give --llm-url the base URL of an OpenAI-compatible API (it usually ends in /v1)" in err


def test_a_context_too_long_ends_the_sample_scored_as_it_stands_and_is_reported(capsys, tmp_path, inbox):
    with StandIn(Scripted(inbox, {"q-007": ["context"], "q-008": ["busy"]})) as standin:
        code, _, err = evaluate(capsys, standin, INBOX, tmp_path / "run", "--concurrency", "1")
    assert code == 0
    by_task = {line["task"]: line for line in lines(tmp_path / "run")}
    context = by_task["q-007"]
    assert (context["outcome"], context["reward"], context["context_limited"]) == ("scored", 0.0, True)
    assert Summary.read(tmp_path / "run").overall.context_limited == 1
    assert "raise the server's context length (vLLM: --max-model-len)" in err
    assert by_task["q-008"]["reward"] == 1.0  # an HTTP 503 is retried, not held against anyone


# --- served elsewhere -------------------------------------------------------------------------


def test_a_served_bundle_is_evaluated_by_url_with_its_token(capsys, tmp_path, inbox, serve, monkeypatch):
    monkeypatch.setenv("EVAL_TOKEN", "s3cret")
    server = serve(INBOX, token="s3cret")
    with StandIn(inbox) as standin:
        code, _, _ = evaluate(capsys, standin, server.url, tmp_path / "run", "--token-var", "EVAL_TOKEN")
        assert code == 0
        monkeypatch.setenv("EVAL_TOKEN", "wrong")
        code, _, err = evaluate(capsys, standin, server.url, tmp_path / "other", "--token-var", "EVAL_TOKEN")
    assert {s.reward for s in read_samples(tmp_path / "run")} == {1.0}
    assert code == 2 and "refused the bearer token from $EVAL_TOKEN" in err


def test_math_is_unbiased_for_n_equal_k():
    from agentenv.evaluate import pass_at_k

    assert pass_at_k(5, 0, 5) == 0.0 and pass_at_k(5, 1, 5) == 1.0 and pass_at_k(3, 1, 4) is None
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))


def test_ctrl_c_says_how_to_resume_and_the_resumed_run_plays_only_the_rest(tmp_path, inbox):
    # before, an interrupted run ended with no word of the results it kept or of --resume
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    first = load_bundle(INBOX).split("eval")[0].id
    go_on = threading.Event()

    def slow_after_the_first_task(c):  # the model answers the first task, then stalls until told
        if inbox.task(c) != first:
            go_on.wait(120)
        return inbox(c)

    out = tmp_path / "run"
    with StandIn(slow_after_the_first_task) as standin:
        args = [
            sys.executable,
            "-m",
            "agentenv.cli",
            "eval",
            str(INBOX),
            "--llm-url",
            standin.url,
            "--model",
            "stand-in",
            "--out",
            str(out),
            "--concurrency",
            "1",
        ]
        # faulthandler: a run that outlives its Ctrl-C is sent SIGABRT, and stderr then holds every thread's stack
        # (it did twice under load before agentenv.interrupts: the stacks showed the main thread asleep in select)
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        while not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=30)
            go_on.set()
            raise AssertionError(f"agentenv eval did not stop within 60 s of its Ctrl-C; its threads:\n{err}") from None
        go_on.set()
        assert proc.returncode == 130
        assert err.endswith(
            f"interrupted: every finished sample is kept in {out}; to play only the rest, run the same command with "
            "--resume\n"
        )
        assert [s.task for s in read_samples(out)] == [first]
        code = main(
            ["eval", str(INBOX), "--llm-url", standin.url, "--model", "stand-in", "--out", str(out), "--resume"]
        )
    assert code == 0
    samples = read_samples(out)
    assert sorted(s.task for s in samples) == sorted(t.id for t in load_bundle(INBOX).split("eval"))
