"""The writer's prompt count (--tokenizer, --chat-template-kwargs) against what the loop renders in
verl, and its refusal over --max-prompt-length."""

from __future__ import annotations

import json

from agentenv_verl import write
from agentenv_verl.cli import main

from tests.support.verl import ScriptedServer, dataset_rows, make_loop, trainer_config, verl_config

NO_THINKING = {"enable_thinking": False}


async def _first_prompt_tokens(tokenizer, url, row, chat_template_kwargs) -> int:
    model = ScriptedServer(tokenizer, ["ping<|im_end|>"])
    config = verl_config(chat_template_kwargs=chat_template_kwargs)
    out = await make_loop(tokenizer, model, url, config=config).run({"temperature": 1.0}, **row)
    return len(out.prompt_ids)


async def test_the_writers_count_is_the_loops_prompt_with_and_without_thinking(
    tokenizer, model_dir, fake_server, tmp_path
):
    counts = {}
    for name, kwargs in (("default", {}), ("no-thinking", NO_THINKING)):
        written = write(fake_server.url, tmp_path / name, tokenizer=str(model_dir), chat_template_kwargs=kwargs)
        row = dataset_rows(written.files["train"], tokenizer, tmp_path / f"cache-{name}")["echo"]
        counted = next(p.tokens for p in written.longest if p.task_id == "echo")
        assert counted == await _first_prompt_tokens(tokenizer, fake_server.url, row, kwargs)
        counts[name] = counted

    think = len(tokenizer.encode("<think>\n\n</think>\n\n", add_special_tokens=False))
    assert counts["no-thinking"] == counts["default"] + think


def test_the_longest_prompt_is_printed(model_dir, fake_server, tmp_path, capsys):
    code = main(
        [
            fake_server.url,
            str(tmp_path / "out"),
            "--tokenizer",
            str(model_dir),
            "--quiet",
            "--chat-template-kwargs",
            json.dumps(NO_THINKING),
        ]
    )

    out = capsys.readouterr().out
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("longest prompt with its tools: "))
    tokens = int(line.split(": ")[-1].removesuffix(" tokens"))
    assert line == f"longest prompt with its tools: train/bash: {tokens} tokens"  # bash adds a tool
    assert f"data.max_prompt_length={tokens}" in out
    overrides = [line.strip() for line in out.splitlines() if "data.apply_chat_template_kwargs" in line]
    assert overrides == ["+data.apply_chat_template_kwargs.enable_thinking=false"]
    assert trainer_config(*overrides).data.apply_chat_template_kwargs == NO_THINKING  # what verl reads from them


def test_rows_over_max_prompt_length_are_refused_before_anything_is_written(model_dir, fake_server, tmp_path, capsys):
    written = write(fake_server.url, tmp_path / "counted", tokenizer=str(model_dir))
    longest, second = written.longest[0], written.longest[1]
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.parquet").write_bytes(b"an older dataset")

    code = main(
        [fake_server.url, str(out), "--tokenizer", str(model_dir), "--max-prompt-length", str(second.tokens), "--quiet"]
    )

    err = capsys.readouterr().err
    assert code == 2
    assert f"1 of 12 prompts (with their tools) are over --max-prompt-length {second.tokens}" in err
    assert f"  {longest.split}/{longest.task_id}: {longest.tokens} tokens" in err
    assert f"Set data.max_prompt_length (and --max-prompt-length) to at least {longest.tokens}" in err
    assert sorted(p.name for p in out.iterdir()) == ["train.parquet"]
    assert (out / "train.parquet").read_bytes() == b"an older dataset"
