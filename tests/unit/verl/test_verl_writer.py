"""The verl dataset writer against the real server on the fake bundle, with no verl installed."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from agentenv.cli import main as agentenv_main
from agentenv.client.settings import Shared
from agentenv.client.taskapi import read_tasks
from agentenv.errors import Unauthorized
from agentenv.plugins import plugins
from agentenv_verl import SUPPORTED
from agentenv_verl.cli import main
from agentenv_verl.writer import arrow_schema, write

ROOT = Path(__file__).resolve().parents[3]
DEAD_URL = "http://127.0.0.1:9"  # nothing listens on the discard port: reading it would fail differently


def _written(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file()) if out.exists() else []


def test_each_split_is_written_with_a_row_per_task(serve, tmp_path):
    server = serve()
    written = write(server.url, tmp_path / "out")

    assert written.rows == {"train": 11, "eval": 1, "test": 0}
    train = {r["extra_info"]["task_id"]: r for r in pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()}
    assert set(train) == {t.id for t in read_tasks(Shared(server.url), "train")}
    echo = train["echo"]
    assert echo["prompt"] == [
        {"role": "system", "content": "You are a test agent. Use the tools as asked."},
        {"role": "user", "content": "Echo the word 'ping' with the echo tool, then say it."},
    ]
    assert echo["agent_name"] == plugins().integration("verl").offers["agent_loop_name"]
    assert echo["data_source"] == "agentenv/fake"
    assert echo["reward_model"] == {"style": "rule", "ground_truth": ""}
    assert echo["extra_info"]["split"] == "train"
    assert isinstance(echo["extra_info"]["tools"], str)  # JSON, never nested dicts
    # every row carries every step id of the bundle: the score keys each rollout reports
    assert all(r["extra_info"]["steps"] == ["answer-1", "answer-2"] for r in train.values())
    (eval_row,) = pq.read_table(tmp_path / "out" / "eval.parquet").to_pylist()
    assert eval_row["extra_info"]["task_id"] == "eval-echo"
    assert eval_row["extra_info"]["index"] == 0


def test_a_rows_tools_are_its_toolsets_full_schemas(serve, tmp_path):
    server = serve()
    write(server.url, tmp_path / "out")

    rows = {r["extra_info"]["task_id"]: r for r in pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()}
    echo_tools = {t["function"]["name"]: t for t in json.loads(rows["echo"]["extra_info"]["tools"])}
    no_add_tools = {t["function"]["name"] for t in json.loads(rows["no-add"]["extra_info"]["tools"])}
    assert "add" in echo_tools and "add" not in no_add_tools
    nested = echo_tools["nested"]["function"]["parameters"]
    assert nested["properties"]["filter"]["properties"]["tags"]["items"]["enum"] == ["work", "home"]
    assert nested["properties"]["score"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]


def test_tools_are_probed_once_per_toolset(serve, ledger, tmp_path):
    server = serve()
    write(server.url, tmp_path / "out")

    shared = Shared(server.url)
    keys = {t.toolset_key for split in ("train", "eval", "test") for t in read_tasks(shared, split)}
    assert len(keys) < 12  # the fake bundle's 12 tasks share fewer toolsets
    assert ledger.wait_for("teardown", len(keys)) == len(keys)
    assert ledger.count("deploy") == len(keys)


def test_an_empty_split_keeps_every_column(serve, tmp_path):
    server = serve()
    write(server.url, tmp_path / "out")

    table = pq.read_table(tmp_path / "out" / "test.parquet")
    assert table.num_rows == 0
    assert table.schema.equals(arrow_schema())
    assert pq.read_table(tmp_path / "out" / "train.parquet").schema.equals(arrow_schema())


def test_the_loop_config_names_the_loops_the_plugin_registers(serve, tmp_path):
    server = serve()
    write(server.url, tmp_path / "out", tool_timeout=7, reset_timeout=90, attempts=4)

    multi, single = yaml.safe_load((tmp_path / "out" / "agent_loop.yaml").read_text())
    offers = plugins().integration("verl").offers
    module, attr = offers["agent_loop"].split(":")
    assert multi == {
        "name": offers["agent_loop_name"],
        "_target_": f"{module}.{attr}",
        "url": server.url,
        "reset_timeout": 90.0,
        "attempts": 4,
        "token_var": None,
        "tool_timeout": 7.0,
    }
    module, attr = offers["single_turn_loop"].split(":")
    assert single == {
        "name": offers["single_turn_loop_name"],
        "_target_": f"{module}.{attr}",
        "url": server.url,
        "reset_timeout": 90.0,
        "attempts": 4,
        "token_var": None,
    }
    assert (multi["name"], single["name"]) == ("agentenv", "agentenv_single")


def test_only_the_named_splits_are_written(serve, tmp_path):
    server = serve()
    written = write(server.url, tmp_path / "out", splits=["eval"])

    assert written.rows == {"eval": 1}
    assert sorted(p.name for p in _written(tmp_path / "out")) == ["agent_loop.yaml", "eval.parquet", "manifest.json"]


def test_a_token_server_is_read_with_the_token_its_variable_holds(serve, tmp_path, monkeypatch):
    token = "tok-3f9a2c71e5"
    server = serve(token=token)
    monkeypatch.setenv("VERL_TEST_TOKEN", token)
    written = write(server.url, tmp_path / "out", token_var="VERL_TEST_TOKEN")

    assert written.rows["train"] == 11
    entries = yaml.safe_load((tmp_path / "out" / "agent_loop.yaml").read_text())
    assert [entry["token_var"] for entry in entries] == ["VERL_TEST_TOKEN", "VERL_TEST_TOKEN"]
    files = _written(tmp_path / "out")
    assert len(files) == 5  # three splits, agent_loop.yaml, manifest.json
    assert not [f.name for f in files if token.encode() in f.read_bytes()]


def test_a_wrong_token_is_refused_and_nothing_is_written(serve, tmp_path, monkeypatch):
    server = serve(token="the-right-one")
    monkeypatch.setenv("VERL_TEST_TOKEN", "a-wrong-one")

    with pytest.raises(Unauthorized, match=r"\$VERL_TEST_TOKEN"):
        write(server.url, tmp_path / "out", token_var="VERL_TEST_TOKEN")
    assert _written(tmp_path / "out") == []


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--max-prompt-length", "100"], "--max-prompt-length needs --tokenizer"),
        (["--max-prompt-length", "0", "--tokenizer", "x"], "--max-prompt-length 0: give a positive number"),
        (["--attempts", "0"], "--attempts 0: give 1 or more"),
        (["--tool-timeout", "-1"], "--tool-timeout -1.0: give a positive number of seconds"),
        (["--chat-template-kwargs", "{enable_thinking: false}"], "--chat-template-kwargs is not JSON"),
        (["--chat-template-kwargs", "[1]"], "--chat-template-kwargs is a JSON list; write an object"),
        (["--token-var", "VERL_TEST_UNSET_TOKEN"], "export VERL_TEST_UNSET_TOKEN="),
    ],
)
def test_bad_options_are_refused_before_the_server_is_read(args, refusal, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VERL_TEST_UNSET_TOKEN", raising=False)

    code = main([DEAD_URL, str(tmp_path / "out"), "--quiet", *args])

    err = capsys.readouterr().err
    assert code == 2
    assert refusal in err
    assert "no agentenv server answered" not in err
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "out").write_text("keep me")

    assert main([DEAD_URL, str(tmp_path / "out"), "--quiet"]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err
    assert (tmp_path / "out").read_text() == "keep me"


def test_a_missing_server_is_named(tmp_path, capsys):
    assert main([DEAD_URL, str(tmp_path / "out"), "--quiet"]) == 2
    assert f"no agentenv server answered at {DEAD_URL}" in capsys.readouterr().err


def test_agentenv_verl_write_is_the_same_writer(serve, tmp_path, capsys):
    server = serve()

    assert agentenv_main(["verl", "write", server.url, str(tmp_path / "a"), "--quiet"]) == 0
    assert main([server.url, str(tmp_path / "b"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'a' / 'train.parquet'} (11 rows, data_source agentenv/fake)" in out
    assert "actor_rollout_ref.rollout.agent.agent_loop_config_path=" in out
    for name in ("train.parquet", "eval.parquet", "test.parquet"):
        assert pq.read_table(tmp_path / "a" / name).equals(pq.read_table(tmp_path / "b" / name))


def test_single_turn_rows_leave_out_multi_turn_tasks_and_say_how_to_score_them(serve, tmp_path, capsys):
    server = serve()

    assert main([server.url, str(tmp_path / "out"), "--single-turn", "--quiet"]) == 0

    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'out' / 'train.parquet'} (9 rows, data_source agentenv/fake)" in out
    assert "left out 2 multi-turn task(s) of train (two-turn, weighted)" in out
    assert "loops agentenv, agentenv_single" in out
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=agentenv_single" in out
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert {row["extra_info"]["task_id"] for row in rows} >= {"echo", "bash", "no-verdict"}
    assert set(rows[0]) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}


def test_progress_goes_to_stderr(serve, tmp_path, capsys):
    server = serve()

    assert main([server.url, str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "probing toolsets: 7" in err
    assert "writing [####################] 4/4" in err


# --- the package without verl ------------------------------------------------------------------


def test_importing_the_package_plugin_and_writer_does_not_import_verl():
    code = (
        "import sys, agentenv_verl, agentenv_verl.plugin\n"
        "print(sorted(m for m in ('verl', 'torch', 'transformers', 'pyarrow') if m in sys.modules))\n"
        "import agentenv_verl.writer, agentenv_verl.__main__, agentenv_verl.cli, agentenv_verl.reward\n"
        "import agentenv_verl.rows, agentenv_verl.dapo, agentenv_verl.nemo_gym, agentenv_verl.keptout\n"
        "print(sorted(m for m in ('verl', 'torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the plugin loads on every agentenv command: not even pyarrow until the writer is used
    assert done.stdout.split() == ["[]", "[]"]


def test_importing_the_loop_without_verl_names_the_install_command():
    # the unit tier runs without verl (tests/verl has it); this pins the message a user without it sees
    done = subprocess.run([sys.executable, "-c", "import agentenv_verl.loop"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "ImportError: agentenv_verl.loop runs inside verl (verl>=0.9.1,<0.10), which is not installed: " \
           "pip install 'agentenv-verl[verl]'" in done.stderr  # fmt: skip


def test_the_extra_pins_the_declared_range():
    project = tomllib.loads((ROOT / "packages" / "agentenv-verl" / "pyproject.toml").read_text())
    assert SUPPORTED in project["project"]["optional-dependencies"]["verl"]
    integration = plugins().integration("verl")
    assert integration.requirement == SUPPORTED  # read from the installed metadata of that extra
    assert integration.check("0.9.1") == "0.9.1"
    with pytest.raises(ImportError, match=r"agentenv-verl supports verl>=0\.9\.1,<0\.10, but verl 0\.10\.0"):
        integration.check("0.10.0")


def test_an_installed_bundle_is_written_by_name_with_the_loops_pointed_at_the_server_url(tmp_path, monkeypatch, capsys):
    from tests.support.installed_site import Site

    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.chdir(tmp_path)  # no folder named like the bundle where its name is typed
    Site(root).install("calc-tasks", "calc")
    code = main(["calc", str(tmp_path / "out"), "--server-url", "http://env-host:9100", "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (
        "the loops will reach http://env-host:9100" in captured.err
        and "agentenv serve calc --port 9100" in captured.err
    )
    loops = yaml.safe_load((tmp_path / "out" / "agent_loop.yaml").read_text())
    assert {loop["url"] for loop in loops} == {
        "http://env-host:9100"
    }  # the training run's server, not the loopback one
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert rows and {r["data_source"] for r in rows} == {"agentenv/calc"}


def test_server_url_with_a_server_url_is_refused_naming_both(serve, tmp_path, capsys):
    server = serve()
    code = main([server.url, str(tmp_path / "out"), "--server-url", "http://env-host:9100"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--server-url http://env-host:9100 is for a bundle" in err and "drop --server-url" in err
    assert not (tmp_path / "out").exists()
