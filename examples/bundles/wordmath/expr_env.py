"""An expression evaluator: numbers, + - * / and parentheses, nothing else (no names, no calls)."""

from __future__ import annotations

import ast
import operator

from agentenv import Env, ToolError, tool

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        right = _value(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ToolError("division by zero")
        return _OPERATORS[type(node.op)](_value(node.left), right)
    raise ToolError(f"only numbers, + - * / and parentheses are allowed, not {ast.unparse(node)!r}")


class Evaluator(Env):
    """One tool: evaluate an arithmetic expression."""

    @tool(
        {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. (12 + 7) * 3"}},
            "required": ["expression"],
            "additionalProperties": False,
        }
    )
    def evaluate(self, expression: str) -> int | float:
        """Evaluate an arithmetic expression of numbers, + - * / and parentheses."""
        try:
            tree = ast.parse(expression, mode="eval")
        except SyntaxError:
            raise ToolError(f"{expression!r} is not an arithmetic expression") from None
        except RecursionError:  # a policy's expression nested past the parser's depth is its mistake, not a bug
            raise ToolError("the expression is nested too deeply; write it in smaller steps") from None
        try:
            result = _value(tree.body)
            return int(result) if float(result).is_integer() else round(result, 6)
        except RecursionError:
            raise ToolError("the expression is too long; write it in smaller steps") from None
        except OverflowError:
            raise ToolError("the result is too large for this calculator") from None
