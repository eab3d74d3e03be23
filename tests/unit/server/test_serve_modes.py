"""``agentenv serve --ray`` and ``--ors`` refuse the options they do not honour, naming each, before anything starts."""

from __future__ import annotations

import pytest
from agentenv.cli import main

from tests.support import INBOX


@pytest.mark.parametrize(
    ("mode", "flags", "named"),
    [
        ("--ray", ["--record", "{tmp}/records"], "--record: not honoured with --ray"),
        (
            "--ray",
            ["--max-message-bytes", "1000000", "--allow-origin", "https://a.example"],
            "--allow-origin, --max-message-bytes",
        ),
        (
            "--ors",
            ["--record", "{tmp}/records", "--idle-timeout", "5"],
            "--idle-timeout, --record: not honoured with --ors",
        ),
        ("--ors", ["--warm", "2"], "--warm: not honoured with --ors"),
    ],
)
def test_an_option_the_mode_does_not_honour_is_refused_by_name(capsys, tmp_path, mode, flags, named):
    # before, each was dropped in silence: --ray --record recorded nothing and said nothing
    code = main(["serve", str(INBOX), mode, *(f.format(tmp=tmp_path) for f in flags)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert named in err and f"serve without {mode}" in err
    assert not (tmp_path / "records").exists()  # nothing was made of what was refused
    assert "agentenv: serving" not in err
