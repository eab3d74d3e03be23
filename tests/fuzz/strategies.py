"""Hypothesis strategies for what a client may send: ``/ws`` frames built from ``agentenv.wire``'s pydantic models
(each field drawn from its type), the same frames bent out of shape, raw text and bytes, and Task API requests built
from OpenEnv's request models."""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Any

from agentenv import wire
from hypothesis import strategies as st
from pydantic import BaseModel

# the fake bundle's tasks and tools a fuzzer may touch: none that blocks a thread for long (hang, sleep_sync, stall),
# allocates what it is told (big), starts programs (spawn) or runs a shell (the bash task)
TASKS = ["echo", "proc-echo", "two-turn", "no-add", "broken-verifier", "deploy-fails", "weighted", "eval-echo"]
TOOLS = ["echo", "add", "noop", "noop_sync", "nested", "fail", "crash", "die", "end_turn", "bash", ""]
SPLITS = ["train", "eval", "test", "nope", ""]

# JSON values: what a JSON parser may hand on (big and small numbers, unicode, nesting)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


def _model(model: type[BaseModel], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A frame's data as ``model`` declares it: each field drawn from its type (``fields`` for those whose type
    Hypothesis cannot draw, such as ``Any``), optional ones sometimes left out, and sometimes an unknown one."""
    drawn = {}
    for name, info in model.model_fields.items():
        strategy = fields.get(name)
        drawn[name] = _of_type(info.annotation) if strategy is None else strategy
    required = {n: s for n, s in drawn.items() if model.model_fields[n].is_required()}
    optional = {n: s for n, s in drawn.items() if n not in required}
    extra = st.dictionaries(st.text(max_size=8), json_values, max_size=1)
    return st.builds(lambda d, x: {**x, **d}, st.fixed_dictionaries(required, optional=optional), extra)


def _of_type(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of a field's type as JSON would carry them: a nested model as its dict (``Reset.attempt``), never as
    an instance (which json.dumps refuses, and which Hypothesis cannot build past a ``default_factory``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return st.one_of(*(_of_type(arg) for arg in typing.get_args(annotation)))
    return st.from_type(annotation)


def _reset_data() -> st.SearchStrategy[dict[str, Any]]:
    known = st.fixed_dictionaries(
        {"task_id": st.sampled_from(TASKS)}, optional={"protocol": st.sampled_from([wire.PROTOCOL, 1, 3])}
    ).map(lambda d: {"protocol": wire.PROTOCOL, **d})
    by_index = st.fixed_dictionaries(
        {"split": st.sampled_from(SPLITS), "index": st.integers(-3, 20), "protocol": st.just(wire.PROTOCOL)}
    )
    return st.one_of(known, by_index, _model(wire.Reset))


def _step_data() -> st.SearchStrategy[dict[str, Any]]:
    args = st.dictionaries(st.text(max_size=8), json_values)
    call = st.fixed_dictionaries({"op": st.just("call"), "tool": st.sampled_from(TOOLS), "args": args})
    echo = st.builds(lambda t: {"op": "call", "tool": "echo", "args": {"text": t}}, st.text(max_size=200))
    end = st.builds(lambda r: {"op": "end_turn", "reply": r}, st.text(max_size=200))
    other = st.sampled_from([{"op": "result"}, {"op": "finish"}])
    return st.one_of(call, echo, end, other, _model(wire.Action, args=args))


def structured_frames() -> st.SearchStrategy[dict[str, Any]]:
    """Frames of agentenv's protocol: valid ones from the wire models, and ones with fields of the wrong kind."""
    reset = st.builds(lambda d: {"type": "reset", "data": d}, _reset_data())
    step = st.builds(lambda d: {"type": "step", "data": d}, _step_data())
    state = st.just({"type": "state"})
    wrong = st.fixed_dictionaries(
        {"type": st.sampled_from(["reset", "step", "state", "mcp", "dance", "", "close"]), "data": json_values}
    )
    return st.one_of(reset, reset, step, step, step, state, wrong)


# numbers standard JSON lacks, and what Python's parser refuses, spliced into frames as text
_ODD_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e400", "9" * 400 + ".5", "7" * 5000, "-" + "1" * 4301]


_ODD_PLACES = [
    '{"type": "step", "data": {"op": "call", "tool": "echo", "args": {"x": %s}}}',
    '{"type": "step", "data": {"op": "call", "tool": "add", "args": {"a": %s, "b": [1, {"c": %s}]}}}',
    '{"type": "reset", "data": {"split": "train", "index": %s, "protocol": 2}}',
    '{"type": "state", "n": %s}',
    "[%s]",
]


def _with_odd_number(place: str, number: str) -> str:
    return place.replace("%s", number)


def text_frames() -> st.SearchStrategy[str]:
    """Text frames: the structured ones as JSON, bent (cut short, nested deep, odd numbers), and any text."""
    as_json = structured_frames().map(json.dumps)
    cut = st.builds(lambda t, n: t[: max(1, len(t) - n)], as_json, st.integers(1, 20))
    deep = st.builds(
        lambda n, open_: open_ * n + ("]" if open_ == "[" else "}") * n, st.integers(90, 3000), st.sampled_from(["["])
    )
    odd = st.builds(_with_odd_number, st.sampled_from(_ODD_PLACES), st.sampled_from(_ODD_NUMBERS))
    values = json_values.map(json.dumps)
    return st.one_of(as_json, as_json, as_json, cut, deep, odd, values, st.text(max_size=300))


def frames() -> st.SearchStrategy[tuple[str, str | bytes]]:
    """One frame, as (kind, payload): ``text`` or ``binary``."""
    return st.one_of(
        st.tuples(st.just("text"), text_frames()),
        st.tuples(st.just("binary"), st.binary(max_size=300)),
    )


def is_close(payload: str | bytes) -> bool:
    """Whether a frame may end the session (OpenEnv's ``close``, which ends it when it validates)."""
    if not isinstance(payload, str):
        return False
    try:
        frame = json.loads(payload, parse_constant=lambda c: math.nan)
    except (ValueError, RecursionError):
        return False
    return isinstance(frame, dict) and frame.get("type") == "close"


# -- the Task API ---------------------------------------------------------------------------------------------


def _openenv_requests() -> list[type[Any]]:
    from agentenv_server import import_openenv

    import_openenv()
    from openenv.core.env_server import types

    return [
        getattr(types, n)
        for n in ("ListTasksRequest", "NumTasksRequest", "GetTaskRequest", "GetTaskRangeRequest")
        if hasattr(types, n)
    ]


PATHS = [
    "/health",
    "/agentenv",
    "/schema",
    "/metadata",
    "/list_environments",
    "/fake/splits",
    "/fake/tasks",
    "/fake/num_tasks",
    "/fake/task",
    "/fake/task_range",
    "/nope/tasks",
    "/reset",
    "/step",
    "/state",
    "/mcp",
    "/docs",
    "/openapi.json",
    "/ws",
    "/",
    "/fake/../health",
    "/%00",
    "//fake/tasks",
]


def bodies() -> st.SearchStrategy[bytes]:
    """Request bodies: OpenEnv's request models (valid and not), any JSON, raw bytes."""
    models = [_model(m) for m in _openenv_requests()]
    shaped = st.one_of(*models).map(lambda d: json.dumps(d).encode()) if models else st.nothing()
    splits = st.builds(
        lambda s, i: json.dumps({"split": s, "index": i, "start": i, "stop": i + 3}).encode(),
        st.sampled_from(SPLITS),
        st.integers(-(10**6), 10**6),
    )
    return st.one_of(shaped, splits, json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200))


def requests() -> st.SearchStrategy[dict[str, Any]]:
    """A Task API request: method, path, headers, body."""
    header_names = st.sampled_from(["content-type", "x-junk", "accept", "content-encoding", "transfer-encoding"])
    header_values = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
    return st.fixed_dictionaries(
        {
            "method": st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]),
            "path": st.one_of(
                st.sampled_from(PATHS),
                st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30).map(lambda p: "/" + p),
            ),
            "headers": st.dictionaries(header_names, header_values, max_size=3),
            "body": bodies(),
        }
    )
