"""The answer protocol a harness declares: where the answer sits in a response and how it is compared.

A harness says it once in its manifest (``answer:``); the health report's format and answer metrics, the
hack corpus and every skill template that writes a reward read it from here, so nothing outside a
harness assumes a tag or a number format. Pure: no I/O.

Example (the arithmetic demo)::

    answer: {pattern: '<ans>(.*?)</ans>', compare: integer}

- ``pattern``: a regular expression with exactly one capture group, the answer text. The *last* match in a
  response is its answer (a model that writes several answers is judged on its final one; the health
  report also counts responses with more than one).
- ``compare``: ``exact`` (strings equal after stripping surrounding whitespace), ``integer`` (both sides
  parse as integers and are equal: ``045`` equals ``45``), or ``number`` (both parse as floats and differ by
  at most ``tolerance``).
- ``final``: when true, the answer must end the response (only whitespace after the last match), as a
  strict evaluator that forbids text after the answer would require.
"""

from __future__ import annotations

import math
import re
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Compare = Literal["exact", "integer", "number"]


class AnswerProtocol(BaseModel):
    """How to find the answer in a response and compare it with the ground truth."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pattern: str = Field(description="regular expression with exactly one capture group: the answer")
    compare: Compare = "exact"
    tolerance: float = Field(0.0, ge=0.0, description="largest allowed difference (compare: number)")
    final: bool = Field(False, description="the answer must end the response (only whitespace after it)")

    @field_validator("pattern")
    @classmethod
    def _one_group(cls, value: str) -> str:
        try:
            compiled = re.compile(value, re.S)
        except re.error as exc:
            raise ValueError(f"pattern {value!r} is not a valid regular expression ({exc})") from None
        if compiled.groups != 1:
            raise ValueError(
                f"pattern {value!r} has {compiled.groups} capture groups; it needs exactly one, around the answer"
            )
        return value

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern (dot matches newlines)."""
        return re.compile(self.pattern, re.S)

    def answers(self, text: str) -> list[str]:
        """Every answer in `text`, in order, stripped."""
        return [m.group(1).strip() for m in self.regex.finditer(text)]

    def extract(self, text: str) -> str | None:
        """The response's answer: the last match (None when there is none, or when `final` and text follows)."""
        matches = list(self.regex.finditer(text))
        if not matches:
            return None
        last = matches[-1]
        if self.final and text[last.end() :].strip():
            return None
        return last.group(1).strip()

    def equal(self, predicted: str, truth: object) -> bool:
        """Compare an extracted answer with the ground truth under `compare`."""
        expected = str(truth).strip()
        if self.compare == "exact":
            return predicted.strip() == expected
        if self.compare == "integer":
            a, b = _as_int(predicted), _as_int(expected)
            return a is not None and a == b
        x, y = _as_float(predicted), _as_float(expected)
        return x is not None and y is not None and abs(x - y) <= self.tolerance

    def correct(self, text: str, truth: object) -> bool:
        """True when the response's answer equals the ground truth."""
        predicted = self.extract(text)
        return predicted is not None and self.equal(predicted, truth)


def _as_int(text: str) -> int | None:
    text = text.strip().replace("_", "x")  # int() accepts "1_000"; an answer does not
    try:
        return int(text)
    except ValueError:
        return None


def _as_float(text: str) -> float | None:
    try:
        value = float(text.strip().replace("_", "x"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None
