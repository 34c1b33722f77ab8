"""Unit tests of the math agent's calculator tool and answer grading (examples/math_agent/)."""

from __future__ import annotations

from fractions import Fraction

import calculator
import grading
import pytest
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("(45 - 17) + 9", "37"),
        ("1,250 - 380", "870"),
        ("60 * 3.5", "210"),
        ("96 / 4 + 3", "27"),
        ("2^10", "1024"),
        ("7 x 14", "98"),
        ("12 × 18 ÷ 4", "54"),
        ("0.1 + 0.2", "0.3"),
        ("10 / 3", "3.3333333333"),
        ("-2**2", "-4"),
        ("17 // 5 + 17 % 5", "5"),
        ("abs(-3) + max(1, 4, 2) + min(5, 6) + round(2.6)", "15"),
        ("2 ** -1", "0.5"),
    ],
)
def test_calculator_results(expression: str, result: str) -> None:
    assert calculator.calculator(expression=expression) == result


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "unsupported element"),
        ("open('/etc/passwd')", "unsupported element"),
        ("x + 1", "unsupported element 'x'"),
        ("[1, 2]", "unsupported element"),
        ("1 if 1 else 2", "unsupported element"),
        ("True + 1", "unsupported element"),
        ("9 ** 9 ** 9", "exponent"),
        ("10 ** 40", "too large"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("(-8) ** 0.5", "negative"),
        ("2 +", "cannot parse"),
        ("1" * 201, "longer than"),
        ("round(x=1)", "positional"),
    ],
)
def test_calculator_refuses_what_is_not_plain_arithmetic(expression: str, message: str) -> None:
    with pytest.raises(calculator.CalculatorError, match=message):
        calculator.evaluate(expression)


def test_calculator_tool_spec_is_what_the_model_sees() -> None:
    spec = calculator.calculator.tool_spec
    assert spec["name"] == "calculator"
    assert spec["inputSchema"]["json"]["required"] == ["expression"]
    assert ":param" not in spec["description"]


@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6), st.sampled_from(["+", "-", "*"]))
def test_calculator_agrees_with_integer_arithmetic(a: int, b: int, op: str) -> None:
    expected = {"+": a + b, "-": a - b, "*": a * b}[op]
    assert calculator.evaluate(f"{a} {op} ({b})") == Fraction(expected)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("so the total is \\boxed{216}.", "216"),
        ("\\boxed{1,250} and later 3", "1,250"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("#### 37", "37"),
        ("The answer is: $27.", "$27"),
        ("We get 12 apples and 5 pears, 17 in all", "17"),
        ("no numbers here", None),
        ("\\boxed{-3.5}", "-3.5"),
    ],
)
def test_extract_final_number(text: str, number: str | None) -> None:
    assert grading.extract_final_number(text) == number


@pytest.mark.parametrize(
    ("text", "reference", "reward"),
    [
        ("\\boxed{216}", "216", 1.0),
        ("\\boxed{1,250}", "1250", 1.0),
        ("The answer is 1250.00", "1250", 1.0),
        ("The answer is $27.", "27", 1.0),
        ("\\boxed{215}", "216", 0.0),
        ("I give up", "216", 0.0),
        ("\\boxed{2.5}", "2.5", 1.0),
        ("\\boxed{216}", "not a number", 0.0),
        ("the answer is 7, wait, \\boxed{8}", "8", 1.0),
    ],
)
def test_score_is_exact_match_of_the_final_number(text: str, reference: str, reward: float) -> None:
    assert grading.score(text, reference) == reward
