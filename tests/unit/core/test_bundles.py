"""Loading bundles: tasks, splits and toolset keys of the example and fake bundles."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from agentenv import load_bundle

from tests.support import ARITH, FAKE, INBOX
from tests.support.bundles import copy_bundle, patch, play

KEYS_SCRIPT = """
import json, sys
from agentenv import load_bundle
out = {}
for path in sys.argv[1:]:
    bundle = load_bundle(path)
    out[bundle.name] = {t.id: bundle.toolset_key(t) for t in bundle.tasks}
print(json.dumps(out))
"""


def test_arith_loads_180_train_and_32_eval_tasks_single_and_two_turn_each_with_a_solution():
    bundle = load_bundle(ARITH)
    assert bundle.name == "arith"
    assert bundle.splits == ["train", "eval"]
    assert (len(bundle.split("train")), len(bundle.split("eval"))) == (180, 32)
    assert len(bundle.tasks) == 212
    for split in bundle.splits:
        tasks = bundle.split(split)
        assert {len(t.turns) for t in tasks} == {1, 2}, split
        assert all(t.id == f"{'one' if len(t.turns) == 1 else 'two'}-{t.id[4:]}" for t in tasks)
        assert all(len(t.id) == 7 and t.id[4:].isdigit() for t in tasks)
    assert len({t.id for t in bundle.tasks}) == 212
    assert all(t.solution is not None and len(t.solution) == len(t.turns) for t in bundle.tasks)
    assert len({t.turns[0].prompt.split()[0] for t in bundle.tasks}) > 3  # the wording varies


def _numbers(task) -> tuple[tuple[str, object, object], ...]:
    return tuple((c.tool, c.args["a"], c.args["b"]) for turn in task.solution for c in turn.calls)


def test_arith_eval_tasks_ask_for_calculations_no_train_task_asks_for():
    bundle = load_bundle(ARITH)
    train = {_numbers(t)[0][1:] for t in bundle.split("train")}
    assert not [t.id for t in bundle.split("eval") if _numbers(t)[0][1:] in train]


def test_arith_tasks_are_what_the_committed_seeded_generator_writes(tmp_path):
    import shutil

    shutil.copy(ARITH / "generate.py", tmp_path / "generate.py")
    done = subprocess.run([sys.executable, str(tmp_path / "generate.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("train.yaml", "eval.yaml"):
        assert (tmp_path / "tasks" / name).read_text() == (ARITH / "tasks" / name).read_text(), name


def test_inbox_tasks_have_two_turns_scored_by_regex_answer_1_and_answer_2_with_mean_reward():
    bundle = load_bundle(INBOX)
    assert len(bundle.tasks) == 8
    for task in bundle.tasks:
        assert [[v.id for v in turn.verifiers] for turn in task.turns] == [["answer-1"], ["answer-2"]]
        assert {v.kind for turn in task.turns for v in turn.verifiers} == {"regex"}
        assert task.reward.rule == "mean"
        assert task.system  # from the bundle's defaults


def test_inbox_assistant_role_gets_every_tool_but_delete():
    bundle = load_bundle(INBOX)
    assert [t.name for t in bundle.env_tools["mail"]] == ["list_emails", "search", "read_email", "delete_email"]
    toolset = bundle.toolset(bundle.tasks[0])
    assert (toolset.envs, toolset.role) == (["mail"], "assistant")


def test_fake_bundle_loads_every_task_with_its_declared_splits():
    bundle = load_bundle(FAKE)
    assert bundle.splits == ["train", "eval", "test"]
    assert [t.id for t in bundle.split("eval")] == ["eval-echo"]
    assert "no-verdict" in {t.id for t in bundle.split("train")}


def test_a_declared_split_without_tasks_is_listed_and_empty():
    bundle = load_bundle(FAKE)
    assert "test" in bundle.splits
    assert list(bundle.split("test")) == []


def test_an_unknown_split_is_a_key_error_naming_the_splits():
    bundle = load_bundle(FAKE)
    with pytest.raises(KeyError, match="no split 'valid'; its splits: train, eval, test"):
        bundle.split("valid")


def test_an_unknown_task_is_a_key_error_saying_how_to_list_them():
    bundle = load_bundle(FAKE)
    with pytest.raises(KeyError, match="no task 'nope'; list them with: agentenv tasks"):
        bundle.task("nope")


def test_index_counts_within_a_split():
    bundle = load_bundle(ARITH)
    for split in bundle.splits:
        assert [bundle.index_of(t) for t in bundle.split(split)] == list(range(len(bundle.split(split))))


def test_tasks_with_the_same_toolset_share_one_key():
    bundle = load_bundle(FAKE)
    keys = {bundle.toolset_key(bundle.task(i)) for i in ("echo", "eval-echo", "two-turn", "weighted", "no-verdict")}
    assert len(keys) == 1
    for other in (load_bundle(ARITH), load_bundle(INBOX)):
        assert len({other.toolset_key(t) for t in other.tasks}) == 1, other.name


@pytest.mark.parametrize(
    ("task_id", "why"),
    [
        ("no-add", "a tool denied"),
        ("bash", "bash offered"),
        ("slow-deploy", "another env (same class, other config)"),
        ("proc-echo", "another env kind"),
    ],
)
def test_tasks_with_different_toolsets_have_different_keys(task_id, why):
    bundle = load_bundle(FAKE)
    assert bundle.toolset_key(bundle.task(task_id)) != bundle.toolset_key(bundle.task("echo")), why


def test_an_access_change_that_changes_nothing_keeps_the_key(tmp_path):
    bundle_dir = copy_bundle(tmp_path)
    (bundle_dir / "tasks" / "allow-echo.yaml").write_text(
        "id: allow-echo\nsplit: train\ntoolset: {envs: [ok], allow: {ok: [echo]}, deny: {ok: []}}\n"
        "turns: [{prompt: Echo., verifiers: [{id: answer-1, kind: contains, answer: x}]}]\n"
    )
    bundle = load_bundle(bundle_dir)
    assert bundle.toolset_key(bundle.task("allow-echo")) == bundle.toolset_key(bundle.task("echo"))


def test_two_roles_that_end_with_the_same_tools_share_a_key(tmp_path):
    bundle_dir = copy_bundle(tmp_path, INBOX)
    (bundle_dir / "tasks" / "admin.yaml").write_text(
        "id: admin\nsplit: train\ntoolset: {envs: [mail], role: admin, deny: {mail: [delete_email]}}\n"
        "turns: [{prompt: Who wrote m1, verifiers: [{id: answer-1, kind: regex, pattern: dana}]}]\n"
    )
    bundle = load_bundle(bundle_dir)
    assert bundle.toolset_key(bundle.task("admin")) == bundle.toolset_key(bundle.task("q-001"))


def test_the_admin_role_gets_another_key(tmp_path):
    bundle_dir = copy_bundle(tmp_path, INBOX)
    (bundle_dir / "tasks" / "admin.yaml").write_text(
        "id: admin\nsplit: train\ntoolset: {envs: [mail], role: admin}\n"
        "turns: [{prompt: Delete m1., verifiers: [{id: answer-1, kind: regex, pattern: done}]}]\n"
    )
    bundle = load_bundle(bundle_dir)
    assert bundle.toolset_key(bundle.task("admin")) != bundle.toolset_key(bundle.task("q-001"))


def test_toolset_keys_are_the_same_in_another_process():
    here = {}
    for path in (ARITH, INBOX, FAKE):
        bundle = load_bundle(path)
        here[bundle.name] = {t.id: bundle.toolset_key(t) for t in bundle.tasks}
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # another hash seed: keys must not depend on it
    done = subprocess.run(
        [sys.executable, "-c", KEYS_SCRIPT, str(ARITH), str(INBOX), str(FAKE)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == here


def test_toolset_keys_do_not_depend_on_where_the_bundle_is(tmp_path):
    original = load_bundle(INBOX)
    copy = load_bundle(copy_bundle(tmp_path, INBOX))
    assert {t.id: copy.toolset_key(t) for t in copy.tasks} == {t.id: original.toolset_key(t) for t in original.tasks}


async def test_an_env_class_and_a_check_from_installed_modules_load_and_play(tmp_path):
    """``module:name`` targets outside the bundle folder are imported from sys.path."""
    bundle_dir = copy_bundle(tmp_path)
    patch(bundle_dir / "bundle.yaml", "envs:\n", "envs:\n  bare: {kind: python, target: 'agentenv.env:Env'}\n")
    (bundle_dir / "tasks" / "bare.yaml").write_text(
        "id: bare\nsplit: train\ntoolset: {envs: [bare]}\n"
        "turns: [{prompt: Hi., verifiers: [{id: answer-1, kind: python, check: 'operator:is_not'}]}]\n"
    )
    bundle = load_bundle(bundle_dir)
    assert bundle.env_tools["bare"] == []
    _, _, result = await play(bundle, "bare", replies=["hello"])
    assert (result.outcome, result.reward) == ("scored", 1.0)


def test_a_bundle_loads_from_its_bundle_yaml_path_too():
    assert [t.id for t in load_bundle(FAKE / "bundle.yaml").tasks] == [t.id for t in load_bundle(FAKE).tasks]


def test_toolset_keys_read_as_a_name_and_a_short_hash():
    import re

    from agentenv.bundle.toolsets import key_name

    inbox, fake = load_bundle(INBOX), load_bundle(FAKE)
    assert re.fullmatch(r"mail-without-delete_email-[0-9a-f]{8}", inbox.toolset_key(inbox.task("q-001")))
    named = {task_id: key_name(fake.toolset_key(fake.task(task_id))) for task_id in ("echo", "no-add", "bash")}
    assert named == {"echo": "ok", "no-add": "ok-without-add", "bash": "ok+bash"}
