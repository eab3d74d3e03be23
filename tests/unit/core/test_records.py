"""Episode records (``agentenv serve --record``): real server processes on loopback, real files, read back."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from pathlib import Path

import pytest
from agentenv import record
from agentenv.client.settings import Shared
from agentenv.client.sync import SyncSession
from agentenv.errors import EpisodeLost, RolloutFailed
from agentenv.record import Recorder

from tests.support import wait_until

HOSTILE = "<script>document.title='pwned'</script>\x1b[31m"


def play_echo(url: str, text: str = "ping", *, client: str = "test", step: int | None = None) -> None:
    session = SyncSession(Shared(url, client=client))
    try:
        rollout = session.rollout("echo", step=step)
        rollout.start()
        rollout.call("echo", {"text": text})
        rollout.call("no_such_tool", {})
        rollout.end_turn(text)
        rollout.conclude()
    finally:
        session.close()


def test_every_played_episode_is_one_record_with_its_calls_scores_and_client(serve_process, tmp_path):
    folder = tmp_path / "records"
    server = serve_process(record_bundle(tmp_path), "--record", str(folder))
    play_echo(server.url, client="trl", step=7)
    play_echo(server.url, HOSTILE)
    assert server.terminate()[0] == 0
    first, second = list(record.read(folder))
    assert tuple(first) == record.FIELDS
    assert (first["task"], first["split"], first["bundle"], first["client"], first["step"]) == (
        "echo",
        "train",
        "fake",
        "trl",
        7,
    )
    assert (first["outcome"], first["reward"], first["steps"]) == ("scored", 1.0, [{"id": "answer-1", "turn": 0,
                                                                                     "score": 1.0}])  # fmt: skip
    (turn,) = first["turns"]
    assert turn["prompt"].startswith("Echo the word 'ping'") and turn["reply"] == "ping"
    echo, unknown = turn["calls"]
    assert (echo["tool"], json.loads(echo["args"]), echo["answer"], echo["error"]) == ("echo", {"text": "ping"}, "ping",
                                                                                       False)  # fmt: skip
    assert echo["seconds"] >= 0 and unknown["error"] is True and "unknown tool" in unknown["answer"]
    assert first["seconds"]["wall"] >= first["seconds"]["tools"] >= 0
    assert second["turns"][0]["calls"][0]["answer"] == HOSTILE  # kept as the env said it; the viewer escapes it
    assert first["rollout"] != second["rollout"] and first["attempt"] == 1 and first["earlier"] == []


def test_a_replayed_rollout_leaves_each_attempt_with_the_failures_before_it(serve_process, tmp_path):
    folder = tmp_path / "records"
    server = serve_process(record_bundle(tmp_path), "--record", str(folder))
    session = SyncSession(Shared(server.url, client="eval"))
    rollout = session.rollout("deploy-fails", attempts=3)
    with pytest.raises(RolloutFailed):
        run_attempts(rollout)
    session.close()
    server.terminate()
    (attempts,) = record.rollouts(record.read(folder))
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert {a["rollout"] for a in attempts} == {rollout.rollout.id}
    assert all(a["outcome"] == "failed" and a["failure"]["kind"] == "deploy" for a in attempts)
    assert [len(a["earlier"]) for a in attempts] == [0, 1, 2]
    assert attempts[2]["earlier"][0] == {**attempts[0]["failure"]} | {"message": attempts[2]["earlier"][0]["message"]}
    assert attempts[2]["earlier"][1]["stage"] == "deploy" and attempts[2]["earlier"][1]["fault"] == "env"


def run_attempts(rollout) -> None:
    while True:
        try:
            rollout.start()
            rollout.call("echo", {"text": "x"})
        except EpisodeLost:
            pass
        rollout.conclude()
        if rollout.lost is None:
            return
        if not rollout.rollout.can_replay():
            raise rollout.rollout._failed()


def test_probes_and_checks_are_not_recorded(serve_process, tmp_path):
    from agentenv.client.taskapi import tasks_and_tools

    folder = tmp_path / "records"
    server = serve_process(record_bundle(tmp_path), "--record", str(folder))
    tasks_and_tools(Shared(server.url), "train")
    server.terminate()
    assert list(record.read(folder)) == []


def test_a_killed_server_leaves_only_whole_lines(serve_process, tmp_path):
    folder = tmp_path / "records"
    server = serve_process(record_bundle(tmp_path), "--record", str(folder))
    stop = threading.Event()

    def player() -> None:
        while not stop.is_set():
            try:
                play_echo(server.url, "x" * 3000)
            except Exception:
                return

    players = [threading.Thread(target=player) for _ in range(4)]
    for p in players:
        p.start()
    wait_until(lambda: len(list(record.read(folder))) >= 20, 60)
    server.kill()  # SIGKILL while four clients play and the writer writes
    stop.set()
    for p in players:
        p.join()
    written = b"".join(p.read_bytes() for p in record.shards(folder))
    assert written.endswith(b"\n")
    lines = written.splitlines()
    assert len(lines) >= 20
    assert all(json.loads(line)["outcome"] == "scored" for line in lines)


def test_the_folder_bound_is_honoured_and_the_newest_records_kept(serve_process, tmp_path):
    folder = tmp_path / "records"
    bound = 256 * 1024
    server = serve_process(record_bundle(tmp_path), "--record", str(folder), "--record-max-bytes", str(bound))
    for n in range(30):
        play_echo(server.url, f"{n:03d}" + "y" * 16000)
    server.terminate()
    sizes = [p.stat().st_size for p in record.shards(folder)]
    assert sum(sizes) <= bound and len(sizes) > 1
    kept = [r["turns"][0]["calls"][0]["answer"][:3] for r in record.read(folder)]
    assert kept[-1] == "029" and "000" not in kept
    assert kept == sorted(kept)


def test_a_folder_that_cannot_be_written_never_fails_an_episode(serve_process, tmp_path):
    folder = tmp_path / "records"
    server = serve_process(record_bundle(tmp_path), "--record", str(folder))
    play_echo(server.url)
    shutil.rmtree(folder)
    folder.write_text("a file where the folder was\n")  # every write from here fails (ENOTDIR)
    for _ in range(2):
        session = SyncSession(Shared(server.url))
        rollout = session.rollout("echo")
        rollout.start()
        rollout.call("echo", {"text": "ping"})
        rollout.end_turn("ping")
        assert rollout.conclude().reward == 1.0
        session.close()
    code, err = server.terminate()
    assert code == 0 and "could not be written" in err and "episodes are not affected" in err


def test_a_full_disk_drops_records_and_the_next_shard_goes_on(tmp_path):
    from tests.support import FAKE, ServeProcess

    folder = tmp_path / "records"
    limit = 16 * 1024  # RLIMIT_FSIZE: a write past it fails with EFBIG, as on a full disk
    fsize = f"import resource, os, sys; resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
    fsize += "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    server = ServeProcess(FAKE, "--record", str(folder))
    server.args = [sys.executable, "-c", fsize, *server.args[1:]]
    server.start()
    try:
        for n in range(6):
            play_echo(server.url, f"{n}" + "w" * 5000)
    finally:
        code, err = server.terminate()
    assert code == 0 and "could not be written" in err
    kept = list(record.read(folder))
    assert 0 < len(kept) < 6 and all(r["reward"] == 1.0 for r in kept)


def test_the_recorder_bound_drops_a_record_larger_than_it_and_counts_it(tmp_path):
    recorder = Recorder(tmp_path / "r", max_bytes=64 * 1024)
    recorder.add({"n": 1, "text": "z" * 100_000})
    recorder.add({"n": 2})
    recorder.close()
    assert [r["n"] for r in record.read(tmp_path / "r")] == [2]
    assert (recorder.written, recorder.dropped) == (1, 1)


def test_an_unfinished_last_line_is_left_out_by_the_reader(tmp_path):
    shard = tmp_path / "records-20260101T000000-1-00001.jsonl"
    shard.write_bytes(b'{"n": 1}\n{"n": 2}\n{"n": 3, "te')
    assert [r["n"] for r in record.read(tmp_path)] == [1, 2]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--record", "/proc/records"], "--record /proc/records: cannot make the folder"),
        (["--record", "{tmp}/r", "--record-max-bytes", "100"], "--record-max-bytes 100: give at least 65536"),
    ],
)
def test_a_bad_record_option_is_named_with_its_fix(tmp_path, capsys, flags, named):
    from agentenv.cli import main

    from tests.support import FAKE

    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    assert main(["serve", str(FAKE), "--port", "0", *flags]) == 2
    assert named in capsys.readouterr().err


def record_bundle(tmp_path: Path) -> Path:
    from tests.support import FAKE

    return FAKE
