"""The failure classes every result carries (`Outcome`), and who is at fault: candidate code or our side.

A `CandidateCodeError` is the harness's fault (it raised, hung, ran out of memory, returned garbage or
tried to forge the channel); its `outcome` says which class (`candidate_error`, `timeout`,
`spoof_detected`). An `InfraError` is ours (no engine, image missing, Docker API failure) and must never be
counted against a candidate (style principle 7).
"""

from __future__ import annotations

import enum


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
