"""A tool whose argument schema is not valid JSON Schema refuses its bundle when it loads.

Before, such a bundle passed ``agentenv tasks`` and ``agentenv check`` and every episode that called
the tool failed. Each test writes a bad schema into a copy of the fake bundle's env (the python kind's
class, or the subprocess kind's program) and runs ``agentenv check`` on it.
"""

from __future__ import annotations

import pytest
from agentenv.cli import main

from tests.support import FAKE
from tests.support.bundles import copy_bundle, line_of, patch, refused

# the three mistakes the issue names, each with where it sits in the schema and the fix said
BAD = {
    "type-str": (
        '"properties": {"text": {"type": "str", "description": "What to echo."}}',
        "properties.text.type",
        'write "string"',
    ),
    "property-not-a-schema": (
        '"properties": {"text": "string"}',
        "properties.text",
        'each entry maps a name to a schema, e.g. {"text": {"type": "string"}}',
    ),
    "required-a-string": (
        '"properties": {"text": {"type": "string", "description": "What to echo."}},\n            "required": "text"',
        "required",
        'required is a list of property names, e.g. ["text"]',
    ),
}
ECHO_PYTHON = (
    '"properties": {"text": {"type": "string", "description": "What to echo."}},\n            "required": ["text"]'
)
ECHO_PROC = '"parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}'


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_python_env_tool_with_a_bad_schema_makes_check_fail_with_a_one_line_reason(tmp_path, capsys, case):
    fake = copy_bundle(tmp_path, FAKE)
    schema, path, fix = BAD[case]
    patch(fake / "fake_env.py", ECHO_PYTHON, schema)
    code = main(["check", str(fake)])
    err = capsys.readouterr().err
    assert code != 0
    reason = [line for line in err.splitlines() if "'echo'" in line]
    assert len(reason) == 1, err
    line = line_of(fake / "bundle.yaml", "  ok:")
    assert reason[0].strip().startswith(f"- bundle.yaml:{line}: envs.ok: tool 'echo' of fake_env:FakeEnv")
    assert f"invalid JSON Schema for its arguments, at {path}: " in reason[0]
    assert reason[0].endswith(fix)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_subprocess_env_tool_with_a_bad_schema_refuses_the_bundle(tmp_path, case):
    fake = copy_bundle(tmp_path, FAKE)
    schema, path, fix = BAD[case]
    proc_schema = "{" + schema.replace("\n            ", " ").replace(', "description": "What to echo."', "") + "}"
    patch(fake / "fake_proc.py", ECHO_PROC, f'"parameters": {{"type": "object", {proc_schema[1:]}')
    problems = [p for p in refused(fake).problems if p.field == "envs.proc"]
    assert len(problems) == 1, problems
    assert problems[0].line == line_of(fake / "bundle.yaml", "  proc:")
    assert "tool 'echo' of python fake_proc.py has an invalid JSON Schema for its arguments, " in problems[0].message
    assert f"at {path}: " in problems[0].message and problems[0].message.endswith(fix)


def test_a_tool_schema_that_is_not_an_object_schema_is_refused(tmp_path):
    fake = copy_bundle(tmp_path, FAKE)
    patch(fake / "fake_env.py", '@tool({"type": "object", "properties": {}, "additionalProperties": False})\n    async '
          'def noop', '@tool({"type": "array"})\n    async def noop')  # fmt: skip
    problems = [p for p in refused(fake).problems if "'noop'" in p.message]
    assert len(problems) == 1
    assert "at type: 'array'; a tool's arguments are a JSON object" in problems[0].message


def test_every_example_and_fixture_bundle_has_valid_tool_schemas(capsys):
    from tests.support import ARITH, INBOX

    for bundle in (FAKE, INBOX, ARITH):
        assert main(["tasks", str(bundle)]) == 0, capsys.readouterr().err
