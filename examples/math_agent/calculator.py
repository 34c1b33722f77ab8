"""A safe arithmetic calculator, exposed to the Strands agent as the ``calculator`` tool.

Expressions are parsed with :mod:`ast` and evaluated node by node over exact fractions: only
numbers, ``+ - * / // % **`` (``^`` is read as power, ``x``/``×``/``÷`` are accepted), parentheses
and ``abs/round/min/max`` are allowed. Nothing is ever passed to ``eval``; sizes are capped so a
model cannot make the agent hang on ``9**9**9``.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from fractions import Fraction

from strands import tool

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = Fraction(10) ** 30

_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Fraction], Fraction]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Fraction]] = {
    "abs": lambda x: abs(x),
    "round": lambda x, digits=Fraction(0): Fraction(round(x, int(digits))),
    "min": min,
    "max": max,
}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


class CalculatorError(ValueError):
    """An expression the calculator refuses, with a message the model can act on."""


def _normalise(expression: str) -> str:
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("^", "**")
    text = re.sub(r"(?<=[\d)\s])x(?=[\s\d(])", "*", text)
    return _THOUSANDS.sub("", text)


def evaluate(expression: str) -> Fraction:
    """Evaluate an arithmetic expression exactly.

    :param expression: e.g. ``"(1,250 - 380) / 2"``.
    :raises CalculatorError: on syntax that is not plain arithmetic, division by zero, or oversized values.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters; split it up")
    try:
        tree = ast.parse(_normalise(expression), mode="eval")
    except SyntaxError as err:
        raise CalculatorError(f"cannot parse {expression!r} as arithmetic ({err.msg})") from None
    return _check_size(_eval_node(tree.body))


def _eval_node(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_node(node.operand))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _power(_eval_node(node.left), _eval_node(node.right))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if right == 0 and not isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
            raise CalculatorError("division by zero")
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords or not node.args:
            raise CalculatorError(f"{node.func.id}() takes positional numbers only")
        try:
            return _FUNCTIONS[node.func.id](*(_eval_node(arg) for arg in node.args))
        except TypeError as err:
            raise CalculatorError(f"bad arguments to {node.func.id}(): {err}") from None
    allowed = "numbers, + - * / // % ** ( ) and abs/round/min/max"
    raise CalculatorError(f"unsupported element {ast.unparse(node)!r}: only {allowed} are allowed")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    if exponent.denominator == 1:
        return _check_size(base ** int(exponent))
    if base < 0:
        raise CalculatorError("fractional power of a negative number")
    return _check_size(Fraction(float(base) ** float(exponent)))


def _check_size(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("result is too large (more than 30 digits)")
    return value


def format_number(value: Fraction) -> str:
    """Render a result the way a person writes it: ``42``, ``-3.5``, ``0.3333333333``.

    :param value: an exact result.
    """
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return text or "0"


TOOL_DESCRIPTION = (
    "Evaluate an arithmetic expression and return the result. "
    "Supports + - * / // % ** (or ^), parentheses and abs, round, min, max."
)


@tool(description=TOOL_DESCRIPTION)
def calculator(expression: str) -> str:
    """The Strands tool: evaluate ``expression`` and return the formatted result.

    :param expression: the arithmetic to compute, for example "(45 - 17) + 9".
    """
    return format_number(evaluate(expression))
