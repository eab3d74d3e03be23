"""The built-in verifier kinds: regex, exact, contains and python (a check on the env and the reply)."""

from __future__ import annotations

import pytest
from agentenv import load_bundle
from agentenv.engine.verifiers import Check
from agentenv.plugins import Plugins

from tests.support import FAKE
from tests.support.bundles import copy_bundle, play

CHECKS = """
import asyncio


async def said_ok(env, reply):
    await asyncio.sleep(0)  # an async check is awaited on the loop
    return reply == "ok"


def is_subprocess_env(env, reply):  # a sync check sees the env it names (isinstance holds through the proxy)
    from agentenv.engine.envkinds import SubprocessEnv

    return isinstance(env, SubprocessEnv)


def a_word(env, reply):
    return "yes"
"""


@pytest.fixture(scope="module")
def kinds():
    return Plugins(entry_points=False).verifier_kinds()


@pytest.fixture(scope="module")
def task():
    return load_bundle(FAKE).task("echo")


def score(kinds, task, kind, params, reply):
    verify = kinds[kind].build(params, FAKE)
    return verify(Check(reply=reply, turn=0, task=task, envs={}))


@pytest.mark.parametrize(
    ("params", "reply", "expected"),
    [
        ({"answer": "28"}, "28", 1.0),
        ({"answer": "28"}, "  28. ", 1.0),
        ({"answer": "28"}, "28!", 0.0),
        ({"answer": "28"}, "the answer is 28", 0.0),
        ({"answer": ["Dana", "Dana W"]}, "dana w", 1.0),
        ({"answer": "Dana", "ignore_case": False}, "dana", 0.0),
        ({"answer": 4200}, "4200", 1.0),
    ],
)
def test_exact_compares_the_whole_reply_after_trimming_spaces_and_a_final_dot(kinds, task, params, reply, expected):
    assert score(kinds, task, "exact", params, reply) == expected


@pytest.mark.parametrize(
    ("params", "reply", "expected"),
    [
        ({"answer": "Dana"}, "It was DANA.", 1.0),
        ({"answer": "Dana"}, "It was Dan.", 0.0),
        ({"answer": ["4,200", "4200"]}, "They asked for $4200 in total", 1.0),
        ({"answer": "Dana", "ignore_case": False}, "it was dana", 0.0),
    ],
)
def test_contains_looks_for_an_accepted_answer_in_the_reply(kinds, task, params, reply, expected):
    assert score(kinds, task, "contains", params, reply) == expected


@pytest.mark.parametrize(
    ("params", "reply", "expected"),
    [
        ({"pattern": r"\bdana\b"}, "ask dana", 1.0),
        ({"pattern": r"\bdana\b"}, "ask Dana", 0.0),
        ({"pattern": r"\bdana\b", "ignore_case": True}, "ask Dana", 1.0),
        ({"pattern": r"4,?200"}, "$4200", 1.0),
    ],
)
def test_regex_searches_the_reply(kinds, task, params, reply, expected):
    assert score(kinds, task, "regex", params, reply) == expected


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("exact", {}, "missing 'answer'; give the expected answer"),
        ("regex", {}, "missing 'pattern'"),
        ("python", {}, "missing 'check'; name the function as module:function"),
        ("python", {"check": "fake_env"}, "is not of the form 'module:name'"),
        (
            "contains",
            {"answer": "x", "case": True},
            "case: unknown field; the fields are id, kind, answer, ignore_case",
        ),
    ],
)
def test_bad_verifier_fields_are_found_by_the_kinds_check_with_the_fix(kinds, kind, params, message):
    problems = kinds[kind].check(params, FAKE)
    assert any(message in str(p) for p in problems), problems


@pytest.fixture
def checks_bundle(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    (bundle_dir / "checks.py").write_text(CHECKS, encoding="utf-8")
    (bundle_dir / "tasks" / "checks.yaml").write_text(
        "id: checks\nsplit: train\ntoolset: {envs: [ok, proc], deny: {proc: [echo, fail]}}\n"
        "turns:\n- prompt: Say ok.\n  verifiers:\n"
        "  - {id: async, kind: python, check: 'checks:said_ok'}\n"
        "  - {id: env, kind: python, check: 'checks:is_subprocess_env', env: proc}\n",
        encoding="utf-8",
    )
    (bundle_dir / "tasks" / "word.yaml").write_text(
        "id: word\nsplit: train\nturns: [{prompt: Say a word., verifiers: [{id: answer-1, kind: python, "
        "check: 'checks:a_word'}]}]\n",
        encoding="utf-8",
    )
    return load_bundle(bundle_dir)


async def test_a_python_check_may_be_async_and_may_name_the_env_it_checks(checks_bundle):
    _, _, result = await play(checks_bundle, "checks", replies=["ok"])
    assert (result.outcome, result.scores) == ("scored", {"async": 1.0, "env": 1.0})


async def test_a_python_check_returning_something_else_than_a_score_fails_the_episode(checks_bundle):
    _, _, result = await play(checks_bundle, "word", replies=["hi"])
    assert (result.outcome, result.failure.kind, result.failure.stage) == ("failed", "verifier", "scoring")
    assert result.failure.message == (
        "verifier 'answer-1' (python check checks:a_word) returned 'yes'; return a score from 0 to 1, a bool, or None "
        "for no verdict"
    )


async def test_a_python_check_sees_the_envs_state():
    bundle = load_bundle(FAKE)
    _, _, echoed = await play(bundle, "echo", [("echo", {"text": "ping"})], ["ping"])
    _, _, not_echoed = await play(bundle, "echo", [], ["ping"])
    assert (echoed.reward, not_echoed.reward) == (1.0, 0.0)
