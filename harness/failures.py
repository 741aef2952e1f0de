"""The failure classes every result carries (`Outcome`), and who is at fault: candidate code or our side.

A `CandidateCodeError` is the harness's fault (it raised, hung, ran out of memory, returned garbage or
tried to forge the channel); its `outcome` says which class (`candidate_error`, `timeout`,
`spoof_detected`). An `InfraError` is ours (no engine, image missing, Docker API failure) and must never be
counted against a candidate.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from typing import Any


class Outcome(enum.StrEnum):
    """How a run, backtest or sandboxed call ended. Never replaced by a fake score."""

    OK = "ok"
    CANDIDATE_ERROR = "candidate_error"
    INFRA_ERROR = "infra_error"
    TIMEOUT = "timeout"
    SPOOF_DETECTED = "spoof_detected"


class CandidateCodeError(Exception):
    """Candidate (harness) code failed inside the sandbox.

    Attributes:
        outcome: `CANDIDATE_ERROR`, `TIMEOUT` or `SPOOF_DETECTED`.
        message: what happened, with the exception type and message where there was one.
        path: the harness file at fault (relative to the harness root), or "" when unknown.
    """

    def __init__(self, outcome: Outcome, message: str, path: str = "") -> None:
        assert outcome in (Outcome.CANDIDATE_ERROR, Outcome.TIMEOUT, Outcome.SPOOF_DETECTED), outcome
        self.outcome = outcome
        self.message = message
        self.path = path
        where = f" ({path})" if path else ""
        super().__init__(f"{outcome.value}{where}: {message}")


class InfraError(Exception):
    """The sandbox itself failed (engine unreachable, image missing, API error): not the candidate's fault."""

    def __init__(self, message: str) -> None:
        self.outcome = Outcome.INFRA_ERROR
        self.message = message
        super().__init__(message)


class BadInput(ValueError):
    """Something a user gave (a file, a field, a flag, a URL) is unusable; the message names it and the fix.

    The CLI prints it as one line and exits 2 (`agent.cli.EvoGroup`), whichever command it escapes from.
    `HarnessError`, the store's `DatabaseURLError`, the session checks' `SetupError` and a backend's
    `RunRefused` are kinds of it.
    """


SHOWN_CHARS = 80  # the longest rendering of a value inside an error message
MESSAGE_CHARS = 2000  # the longest failure text a result records (records, case memory, report, the model)


def recorded(message: str, limit: int = MESSAGE_CHARS) -> str:
    """Failure text as a result records it: control characters (but newline and tab) shown as `?`, capped.

    Every failure message a run or backtest result carries goes through here once (`trainer_backend.base.
    RunResult`, `diagnostics.backtest.failed_backtest`),
    so a trainer's or candidate's error text never floods a record, the report or the model's context.
    What a message may quote is the job of the path rule (`harness.files`): nothing outside the harness is
    ever opened on a harness file's say-so, so no error can quote it.
    """
    text = "".join(ch if ch in "\n\t" or (ord(ch) >= 0x20 and ord(ch) != 0x7F) else "?" for ch in message)
    return text if len(text) <= limit else f"{text[: limit - 40]}… (cut: {len(text)} characters in all)"


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """Render `value` for an error message: its `repr`, capped at about `limit` characters.

    Safe on hostile values (a candidate's return value): no method of the value's own class runs; a str
    or bytes subclass is shown as the plain value, a huge integer by its size, containers element by
    element (the first few, two levels deep), any other object by its type name.
    """
    try:
        text = _shown(value, limit, depth=0)
    except Exception:  # a value whose type lies about itself: still only its type is shown
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown(value: Any, limit: int, depth: int) -> str:
    kind = type(value)  # the real type (isinstance would believe a faked __class__)
    if value is None or kind is bool:
        return "None" if value is None else ("True" if value is True else "False")
    if issubclass(kind, int):
        bits = int.bit_length(value)
        return int.__repr__(value) if bits <= 64 else f"<an integer of about 10^{int(bits * math.log10(2))}>"
    if issubclass(kind, float):
        return float.__repr__(value)
    keep = max(8, limit - 30)  # room for the quotes and the size after a cut
    if issubclass(kind, str):
        size, head = str.__len__(value), str.__repr__(str.__getitem__(value, slice(0, keep)))
        return head if size <= keep else f"{head[:-1]}…{head[-1]} ({size} characters)"
    if issubclass(kind, bytes):
        size, head = bytes.__len__(value), bytes.__repr__(bytes.__getitem__(value, slice(0, keep)))
        return head if size <= keep else f"{head[:-1]}…{head[-1]} ({size} bytes)"
    if depth < 2 and issubclass(kind, dict):
        pairs = _first(dict.items(value))
        items = [f"{_shown(k, limit, depth + 1)}: {_shown(v, limit, depth + 1)}" for k, v in pairs]
        return _container("{", items, dict.__len__(value), "}")
    if depth < 2 and issubclass(kind, list):
        items = [_shown(v, limit, depth + 1) for v in _first(list.__iter__(value))]
        return _container("[", items, list.__len__(value), "]")
    if depth < 2 and issubclass(kind, tuple):
        size = tuple.__len__(value)
        items = [_shown(v, limit, depth + 1) for v in _first(tuple.__iter__(value))]
        return _container("(", items, size, ",)" if size == 1 else ")")
    return f"<{kind.__name__} object>"


def _container(opening: str, items: list[str], size: int, closing: str) -> str:
    more = f", … ({size} items)" if size > len(items) else ""
    return f"{opening}{', '.join(items)}{more}{closing}"


def _first(items: Iterable[Any], n: int = 8) -> list[Any]:
    """The first `n` items: a container's contents are never all rendered."""
    out: list[Any] = []
    for item in items:
        if len(out) == n:
            break
        out.append(item)
    return out
