"""The ``dataset`` task source: one task per row of a JSONL, parquet or saved ``datasets`` file.

Most tests copy the wordmath example (a JSONL file and a template in bundle.yaml) into tmp_path and
change its data or its template; a refusal names the file, the row and the column.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentenv import load_bundle
from agentenv.cli import main

from tests.support import ROOT
from tests.support.bundles import copy_bundle, line_of, only_problem, patch, play, refused

WORDMATH = ROOT / "examples" / "bundles" / "wordmath"
DATA = "data/problems.jsonl"


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def wordmath(tmp_path: Path) -> Path:
    return copy_bundle(tmp_path, WORDMATH)


def test_the_example_has_one_task_per_row_from_the_template():
    bundle = load_bundle(WORDMATH)
    rows = rows_of(WORDMATH / DATA)
    assert [t.id for t in bundle.tasks] == [f"wm-{r['id']}" for r in rows]
    assert (len(bundle.split("train")), len(bundle.split("eval"))) == (270, 30)
    task, row = bundle.task("wm-3"), rows[3]
    assert (task.split, task.turns[0].prompt, task.turns[0].verifiers[0].params) == (
        row["split"],
        row["question"],
        {"answer": row["answer"]},
    )
    assert task.system.startswith("Solve the word problem.")
    assert task.solution is not None
    assert task.solution[0].calls[0].args == {"expression": row["expression"]}


def test_the_committed_dataset_is_what_the_seeded_generator_writes(tmp_path):
    out = tmp_path / "problems.jsonl"
    subprocess.run([sys.executable, str(WORDMATH / "generate.py"), "--out", str(out)], check=True, capture_output=True)
    assert out.read_text() == (WORDMATH / DATA).read_text()


async def test_a_reference_solution_read_from_a_row_plays_and_scores_one():
    bundle = load_bundle(WORDMATH)
    task = bundle.task("wm-9")
    solution = task.solution[0]  # type: ignore[index]
    calls = [(c.tool, c.args) for c in solution.calls]
    _, steps, result = await play(bundle, "wm-9", calls=calls, replies=[solution.reply])
    assert str(steps[0].text) == str(rows_of(WORDMATH / DATA)[9]["answer"])
    assert (result.outcome, result.reward) == ("scored", 1.0)


def test_agentenv_check_plays_the_dataset_example(capsys):
    assert main(["check", str(WORDMATH)]) == 0
    assert "bundle 'wordmath': 300 tasks in train, eval; loads cleanly" in capsys.readouterr().out


def test_a_parquet_file_gives_the_same_tasks_as_the_jsonl_file(wordmath):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows_of(wordmath / DATA)), wordmath / "data" / "problems.parquet")
    (wordmath / DATA).unlink()
    patch(wordmath / "bundle.yaml", "path: data/problems.jsonl", "path: data/problems.parquet")
    assert load_bundle(wordmath).tasks == load_bundle(WORDMATH).tasks


def test_a_saved_dataset_dict_gives_its_splits_to_the_tasks(wordmath):
    import datasets

    rows = rows_of(wordmath / DATA)
    columns = ["id", "question", "expression", "answer"]
    parts = {s: [{c: r[c] for c in columns} for r in rows if r["split"] == s] for s in ("train", "eval")}
    datasets.DatasetDict({s: datasets.Dataset.from_list(p) for s, p in parts.items()}).save_to_disk(
        str(wordmath / "data" / "saved")
    )
    (wordmath / DATA).unlink()
    patch(wordmath / "bundle.yaml", "path: data/problems.jsonl", "path: data/saved")
    patch(wordmath / "bundle.yaml", '    split: "{split}"\n', "")
    bundle = load_bundle(wordmath)
    assert {s: [t.id for t in bundle.split(s)] for s in ("train", "eval")} == {
        s: [f"wm-{r['id']}" for r in p] for s, p in parts.items()
    }


def test_a_saved_dataset_row_is_refused_naming_its_split_folder_row_and_column(wordmath):
    import datasets

    rows = rows_of(wordmath / DATA)[:20]
    rows[12]["question"] = None
    datasets.Dataset.from_list(rows).save_to_disk(str(wordmath / "data" / "saved"))
    patch(wordmath / "bundle.yaml", "path: data/problems.jsonl", "path: data/saved")
    problem = only_problem(refused(wordmath))
    assert (problem.file, problem.field, problem.line) == (
        "data/saved",
        "row 12, column 'question' -> turns[0].prompt",
        None,
    )
    assert problem.message == "is null; fill it in the dataset, or drop the row"


def test_a_row_without_a_column_the_template_uses_is_refused_at_its_line(wordmath):
    rows = [{**row, "id": i} for i, row in enumerate(rows_of(wordmath / DATA) * 40)]  # 12,000 rows
    del rows[11_111]["answer"]
    write_rows(wordmath / DATA, rows)
    problems = refused(wordmath).problems
    assert {(p.file, p.line) for p in problems} == {(DATA, 11_112)}
    assert [p.field for p in problems] == [
        "row 11111, column 'answer' -> turns[0].verifiers[0].answer",
        "row 11111, column 'answer' -> solution[0].reply",
    ]
    assert problems[0].message.startswith("missing from this row; its columns: id, split, question, expression")
    assert str(problems[0]).startswith(f"{DATA}:11112: row 11111, column 'answer' -> turns[0].verifiers[0].answer: ")


def test_a_row_that_makes_a_bad_task_is_refused_naming_the_row_and_the_column(wordmath):
    rows = rows_of(wordmath / DATA)
    rows[4]["question"] = "   "
    rows[7]["split"] = "test"
    write_rows(wordmath / DATA, rows)
    error = refused(wordmath)
    assert [(p.file, p.line, p.field) for p in error.problems] == [
        (DATA, 5, "row 4, column 'question' -> turns[0].prompt"),
        (DATA, 8, "row 7, column 'split' -> split"),
    ]
    assert error.problems[0].message == "is empty; write the prompt the model gets on this turn"
    assert error.problems[1].message.startswith("split 'test' is not one of the bundle's splits (train, eval)")


def test_two_rows_with_one_id_are_refused_naming_both_rows(wordmath):
    rows = rows_of(wordmath / DATA)
    rows[250]["id"] = 17
    write_rows(wordmath / DATA, rows)
    problem = only_problem(refused(wordmath))
    assert (problem.file, problem.line, problem.field) == (DATA, 251, "row 250, column 'id' -> id")
    assert problem.message == f"duplicate task id 'wm-17' (also in {DATA} row 17); give each task its own id"


def test_a_line_that_is_not_json_is_refused_at_its_line(wordmath):
    text = (wordmath / DATA).read_text().splitlines()
    text[41] = text[41][:-1]
    (wordmath / DATA).write_text("\n".join(text) + "\n")
    problem = only_problem(refused(wordmath))
    assert (problem.file, problem.line, problem.field) == (DATA, 42, "row 41")
    assert problem.message.startswith("is not JSON (Expecting ',' delimiter at column")


def test_a_template_column_that_no_parquet_column_matches_is_refused_once_in_bundle_yaml(wordmath):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows_of(wordmath / DATA)), wordmath / "data" / "problems.parquet")
    patch(wordmath / "bundle.yaml", "path: data/problems.jsonl", "path: data/problems.parquet")
    patch(wordmath / "bundle.yaml", '- prompt: "{question}"', '- prompt: "{questoin}"')
    problem = only_problem(refused(wordmath))
    assert (problem.file, problem.field) == ("bundle.yaml", "tasks.task.turns[0].prompt")
    assert problem.line == line_of(wordmath / "bundle.yaml", "{questoin}")
    assert problem.message == (
        "column 'questoin' is not in data/problems.parquet; its columns: id, split, question, expression, answer"
    )


def test_a_template_column_missing_from_the_first_jsonl_row_is_refused_once_in_bundle_yaml(wordmath):
    patch(wordmath / "bundle.yaml", 'answer: "{answer}"}]', 'answer: "{answr}"}]')
    problem = only_problem(refused(wordmath))
    assert (problem.file, problem.field) == ("bundle.yaml", "tasks.task.turns[0].verifiers[0].answer")
    assert problem.line == line_of(wordmath / "bundle.yaml", "{answr}")
    assert "column 'answr' is not in data/problems.jsonl" in problem.message


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ('"Q: {question"', "unmatched '{' in 'Q: {question'; write {{ for a literal brace"),
        ('"Q: {}"', "empty placeholder in 'Q: {}'; name a column, e.g. {question}"),
    ],
)
def test_a_bad_placeholder_is_refused_at_its_line_in_bundle_yaml(wordmath, template, message):
    patch(wordmath / "bundle.yaml", '- prompt: "{question}"', f"- prompt: {template}")
    problem = only_problem(refused(wordmath))
    assert (problem.file, problem.field, problem.message) == ("bundle.yaml", "tasks.task.turns[0].prompt", message)
    assert problem.line == line_of(wordmath / "bundle.yaml", "- prompt:")


def test_text_around_placeholders_and_escaped_braces_are_kept(wordmath):
    patch(
        wordmath / "bundle.yaml", '- prompt: "{question}"', '- prompt: "#{_row} {{of {_file}}}: {question} ({answer}?)"'
    )
    task = load_bundle(wordmath).task("wm-2")
    row = rows_of(wordmath / DATA)[2]
    assert task.turns[0].prompt == f"#2 {{of problems}}: {row['question']} ({row['answer']}?)"


def test_without_a_template_each_row_is_a_whole_task_and_the_defaults_apply(tmp_path):
    root = tmp_path / "b"
    (root / "data").mkdir(parents=True)
    (root / "bundle.yaml").write_text(
        "name: rows\ndefaults: {split: train}\ntasks: {source: dataset, path: data/*.jsonl}\n"
    )
    turn = {"prompt": "Say hi.", "verifiers": [{"id": "answer", "kind": "contains", "answer": "hi"}]}
    write_rows(
        root / "data" / "a.jsonl", [{"id": "a1", "turns": [turn]}, {"id": "a2", "turns": [turn], "split": "eval"}]
    )
    write_rows(root / "data" / "b.jsonl", [{"id": "b1", "turns": [turn], "turn": 3}])
    problem = only_problem(refused(root))
    assert (problem.file, problem.line, problem.field) == ("data/b.jsonl", 1, "row 0, column 'turn' -> turn")
    assert problem.message == "unknown field; remove it or check its spelling"
    write_rows(root / "data" / "b.jsonl", [{"id": "b1", "turns": [turn]}])
    bundle = load_bundle(root)
    assert [(t.id, t.split) for t in bundle.tasks] == [("a1", "train"), ("a2", "eval"), ("b1", "train")]


def test_a_task_without_an_id_in_the_template_is_named_by_file_and_row(wordmath):
    patch(wordmath / "bundle.yaml", '    id: "wm-{id}"\n', "")
    assert [t.id for t in load_bundle(wordmath).tasks[:3]] == ["problems-0", "problems-1", "problems-2"]


@pytest.mark.parametrize(
    ("config", "field", "message"),
    [
        ("{source: dataset}", "tasks.path", "missing; give the dataset file (path: data/problems.jsonl)"),
        ("{source: dataset, path: data/none.jsonl}", "tasks.path", "'data/none.jsonl' matches no file in"),
        ("{source: dataset, path: x.jsonl, rows: 3}", "tasks.rows", "unknown field; the fields are source, path, task"),
        ("{source: dataset, path: x.jsonl, task: [1]}", "tasks.task", "must be a task mapping with {column}"),
        ("{source: dataset, path: {a: 1}}", "tasks.path", "must be a file, a glob or a list of them"),
        ("{source: dataset, path: [y.jsonl]}", "tasks.path[0]", "'y.jsonl' matches no file in"),
    ],
)
def test_a_bad_dataset_source_config_is_refused_at_its_field(tmp_path, config, field, message):
    (tmp_path / "x.jsonl").write_text("{}\n")
    (tmp_path / "bundle.yaml").write_text(f"name: d\ntasks: {config}\n")
    problem = only_problem(refused(tmp_path))
    assert (problem.file, problem.field, problem.line) == ("bundle.yaml", field, 2)
    assert problem.message.startswith(message)


def test_a_file_of_an_unknown_format_is_refused_naming_the_formats(tmp_path):
    (tmp_path / "rows.csv").write_text("id,question\n1,hi\n")
    (tmp_path / "bundle.yaml").write_text("name: d\ntasks: {source: dataset, path: rows.csv}\n")
    problem = only_problem(refused(tmp_path))
    assert (problem.file, problem.field) == ("rows.csv", "")
    assert problem.message.startswith("unknown dataset format '.csv'; give a .jsonl, .json or .parquet file")


@pytest.mark.parametrize(
    ("module", "path", "what", "extra"),
    [
        ("pyarrow", "data/problems.parquet", "reading parquet needs pyarrow", "parquet"),
        ("datasets", "data/saved", "reading a saved dataset needs datasets", "datasets"),
    ],
)
def test_without_its_optional_dependency_a_format_is_refused_with_the_install_command(
    wordmath, module, path, what, extra
):
    (wordmath / "data" / "problems.parquet").write_bytes(b"PAR1")
    (wordmath / "data" / "saved").mkdir()
    (wordmath / "data" / "saved" / "dataset_info.json").write_text("{}")
    patch(wordmath / "bundle.yaml", "path: data/problems.jsonl", f"path: {path}")
    # the module is made unimportable in a fresh interpreter, as on an install without the extra
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        f"from agentenv.cli import main\nsys.exit(main(['tasks', {str(wordmath)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert f"  - {path}: {what}, which is not installed; install it with: pip install 'agentenv-core[{extra}]'" in (
        done.stderr
    )


def test_a_number_where_a_task_wants_text_is_taken_as_its_text(tmp_path):
    root = tmp_path / "b"
    (root / "tasks").mkdir(parents=True)
    (root / "bundle.yaml").write_text("name: y\ntasks: tasks/*.yaml\n")
    (root / "tasks" / "a.yaml").write_text(yaml.safe_dump({"id": "a", "split": "train", "turns": [{"prompt": 42}]}))
    bundle = load_bundle(root)
    assert bundle.task("a").turns[0].prompt == "42"
