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
  are plain integers, an optional minus and digits, and are equal: ``045`` equals ``45``, ``+45`` is no
  integer), or ``number`` (both parse as floats and differ by at most ``tolerance``).
- ``final``: when true, the answer must end the response (only whitespace after the last match), as a
  strict evaluator that forbids text after the answer would require.
- ``template``: how an answer is *written*, with ``{answer}`` where the answer goes (e.g.
  ``'<ans>{answer}</ans>'``). Optional: when the pattern is plain text around its group (``<ans>(.*?)</ans>``,
  ``ANSWER: (\\S+)``, ``^####\\s*(.*)$``), it is derived from the pattern. The hack corpus writes its exploit
  exemplars with it (``render``); the manifest loader refuses a protocol that has neither.
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
    template: str | None = Field(None, description="how an answer is written, '{answer}' marking it")

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

    @field_validator("template")
    @classmethod
    def _marks_the_answer(cls, value: str | None) -> str | None:
        if value is not None and ANSWER_MARK not in value:
            raise ValueError(f"template {value!r} must contain {ANSWER_MARK} where the answer goes")
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

    def ends_with_answer(self, text: str) -> bool:
        """True when `text` holds an answer and only whitespace follows its last one (whatever `final` says)."""
        matches = list(self.regex.finditer(text))
        return bool(matches) and not text[matches[-1].end() :].strip()

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

    @cached_property
    def writer(self) -> str | None:
        """The template answers are written with: the declared one, else derived from the pattern (or None)."""
        return self.template if self.template is not None else derive_template(self.pattern)

    def render(self, answer: str) -> str:
        """Write `answer` the way the protocol expects it (``<ans>33</ans>`` for the demo).

        Raises:
            ValueError: the pattern is not plain text around its group and no ``template`` is declared.
        """
        if self.writer is None:
            raise ValueError(
                f"answer pattern {self.pattern!r} is not plain text around its group; declare how an answer is "
                f"written, e.g. template: '<ans>{ANSWER_MARK}</ans>'"
            )
        return self.writer.replace(ANSWER_MARK, answer)


ANSWER_MARK = "{answer}"
# Pattern pieces outside the group that a writer turns into text: anchors write nothing, optional
# whitespace nothing, required whitespace one space.
_WRITTEN = {
    "^": "", "$": "", r"\A": "", r"\Z": "", r"\b": "", r"\s*": "", r"\s?": "", r"\s+": " ", r"\s": " ",
    " *": "", " ?": "", " +": " ", r"\n": "\n", r"\t": "\t",
}  # fmt: skip


def derive_template(pattern: str) -> str | None:
    """Return the writer template of a pattern that is plain text around its one group, else None.

    ``<ans>(.*?)</ans>`` gives ``<ans>{answer}</ans>``; ``^####\\s*(.*)$`` gives ``####{answer}``. Classes,
    alternations or quantifiers outside the group (or on it) have no single written form: None.
    """
    span = _group_span(pattern)
    if span is None:
        return None
    start, end = span
    prefix, suffix = _literal(pattern[:start]), _literal(pattern[end:])
    if prefix is None or suffix is None:
        return None
    return prefix + ANSWER_MARK + suffix


def _group_span(pattern: str) -> tuple[int, int] | None:
    """(start, end) of the one capturing group in `pattern` (end just past its ``)``), or None."""
    i, depth, start, in_class = 0, 0, -1, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            capturing = not pattern.startswith("(?", i) or pattern.startswith("(?P<", i)
            if depth == 0 and capturing and start < 0:
                start = i
            depth += 1 if start >= 0 else 0
        elif ch == ")" and start >= 0:
            depth -= 1
            if depth == 0:
                return start, i + 1
        i += 1
    return None


def _literal(piece: str) -> str | None:
    """The text a pattern piece matches when it is literal (see `_WRITTEN`), else None."""
    out: list[str] = []
    i = 0
    while i < len(piece):
        token = next((t for t in sorted(_WRITTEN, key=len, reverse=True) if piece.startswith(t, i)), None)
        if token is not None:
            out.append(_WRITTEN[token])
            i += len(token)
            continue
        ch = piece[i]
        if ch == "\\":
            nxt = piece[i + 1 : i + 2]
            if not nxt or nxt.isalnum():
                return None  # \d, \w, \1, ...: not one written text
            out.append(nxt)
            i += 2
            continue
        if ch in ".[]()|*+?{}":
            return None
        out.append(ch)
        i += 1
    return "".join(out)


_INTEGER = re.compile(r"-?[0-9]+")


def _as_int(text: str) -> int | None:
    """An integer written plainly (optional minus, ASCII digits): int() would also take "+3", "1_000", "٣"."""
    text = text.strip()
    return int(text) if _INTEGER.fullmatch(text) else None


def _as_float(text: str) -> float | None:
    try:
        value = float(text.strip().replace("_", "x"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None
