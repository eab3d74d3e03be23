"""Write data/problems.jsonl: seeded arithmetic word problems, one JSON object per line.

Columns: id, split (train or eval), question, expression (what the reference solution evaluates) and
answer (an integer). Run it again to get the same file: python generate.py [--rows N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).parent
NAMES = ["Ada", "Bo", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun"]
THINGS = ["apples", "stamps", "marbles", "books", "shells", "cards", "coins", "pencils"]


def problem(rng: random.Random) -> tuple[str, str, int]:
    """One word problem: its text, the expression that solves it, the answer."""
    name, other = rng.sample(NAMES, 2)
    thing = rng.choice(THINGS)
    a, b = rng.randint(3, 60), rng.randint(2, 30)
    kind = rng.choice(["more", "gives", "boxes", "share", "both"])
    if kind == "more":
        return f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?", f"{a} + {b}", a + b
    if kind == "gives":
        a += b
        text = f"{name} has {a} {thing} and gives {b} of them to {other}. How many {thing} does {name} keep?"
        return text, f"{a} - {b}", a - b
    if kind == "boxes":
        n = rng.randint(2, 9)
        return f"{name} fills {n} boxes with {b} {thing} each. How many {thing} is that?", f"{n} * {b}", n * b
    if kind == "share":
        n = rng.randint(2, 6)
        text = f"{name} shares {n * b} {thing} equally among {n} friends. How many {thing} does each friend get?"
        return text, f"{n * b} / {n}", b
    n = rng.randint(2, 5)
    text = f"{name} has {a} {thing}. {other} has {n} times as many. How many {thing} do they have together?"
    return text, f"{a} + {n} * {a}", a + n * a


def rows(count: int, seed: int = 17) -> list[dict[str, object]]:
    """The dataset's rows: the first nine in ten train, the tenth eval."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        question, expression, answer = problem(rng)
        split = "eval" if i % 10 == 9 else "train"
        out.append({"id": i, "split": split, "question": question, "expression": expression, "answer": answer})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300, help="how many rows (default 300)")
    parser.add_argument("--out", type=Path, default=HERE / "data" / "problems.jsonl", help="the JSONL file to write")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as file:
        for row in rows(args.rows):
            file.write(json.dumps(row) + "\n")
    print(f"wrote {args.rows} rows to {args.out}")


if __name__ == "__main__":
    main()
