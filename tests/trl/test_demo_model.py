"""``agentenv demo --model PATH``: a model and tokenizer saved in a local folder are trained instead of the tiny one."""

from __future__ import annotations

import contextlib
import io
import json

from agentenv import load_bundle
from agentenv.cli import main
from agentenv_trl import tiny

from tests.support.trl import ARITH


def test_a_local_model_folder_is_loaded_trained_and_evaluated_with_no_warm_start(tmp_path):
    bundle = load_bundle(ARITH)
    texts = [turn.prompt for task in bundle.tasks for turn in task.turns]
    tokenizer = tiny.tiny_tokenizer(texts=texts, vocab_size=300)
    model = tiny.tiny_model(tokenizer, hidden_size=32, layers=1, heads=2)
    folder = tmp_path / "my-model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    argv = ["demo", "--model", str(folder), "--steps", "1", "--prompts-per-step", "2", "--eval-generations", "1"]
    with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.redirect_stderr(io.StringIO()):
        code = main([*argv, "--json", str(tmp_path / "report.json"), "--output-dir", str(tmp_path / "trl")])
    report = json.loads((tmp_path / "report.json").read_text())

    assert code == 0
    assert report["model"] == str(folder)
    assert f"model: {folder}" in printed.getvalue()
    assert report["warm_start_steps"] == 0 and report["warm_start_loss"] is None  # a real model: no warm start asked
    assert [s["episodes"] for s in report["steps"]] == [2 * 4]
    assert [e["episodes"] for e in report["evals"]] == [len(bundle.split("eval"))] * 2
