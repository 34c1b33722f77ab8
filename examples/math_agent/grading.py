"""Find the final number in the agent's answer and score it: exact match with the reference.

The model is asked to end with ``\\boxed{N}``; answers that say ``#### N`` or ``the answer is N``
are accepted too, and as a last resort the last number in the text is taken. Numbers are compared
exactly as decimals after removing ``,`` and ``$``, so ``1,250``, ``1250.00`` and ``$1250`` all
match ``1250``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUMBER = r"[-+]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_PATTERNS = (
    re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}"),
    re.compile(r"####\s*(" + _NUMBER + r")"),
    re.compile(r"answer\s+is\s*:?\s*(" + _NUMBER + r")", re.IGNORECASE),
)
_ANY_NUMBER = re.compile(_NUMBER)


def to_decimal(text: str) -> Decimal | None:
    """Parse ``text`` as a number, ignoring ``,``, ``$``, spaces and a trailing ``.``; None if it is not one.

    :param text: e.g. ``"$1,250.00"``.
    """
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def extract_final_number(text: str) -> str | None:
    """Return the final answer's number as written, or None when the text has no number.

    :param text: the agent's last message.
    """
    for pattern in _PATTERNS:
        matches = pattern.findall(text)
        if matches:
            return str(matches[-1]).strip()
    numbers = _ANY_NUMBER.findall(text)
    return numbers[-1].strip() if numbers else None


def score(text: str, reference: str) -> float:
    """1.0 when the final number in ``text`` equals ``reference`` exactly, else 0.0.

    :param text: the agent's last message.
    :param reference: the dataset's final answer (``metadata.answer``).
    """
    predicted = extract_final_number(text)
    expected = to_decimal(reference)
    if predicted is None or expected is None:
        return 0.0
    value = to_decimal(predicted)
    return 1.0 if value is not None and value == expected else 0.0
