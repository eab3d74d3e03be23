"""Hypothesis strategies for bundle files: bundle.yaml and tasks built field by field from the bundle schema
(``agentenv.specs``: every model's fields, each drawn good or bent out of shape), dataset rows through a template,
YAML's odd corners (anchors and aliases, tags, merge keys, documents, nesting, huge numbers), and raw bytes.

A fuzzed bundle runs no program and imports no module of its choosing: env targets and checks name the module this
campaign writes into each bundle (``fuzzenv``) or a name no module has (``zzfuzz_...``), and subprocess envs run the
campaign's own program. Loading a bundle may run its code; here only its data is hostile.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from agentenv.specs import BundleFile, DeployStep, EndpointSpec, EnvSpec, Task, Toolset, Turn, VerifierSpec
from hypothesis import strategies as st

ENV_MODULE = '''from agentenv import Env, tool


class Calc(Env):
    @tool({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})
    def add(self, a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @tool({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    def echo(self, text: str) -> str:
        """Say it back."""
        return text


def check(env, reply):
    return 1.0 if reply else 0.0
'''
# a subprocess env (agentenv.engine.envkinds' JSON-lines protocol): one tool, listed when asked (agentenv asks at load)
PROC_PROGRAM = """import json, sys
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "tools":
        result = [{"name": "ping", "description": "Ping.", "parameters": {"type": "object", "properties": {}}}]
    else:
        result = "pong"
    print(json.dumps({"id": request["id"], "ok": True, "result": result}), flush=True)
"""

# text a bundle's author (or its data) might write where a name or a prompt goes
ODD_TEXT = [
    "",
    " ",
    ".",
    "..",
    "../x",
    "/etc/passwd",
    "a/b",
    "q-001",
    "x" * 200,
    "\x1b[31mred",
    "two\nlines",
    "tab\there",
    "{",
    "}",
    "{x}",
    "{{x}}",
    "{_row}",
    "nul\x00",
    "\u202eevil",
    "ℌ𝔢𝔩𝔩𝔬",
    "-flag",
    "*",
    "&a",
    "!!str",
]
text = st.text(max_size=30) | st.sampled_from(ODD_TEXT)
names = st.sampled_from(["calc", "proc", "q-1", "train", "eval", "a.b_c-9"]) | text

junk: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


def bent(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: mostly a good one, sometimes anything at all."""
    return st.one_of(good, good, good, junk)


def fields(model: Any, good: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A mapping of ``model``'s fields (each present or not, good or bent) and now and then one it lacks."""
    known = {name: bent(good.get(name, junk)) for name in model.model_fields if name != "name" or name in good}
    unknown = st.dictionaries(st.sampled_from(["nmae", "turn", "tasks_", "x"]) | text, junk, max_size=1)
    return st.builds(lambda d, extra: {**extra, **d}, st.fixed_dictionaries({}, optional=known), unknown)


targets = st.sampled_from(["fuzzenv:Calc", "fuzzenv:check", "fuzzenv:Nope", "fuzzenv"]) | text.map(
    lambda t: f"zzfuzz_{t}:X"
)
commands = st.sampled_from([["python", "fuzzproc.py"], ["zzfuzz-no-such-program"], [], ["python"]]) | st.lists(
    text.map(lambda t: f"zzfuzz-{t}"), max_size=3
)
env_spec = fields(
    EnvSpec,
    {
        "kind": st.sampled_from(["python", "subprocess", "docker", "zzfuzz"]),
        "target": targets,
        "command": commands,
        "config": st.dictionaries(text, junk, max_size=3),
        "roles": st.dictionaries(names, st.lists(st.sampled_from(["add", "echo", "ping", "nope"]), max_size=3)),
    },
)
toolset = fields(
    Toolset,
    {
        "envs": st.lists(st.sampled_from(["calc", "proc", "nope"]) | text, max_size=3),
        "role": st.sampled_from(["agent", "assistant"]) | text,
        "deny": st.dictionaries(st.sampled_from(["calc", "proc"]), st.lists(st.sampled_from(["add", "echo"]))),
        "allow": st.dictionaries(st.sampled_from(["calc", "proc"]), st.lists(st.sampled_from(["add", "echo"]))),
        "bash": st.booleans(),
    },
)
endpoint = fields(
    EndpointSpec,
    {
        "base_url": st.sampled_from(["http://127.0.0.1:9/v1", "ftp://x", ""]) | text,
        "model": text,
        "key_var": st.sampled_from(["ZZFUZZ_KEY"]) | text,
        "dialect": st.sampled_from(["openai", "anthropic", "x"]),
    },
)
verifier = fields(
    VerifierSpec,
    {"id": names, "kind": st.sampled_from(["regex", "exact", "contains", "python", "judge", "zzfuzz"]) | text},
).flatmap(
    lambda spec: st.fixed_dictionaries(
        {},
        optional={
            "pattern": bent(text | st.sampled_from(["(a+)+$", "(?i)dana", "[", "(?P<x>", "\\"])),
            "answer": bent(text),
            "check": bent(targets),
            "rubric": bent(text),
            "endpoint": bent(endpoint | st.just("policy")),
        },
    ).map(lambda params: {**params, **spec})
)
turn = fields(Turn, {"prompt": text, "verifiers": st.lists(verifier, max_size=3)})
task = fields(
    Task,
    {
        "id": names,
        "split": st.sampled_from(["train", "eval", "test"]) | text,
        "system": text,
        "toolset": toolset,
        "turns": st.lists(turn, max_size=3),
        "reward": st.sampled_from(["mean", "min", "last", "weighted", "zzfuzz"])
        | st.fixed_dictionaries(
            {"rule": st.sampled_from(["weighted", "mean"])}, optional={"weights": st.dictionaries(names, junk)}
        ),
        "solution": st.lists(st.fixed_dictionaries({}, optional={"calls": junk, "reply": text}), max_size=3),
        "deploy": st.lists(
            fields(
                DeployStep,
                {"role": st.sampled_from(["solver", "user", "judge", "x"]), "agent": names, "endpoint": endpoint},
            ),
            max_size=2,
        ),
        "metadata": st.dictionaries(text, junk, max_size=3),
    },
)
dataset_source = st.fixed_dictionaries(
    {"source": st.just("dataset"), "path": st.sampled_from(["data/*.jsonl", "data/rows.jsonl", "nope/*.jsonl"])},
    optional={"task": bent(task), "zzfuzz": junk},
)
bundle_file = fields(
    BundleFile,
    {
        "name": text,
        "description": text,
        "envs": st.dictionaries(st.sampled_from(["calc", "proc"]) | text, env_spec, max_size=3),
        "agents": st.dictionaries(
            names,
            st.fixed_dictionaries({"kind": st.sampled_from(["process", "zzfuzz"])}, optional={"command": commands}),
        ),
        "tasks": st.sampled_from(["tasks/*.yaml", ["tasks/*.yaml", "more/*.yml"], "nothing/*.yaml"]) | dataset_source,
        "defaults": st.dictionaries(st.sampled_from(sorted(Task.model_fields)) | text, junk, max_size=3),
        "splits": st.lists(st.sampled_from(["train", "eval", "test"]) | text, max_size=3),
    },
)
rows = st.lists(
    st.dictionaries(st.sampled_from(["id", "split", "turns", "prompt", "answer", "q"]) | text, junk, max_size=5),
    max_size=6,
)


def dump(value: Any) -> str:
    """``value`` as YAML, or as JSON (which YAML reads too) where PyYAML cannot write it (a lone surrogate)."""
    try:
        return yaml.safe_dump(value, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return json.dumps(value, ensure_ascii=True)


# YAML that asks the reader for more than a value: aliases (fanned out, chained, in loops), tags, merge keys, several
# documents, deep nesting, numbers past what int() reads, a BOM, tabs
def _alias_chain(depth: int, fanout: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['x'] * fanout)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fanout)}]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


yaml_oddities = st.one_of(
    st.builds(_alias_chain, st.integers(1, 12), st.integers(1, 12)),
    st.sampled_from(
        [
            "a: &a [*a]\n",
            "a: &a {b: *a}\n",
            "defaults: &d {metadata: {again: *d}}\n",
            "x: *nowhere\n",
            "a: &a 1\na: &a 2\n",
            "base: &b {split: train}\nmerged: {<<: *b, id: m}\n",
            "x: !!python/object/apply:os.system ['echo hacked']\n",
            "x: !!python/name:os.system\n",
            "x: !!binary aGVsbG8=\n",
            "x: !!set {a, b}\n",
            "x: !!timestamp 2001-12-14\nwhen: 2024-01-01\n",
            "x: !!float nan\ny: .inf\nz: -.inf\n",
            "x: !custom 1\n",
            "x: 1\n---\ny: 2\n",
            "---\n...\n---\n",
            "\ufeffname: bom\n",
            "name:\tx\n",
            "name: x\r\nsplits: [a]\r\n",
            "? [a, b]\n: c\n",
            "{[1]: x}\n",
            "x: 0x" + "f" * 5000 + "\n",
            "x: " + "9" * 5000 + "\n",
            "x: 1e99999\n",
            "x: 0o777\ny: 0b101\nz: 1_000\n",
            "[" * 2000 + "]" * 2000 + "\n",
            "x:\n" + "".join("  " * i + "- \n" for i in range(1, 300)),
            "x: '" + "a" * 100_000 + "'\n",
            "- - - - - - - - - - - - - - - -\n",
            "name: x\nname: y\n",
            "%YAML 1.1\n---\nname: x\n",
            "%TAG ! tag:zz,2024:\n---\nname: !x y\n",
        ]
    ),
)
raw_bytes = st.binary(max_size=400) | st.sampled_from(
    [
        b"\xff\xfe\x00n\x00a",
        b"name: \xc3\x28\n",
        b"\x00" * 10,
        b"",
        b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",  # past json's recursion limit
        b'[{"q": 1}, ' + b"[" * 100_000 + b"]" * 100_000 + b"]\n",
        b'{"q": NaN, "a": Infinity}\n{"q": 1e400}\n',
        b'{"q": ' + b"9" * 5000 + b"}\n",  # past int()'s digits
    ]
)


# -- bundles that should load: every field good and consistent, so that what loading does after its checks (the
# toolset keys, the verifiers' builds, the Task API's rows) is fuzzed too; odd values go where anything may
PATTERNS = ["(?i)hello", r"\b4,?200\b", "^$", "[a-z]+", "(a|b)*c", "ℌ"]
prompt_text = text.filter(lambda t: bool(t.strip()))


@st.composite
def good_verifier(draw: Any, step: str) -> dict[str, Any]:
    kind = draw(st.sampled_from(["regex", "exact", "contains", "python", "judge"]))
    params = {
        "regex": {"pattern": draw(st.sampled_from(PATTERNS))},
        "exact": {"answer": draw(text | st.integers() | st.floats(allow_nan=False))},
        "contains": {"answer": draw(text)},
        "python": {"check": "fuzzenv:check"},
        "judge": {"rubric": draw(prompt_text), "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
    }[kind]
    return {"id": step, "kind": kind, **params}


@st.composite
def good_task(draw: Any, task_id: str, splits: list[str]) -> dict[str, Any]:
    turns = []
    for t in range(draw(st.integers(1, 3))):
        verifiers = [draw(good_verifier(f"s{t}-{v}")) for v in range(draw(st.integers(0, 2)))]
        turns.append({"prompt": draw(prompt_text), "verifiers": verifiers})
    envs = draw(st.sampled_from([[], ["calc"], ["proc"], ["calc", "proc"]]))
    toolset: dict[str, Any] = {"envs": envs, "bash": draw(st.booleans())}
    if "calc" in envs and draw(st.booleans()):
        toolset["deny"] = {"calc": [draw(st.sampled_from(["add", "echo"]))]}
    out: dict[str, Any] = {"id": task_id, "split": draw(st.sampled_from(splits)), "toolset": toolset, "turns": turns}
    optional = {
        "system": text,
        "reward": st.sampled_from(["mean", "min", "last", {"rule": "mean"}]),
        "metadata": st.dictionaries(text, junk, max_size=4),
        "solution": st.just([{"calls": [], "reply": "x"} for _ in turns]),
    }
    out.update(draw(st.fixed_dictionaries({}, optional=optional)))
    return out


@st.composite
def good_bundle(draw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """bundle.yaml and its tasks, all good: such a bundle loads."""
    splits = draw(st.sampled_from([["train"], ["train", "eval"], ["a.b_c-9", "test"]]))
    manifest: dict[str, Any] = {
        "name": draw(prompt_text),
        "envs": {
            "calc": {"kind": "python", "target": "fuzzenv:Calc", "config": draw(st.dictionaries(text, junk))},
            "proc": {"kind": "subprocess", "command": ["python", "fuzzproc.py"]},
        },
        "tasks": "tasks/*.yaml",
    }
    if draw(st.booleans()):
        manifest["splits"] = splits
    if draw(st.booleans()):
        manifest["description"] = draw(text)
    ids = draw(
        st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True), min_size=1, max_size=4, unique=True)
    )
    return manifest, [draw(good_task(task_id, splits)) for task_id in ids]


@st.composite
def good_rows(draw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A dataset template and rows of values of any kind where its columns go (most rows load; some are refused)."""
    template = {
        "id": draw(st.sampled_from(["r-{_row}", "{_file}-{_row}", "{name}"])),
        "split": draw(st.sampled_from(["train", "{split}"])),
        "system": draw(st.sampled_from(["", "Answer {q}.", "{{literal}} braces"])),
        "toolset": {"envs": ["calc"]},
        "turns": [{"prompt": "{q}", "verifiers": [{"id": "a", "kind": "exact", "answer": "{a}"}]}],
    }
    cell = junk | prompt_text | st.integers()
    row = st.fixed_dictionaries({"q": prompt_text, "a": cell}, optional={"name": cell, "split": cell, "x": junk})
    return template, draw(st.lists(row, max_size=6))


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*here, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*here, i))
    return out


@st.composite
def one_field_bent(draw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A good bundle with one value anywhere in it replaced by anything, or its key dropped: the checks that come
    after the first ones see a bundle that is nearly right."""
    manifest, tasks = draw(good_bundle())
    whole: dict[str, Any] = {"manifest": manifest, "tasks": tasks}
    path = draw(st.sampled_from([p for p in _paths(whole) if len(p) >= 2]))  # within bundle.yaml or a task list
    parent = whole
    for part in path[:-1]:
        parent = parent[part]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(junk | text | st.sampled_from(ODD_TEXT))
    return whole["manifest"], whole["tasks"]
