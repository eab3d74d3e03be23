"""Writes tasks/train.yaml and tasks/eval.yaml: the arith bundle's tasks and their reference solutions.

Seeded, so running it again writes the same files: ``python examples/bundles/arith/generate.py``.
Single-turn tasks (``one-NNN``) ask for a sum, a difference or a product of two numbers, in varied
wording; two-turn tasks (``two-NNN``) ask for one, then build on its result in the second turn. Eval
tasks use number pairs no train task uses, so the eval split measures whether a model learned to use
the calculator, not the answers.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

SEED = 7
TRAIN = {"one": 150, "two": 30}
EVAL = {"one": 24, "two": 8}

# the calculator tool, how to compute it, and ways to ask for it (the first number is always the tool's a)
OPS: dict[str, tuple[Any, list[str]]] = {
    "add": (
        lambda a, b: a + b,
        ["What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a} + {b}.", "What is the sum of {a} and {b}?"],
    ),
    "subtract": (
        lambda a, b: a - b,
        ["What is {a} minus {b}?", "Compute {a} - {b}.", "What is {a} take away {b}?", "Subtract: {a} - {b}."],
    ),
    "multiply": (
        lambda a, b: a * b,
        ["What is {a} times {b}?", "Multiply {a} by {b}.", "Compute {a} * {b}.", "What is the product of {a} and {b}?"],
    ),
}
# the second turn of a two-turn task: the previous result is the tool's a
THEN: dict[str, list[str]] = {
    "add": ["Now add {c} to that result.", "Add {c} to that.", "Then add {c} to the result."],
    "subtract": ["Now subtract {c} from that result.", "Subtract {c} from that.", "Then take away {c}."],
}


def operands(rng: random.Random, op: str) -> tuple[int, int]:
    """Two numbers for ``op``: a two-digit first one; a difference is never negative."""
    a, b = rng.randint(10, 99), rng.randint(2, 40)
    if op == "subtract" and b > a:
        a, b = b, a
    return a, b


def verifier(step: int, answer: int) -> dict[str, Any]:
    return {"id": f"answer-{step}", "kind": "exact", "answer": str(answer)}


def one_turn(rng: random.Random, number: int, split: str, op: str, a: int, b: int) -> dict[str, Any]:
    compute, texts = OPS[op]
    answer = compute(a, b)
    return {
        "id": f"one-{number:03d}",
        "split": split,
        "turns": [{"prompt": rng.choice(texts).format(a=a, b=b), "verifiers": [verifier(1, answer)]}],
        "solution": [{"calls": [{"tool": op, "args": {"a": a, "b": b}}], "reply": str(answer)}],
    }


def two_turn(rng: random.Random, number: int, split: str, op: str, a: int, b: int) -> dict[str, Any]:
    compute, texts = OPS[op]
    first = compute(a, b)
    then = rng.choice(list(THEN))
    c = rng.randint(2, min(40, first) if then == "subtract" else 40)
    second = OPS[then][0](first, c)
    return {
        "id": f"two-{number:03d}",
        "split": split,
        "turns": [
            {"prompt": rng.choice(texts).format(a=a, b=b), "verifiers": [verifier(1, first)]},
            {"prompt": rng.choice(THEN[then]).format(c=c), "verifiers": [verifier(2, second)]},
        ],
        "reward": "mean",
        "solution": [
            {"calls": [{"tool": op, "args": {"a": a, "b": b}}], "reply": str(first)},
            {"calls": [{"tool": then, "args": {"a": first, "b": c}}], "reply": str(second)},
        ],
    }


def generate(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """The tasks of each split, numbered in order across splits (train first)."""
    rng = random.Random(seed)
    used: set[tuple[int, int]] = set()  # number pairs already asked, so no eval task repeats a train task

    def fresh(op: str) -> tuple[int, int]:
        while True:
            a, b = operands(rng, op)
            if (a, b) not in used:
                used.add((a, b))
                return a, b

    numbers = {"one": 0, "two": 0}
    splits: dict[str, list[dict[str, Any]]] = {}
    for split, counts in (("train", TRAIN), ("eval", EVAL)):
        tasks = []
        for kind, make, ops in (("one", one_turn, list(OPS)), ("two", two_turn, ["add", "multiply"])):
            for i in range(counts[kind]):
                numbers[kind] += 1
                op = ops[i % len(ops)]
                tasks.append(make(rng, numbers[kind], split, op, *fresh(op)))
        splits[split] = tasks
    return splits


def main() -> None:
    out = Path(__file__).resolve().parent / "tasks"
    out.mkdir(exist_ok=True)
    for split, tasks in generate().items():
        header = f"# {len(tasks)} {split} tasks, written by generate.py (seed {SEED}); edit that, not this file.\n"
        text = yaml.safe_dump(tasks, sort_keys=False, width=120, default_flow_style=None)
        (out / f"{split}.yaml").write_text(header + text, encoding="utf-8")


if __name__ == "__main__":
    main()
