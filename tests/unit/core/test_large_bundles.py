"""Bundles with thousands of tasks load whole, and a refusal still names the file, the line and the field.

The tasks are generated into tmp_path: one env, one contains-verifier per task (the shape of an RL
prompt set). Timings are not asserted here; bench/bundle_load.py measures them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from agentenv import load_bundle
from agentenv.bundle.yaml_lines import load_yaml, read_yaml

from tests.support.bundles import only_problem, refused

N = 10_000
ENV = '''from agentenv import Env, tool


class Calc(Env):
    @tool({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})
    def add(self, a: float, b: float) -> float:
        """Add two numbers."""
        return a + b
'''


def task(i: int) -> dict[str, Any]:
    verifier = {"id": "answer", "kind": "contains", "answer": str(2 * i + 1)}
    return {
        "id": f"t{i:05d}",
        "split": "eval" if i % 10 == 0 else "train",
        "turns": [{"prompt": f"What is {i} + {i + 1}?", "verifiers": [verifier]}],
    }


def make(root: Path, tasks: list[dict[str, Any]], *, one_file: bool) -> Path:
    root.mkdir()
    (root / "calc.py").write_text(ENV)
    glob = "tasks.yaml" if one_file else "tasks/*.yaml"
    (root / "bundle.yaml").write_text(
        f"name: big\nsplits: [train, eval]\nenvs:\n  calc: {{kind: python, target: calc:Calc}}\n"
        f"defaults:\n  toolset: {{envs: [calc]}}\ntasks: {glob}\n"
    )
    if one_file:
        (root / "tasks.yaml").write_text(yaml.dump(tasks, Dumper=yaml.CSafeDumper, sort_keys=False))
    else:
        (root / "tasks").mkdir()
        for t in tasks:
            (root / "tasks" / f"{t['id']}.yaml").write_text(yaml.dump(t, Dumper=yaml.CSafeDumper, sort_keys=False))
    return root


def line_after(path: Path, anchor: str, text: str) -> int:
    """The line of the first line containing ``text`` after the line containing ``anchor``."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if anchor in line)
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def test_ten_thousand_tasks_in_one_file_load_in_order_with_their_split_indexes(tmp_path):
    bundle = load_bundle(make(tmp_path / "b", [task(i) for i in range(N)], one_file=True))
    assert [t.id for t in bundle.tasks] == [f"t{i:05d}" for i in range(N)]
    assert (len(bundle.split("train")), len(bundle.split("eval"))) == (N - N // 10, N // 10)
    assert [bundle.index_of(t) for t in bundle.split("eval")] == list(range(N // 10))
    assert bundle.split("train")[4320] is bundle.task("t04801")
    assert len(set(bundle.toolset_keys.values())) == 1


def test_a_bad_task_deep_in_a_large_file_is_refused_at_its_line(tmp_path):
    tasks = [task(i) for i in range(N)]
    tasks[7345]["turns"][0]["verifiers"][0]["kind"] = "contain"
    tasks[9001]["turns"][0]["prompt"] = " "
    root = make(tmp_path / "b", tasks, one_file=True)
    error = refused(root)
    assert [(p.file, p.field) for p in error.problems] == [
        ("tasks.yaml", "turns[0].verifiers[0].kind"),
        ("tasks.yaml", "turns[0].prompt"),
    ]
    kind, prompt = error.problems
    assert kind.line == line_after(root / "tasks.yaml", "id: t07345", "kind: contain")
    assert "unknown verifier kind 'contain'; known: contains, exact, harbor, judge, python, regex" in kind.message
    assert prompt.line == line_after(root / "tasks.yaml", "id: t09001", "prompt:")
    assert f"tasks.yaml:{prompt.line}: turns[0].prompt: is empty" in str(error)


def test_a_bad_task_among_thousands_of_task_files_is_refused_at_its_line(tmp_path):
    tasks = [task(i) for i in range(2_000)]
    tasks[1234]["toolset"] = {"envs": ["calculator"]}
    root = make(tmp_path / "b", tasks, one_file=False)
    problem = only_problem(refused(root))
    assert (problem.file, problem.field) == ("tasks/t01234.yaml", "toolset.envs[0]")
    assert problem.line == line_after(root / "tasks" / "t01234.yaml", "toolset:", "calculator")
    assert "unknown env 'calculator'; the bundle's envs: calc" in problem.message


def test_a_duplicate_id_in_a_large_file_is_refused_at_the_second(tmp_path):
    tasks = [task(i) for i in range(N)]
    tasks[8000]["id"] = "t00017"
    root = make(tmp_path / "b", tasks, one_file=True)
    problem = only_problem(refused(root))
    assert (problem.file, problem.field) == ("tasks.yaml", "id")
    assert problem.line == line_after(root / "tasks.yaml", "What is 8000 + 8001?", "") - 3
    assert "duplicate task id 't00017' (also in tasks.yaml)" in problem.message


def test_a_refusal_lists_the_first_200_problems_and_counts_the_rest(tmp_path):
    tasks = [task(i) for i in range(1_000)]
    for t in tasks:
        t["turns"][0]["verifiers"][0]["kind"] = "contain"
    root = make(tmp_path / "b", tasks, one_file=True)
    error = refused(root)
    assert len(error.problems) == 201
    assert all("unknown verifier kind 'contain'" in p.message for p in error.problems[:200])
    kinds = [n for n, line in enumerate((root / "tasks.yaml").read_text().splitlines(), 1) if "kind: contain" in line]
    assert [p.line for p in error.problems[:200]] == kinds[:200]
    assert str(error.problems[-1]) == "(+800 more problems): not listed; fix the ones above and load again"


DOCUMENTS = {
    "scalars": "- 1\n- 2.5\n- .inf\n- ~\n- yes\n- 'yes'\n- 0x1F\n- 2001-12-14\n- 1_000\n- 017\n- '{a}'\n"
    '- "\\u00e9"\n',
    "flow and block": "a: [1, {b: c}]\n'd': \"e\"\n? f\n: g\n1: x\ntrue: y\n~: z\nt: |\n  text\n  more\n",
    "anchors and merge keys": "base: &b {kind: contains, answer: '3'}\nv: *b\nw:\n  <<: *b\n  id: answer\n",
    "explicit tags": "a: !!str 12\nb: !!float 1\n",
    "empty": "",
    "nested lists": "- - - 1\n  - []\n- {}\n",
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_task_file_means_what_yaml_safe_load_makes_of_it(tmp_path, name):
    path = tmp_path / "doc.yaml"
    path.write_text(DOCUMENTS[name])
    expected = yaml.safe_load(DOCUMENTS[name])
    assert load_yaml(path, "doc.yaml") == expected
    data, lines = read_yaml(path, "doc.yaml")
    assert repr(data) == repr(expected)
    if name == "anchors and merge keys":
        assert lines[("w", "id")] == 5


def test_a_task_that_uses_an_anchor_is_refused_at_its_own_line(tmp_path):
    tasks = [task(i) for i in range(3)]
    root = make(tmp_path / "b", tasks, one_file=True)
    text = (root / "tasks.yaml").read_text()
    text = text.replace("- id: t00000\n", "- id: t00000\n  metadata: &m {source: gen}\n", 1)
    text = text.replace("- id: t00002\n", "- id: t00002\n  metadata: *m\n  rewards: mean\n", 1)
    (root / "tasks.yaml").write_text(text)
    problem = only_problem(refused(root))
    assert (problem.file, problem.field) == ("tasks.yaml", "rewards")
    assert problem.line == line_after(root / "tasks.yaml", "id: t00002", "rewards:")
