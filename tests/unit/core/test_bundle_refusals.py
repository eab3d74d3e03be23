"""A bad bundle is refused whole, each problem naming the file, the field, the line and the fix.

Every test copies the fake bundle (12 good tasks) into tmp_path and breaks one thing: the refusal
proves nothing is half-loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from agentenv import load_bundle
from agentenv.engine.envkinds import ENV_KINDS
from agentenv.plugins import EnvKind, Plugins, hookimpl

from tests.support import INBOX
from tests.support.bundles import copy_bundle, line_of, only_problem, patch, refused


@pytest.fixture
def inbox_copy(tmp_path: Path) -> Path:
    return copy_bundle(tmp_path, INBOX)


def test_a_missing_bundle_yaml_is_refused_naming_the_file(fake_copy):
    (fake_copy / "bundle.yaml").unlink()
    error = refused(fake_copy)
    problem = only_problem(error)
    assert problem.file == str(fake_copy / "bundle.yaml")
    assert "missing file (there is no bundle.yaml in it)" in problem.message
    assert "nothing was loaded" in str(error)


def test_a_folder_that_does_not_exist_is_refused_saying_so(tmp_path):
    problem = only_problem(refused(tmp_path / "nowhere"))
    assert problem.file == str(tmp_path / "nowhere" / "bundle.yaml")
    assert "the folder does not exist" in problem.message


class Refusal(NamedTuple):
    """One thing broken in a copy of the fake bundle: ``old`` (once in ``file``) replaced by ``new``, and the one
    problem the refusal must name: its field, its line (the first line holding that text, or a number; None: not
    checked) and what it says (``whole``: all it says)."""

    file: str
    old: str
    new: str
    field: str
    line: str | int | None
    says: str
    whole: bool = False


REFUSALS = {
    "task-glob-matches-nothing": Refusal(
        "bundle.yaml", "tasks: tasks/*.yaml", "tasks: taks/*.yaml", "tasks", "tasks: taks/*.yaml",
        "'taks/*.yaml' matches no file"),
    "env-kind-sub-field": Refusal(
        "bundle.yaml", "    command: [python, fake_proc.py]", "    command: [python, fake_proc.py]\n    imag: x",
        "envs.proc.imag", "imag: x",
        "unknown field; a subprocess env takes command, config, roles, env, pass_env, sandbox, setup", whole=True),
    "unknown-verifier-kind": Refusal(
        "tasks/two-turn.yaml", "kind: contains", "kind: fuzzy", "turns[1].verifiers[0].kind", "kind: fuzzy",
        "unknown verifier kind 'fuzzy'; known: contains, exact, harbor, judge, python, regex"),
    "duplicate-task-id": Refusal(
        "tasks/two-turn.yaml", "id: two-turn", "id: echo", "id", 1,
        "duplicate task id 'echo' (also in tasks/echo.yaml)"),
    "task-without-split": Refusal(
        "tasks/two-turn.yaml", "split: train\n", "", "split", 1, "task 'two-turn' has no split; add one"),
    "undeclared-split": Refusal(
        "tasks/two-turn.yaml", "split: train", "split: valid", "split", "split: valid",
        "split 'valid' is not one of the bundle's splits (train, eval, test)"),
    "deny-names-unknown-tool": Refusal(
        "tasks/no-add.yaml", "    - add", "    - multiply", "toolset.deny.ok[0]", "- multiply",
        "deny names tool 'multiply', which env 'ok' does not have; its tools: add, big"),
    "allow-names-unknown-subprocess-tool": Refusal(
        "tasks/proc-echo.yaml", "  - proc\n", "  - proc\n  allow:\n    proc:\n    - teleport\n",
        "toolset.allow.proc[0]", "- teleport",
        "allow names tool 'teleport', which env 'proc' does not have; its tools: die, echo"),
    "turn-without-prompt": Refusal(
        "tasks/two-turn.yaml", "- prompt: Now say goodbye.\n  verifiers:", "- verifiers:", "turns[1].prompt",
        "- verifiers:", "missing; every turn needs a prompt", whole=True),
    "blank-prompt": Refusal(
        "tasks/two-turn.yaml", "- prompt: Now say goodbye.", "- prompt: '  '", "turns[1].prompt", "- prompt: '  '",
        "is empty; write the prompt"),
    "weighted-without-weights": Refusal(
        "tasks/weighted.yaml", "  weights:\n    answer-1: 1\n    answer-2: 3\n", "", "reward", None,
        "weighted needs weights by step id"),
    "parameters-for-a-rule-taking-none": Refusal(
        "tasks/weighted.yaml", "  rule: weighted", "  rule: mean", "reward", None,
        "unknown field(s) weights; this rule takes none"),
    "unknown-task-field": Refusal(
        "tasks/two-turn.yaml", "split: train", "split: train\nsytem: Be brief.", "sytem", "sytem:",
        "unknown field; remove it or check its spelling"),
    "unknown-bundle-field": Refusal(
        "bundle.yaml", "splits: [train, eval, test]", "splits: [train, eval, test]\nsplit: train", "split",
        "split: train", "unknown field; the fields are agents, defaults, description, envs, name, splits, tasks"),
    "unknown-verifier-field": Refusal(
        "tasks/two-turn.yaml", "    answer: goodbye", "    answer: goodbye\n    anwser: bye",
        "turns[1].verifiers[0].anwser", "anwser: bye",
        "contains verifier 'answer-2': unknown field; the fields are id, kind, answer, ignore_case"),
    "bad-regex": Refusal(
        "tasks/two-turn.yaml", "pattern: (?i)hello", "pattern: (hello", "turns[0].verifiers[0].pattern",
        "pattern: (hello", "regex verifier 'answer-1': pattern '(hello' is not a valid regular expression"),
    "python-check-missing": Refusal(
        "tasks/echo.yaml", "check: fake_env:said_echo", "check: fake_env:said_it", "turns[0].verifiers[0].check",
        "check: fake_env:said_it", "module 'fake_env' has no 'said_it'"),
    "step-id-used-twice": Refusal(
        "tasks/two-turn.yaml", "  - id: answer-2", "  - id: answer-1", "turns[1].verifiers[0].id", None,
        "step id 'answer-1' is used twice in task 'two-turn'"),
    "unknown-defaults-field": Refusal(
        "bundle.yaml", "  system: You are", "  sytem: You are", "defaults.sytem", "sytem:",
        "unknown task field; the fields are deploy, id, metadata, qa, reward, solution, split, system, toolset, turns"),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSALS.values(), ids=REFUSALS.keys())
def test_one_thing_broken_is_refused_as_one_problem_at_its_file_field_and_line(fake_copy, case: Refusal):
    patch(fake_copy / case.file, case.old, case.new)
    problem = only_problem(refused(fake_copy))
    assert (problem.file, problem.field) == (case.file, case.field)
    if isinstance(case.line, str):
        assert problem.line == line_of(fake_copy / case.file, case.line)
    elif case.line is not None:
        assert problem.line == case.line
    if case.whole:
        assert problem.message == case.says
    else:
        assert case.says in problem.message


def test_an_env_module_file_that_is_missing_is_refused_at_the_envs_target(fake_copy):
    (fake_copy / "fake_env.py").rename(fake_copy / "other_env.py")
    error = refused(fake_copy)
    problems = [p for p in error.problems if p.field == "envs.ok.target"]
    assert problems, str(error)
    assert problems[0].file == "bundle.yaml"
    assert problems[0].line == line_of(fake_copy / "bundle.yaml", "  ok:") + 2  # the target: line under ok:
    assert "module 'fake_env' not found" in problems[0].message


def test_a_misspelt_env_target_is_told_once_at_the_target(inbox_copy):
    patch(inbox_copy / "bundle.yaml", "target: inbox_env:Mailbox", "target: inbox_env:Mailbx")
    problem = only_problem(refused(inbox_copy))  # not again as "cannot list its tools" at the env
    assert (problem.field, problem.line) == ("envs.mail.target", line_of(inbox_copy / "bundle.yaml", "Mailbx"))
    assert "module 'inbox_env' has no 'Mailbx'" in problem.message


def test_a_yaml_syntax_error_in_a_task_names_the_file_and_its_line(fake_copy):
    patch(fake_copy / "tasks" / "two-turn.yaml", "- prompt: Now say goodbye.", "- prompt: Now: say: goodbye.")
    error = refused(fake_copy)
    problem = only_problem(error)
    assert problem.file == "tasks/two-turn.yaml"
    assert problem.line == line_of(fake_copy / "tasks" / "two-turn.yaml", "Now: say: goodbye.")
    assert problem.message.startswith("YAML syntax error: mapping values are not allowed here")
    assert f"tasks/two-turn.yaml:{problem.line}: YAML syntax error" in str(error)


def test_a_yaml_syntax_error_in_bundle_yaml_names_its_line(fake_copy):
    patch(fake_copy / "bundle.yaml", "    config: {deploy: fail}", "    config: {deploy: fail")
    problem = only_problem(refused(fake_copy))
    assert problem.file == "bundle.yaml"
    assert problem.line is not None
    assert problem.line >= line_of(fake_copy / "bundle.yaml", "config: {deploy: fail")
    assert "YAML syntax error" in problem.message


def test_an_unknown_env_kind_is_refused_with_the_known_kinds(fake_copy):
    patch(fake_copy / "bundle.yaml", "    kind: subprocess", "    kind: docker")
    error = refused(fake_copy)
    problem = error.problems[0]
    assert (problem.file, problem.field) == ("bundle.yaml", "envs.proc.kind")
    assert problem.line == line_of(fake_copy / "bundle.yaml", "kind: docker")
    assert "unknown env kind 'docker'; known: bash, container, harbor, python, subprocess" in problem.message
    assert "install the plugin that provides it" in problem.message
    assert f"bundle.yaml:{problem.line}: envs.proc.kind: unknown env kind 'docker'" in str(error)


def test_a_reward_rule_that_does_not_exist_is_refused_with_the_known_rules(fake_copy):
    (fake_copy / "tasks" / "two-turn.yaml").write_text(
        (fake_copy / "tasks" / "two-turn.yaml").read_text() + "reward: median\n", encoding="utf-8"
    )
    problem = only_problem(refused(fake_copy))
    assert (problem.file, problem.field) == ("tasks/two-turn.yaml", "reward")
    assert problem.line == line_of(fake_copy / "tasks" / "two-turn.yaml", "reward: median")
    assert "unknown reward rule 'median'; known: " in problem.message
    assert "last, mean, min, weighted" in problem.message


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ("answer-2: 3", None),
        ("answer-3: 3", "weights name step 'answer-3', which this task does not have; its steps: answer-1, answer-2"),
        ("answer-2: lots", "weights must be numbers"),
        ("answer-2: -1", "weights must add up to more than 0"),
    ],
    ids=["good", "unknown-step", "not-a-number", "not-positive"],
)
def test_bad_weights_of_the_weighted_rule_are_refused(fake_copy, weights, message):
    patch(fake_copy / "tasks" / "weighted.yaml", "    answer-2: 3", f"    {weights}")
    if message is None:
        assert load_bundle(fake_copy).task("weighted").reward.params == {"weights": {"answer-1": 1, "answer-2": 3}}
        return
    problem = only_problem(refused(fake_copy))
    assert (problem.file, problem.field) == ("tasks/weighted.yaml", "reward")
    assert problem.line == line_of(fake_copy / "tasks" / "weighted.yaml", "reward:")
    assert message in problem.message


def test_a_toolset_naming_an_env_the_bundle_lacks_is_refused(fake_copy):
    patch(fake_copy / "tasks" / "no-add.yaml", "  - ok\n", "  - ko\n")
    error = refused(fake_copy)
    fields = {p.field for p in error.problems}
    assert "toolset.envs[0]" in fields, str(error)
    problem = next(p for p in error.problems if p.field == "toolset.envs[0]")
    assert "unknown env 'ko'; the bundle's envs: deploy_fails, deploy_hangs, ok, proc, slow" in problem.message


def test_every_problem_of_a_bundle_is_listed_in_one_refusal(fake_copy):
    patch(fake_copy / "tasks" / "two-turn.yaml", "kind: contains", "kind: fuzzy")
    patch(fake_copy / "tasks" / "weighted.yaml", "    answer-2: 3", "    answer-3: 3")
    patch(fake_copy / "tasks" / "echo.yaml", "split: train\n", "")
    error = refused(fake_copy)
    assert sorted((p.file, p.field) for p in error.problems) == [
        ("tasks/echo.yaml", "split"),
        ("tasks/two-turn.yaml", "turns[1].verifiers[0].kind"),
        ("tasks/weighted.yaml", "reward"),
    ]
    assert "(3 problems); nothing was loaded" in str(error)


def test_a_bundle_refused_for_an_unknown_kind_loads_once_a_plugin_provides_it(fake_copy):
    patch(fake_copy / "bundle.yaml", "    kind: subprocess", "    kind: docker")

    class Docker:
        @staticmethod
        @hookimpl
        def agentenv_env_kinds():
            subprocess_kind = next(k for k in ENV_KINDS if k.name == "subprocess")
            yield EnvKind("docker", subprocess_kind.create, subprocess_kind.describe)

    refused(fake_copy, plugin_set=Plugins())
    # named apart from agentenv-docker's own plugin ("docker"), which the test environment has installed
    assert load_bundle(fake_copy, plugin_set=Plugins(extra=[("docker-like", Docker)])).envs["proc"].kind == "docker"
