"""Commit message text: the candidate message with its trailers, git's subject length, reading trailers back.

Pure text, no git: `sandboxes/git_worktree.py` (the git adapter) writes these messages and re-exports the
names its callers use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

SUBJECT_MAX = 72  # git's convention: `git log --oneline` and review tools show this much of a subject


@dataclass(frozen=True)
class InterventionMessage:
    """A candidate commit message: a title plus the hypothesis, factor and falsifiable success criterion.

    Rendered as a commit message whose trailers (``Hypothesis:``, ``Factor:``, ``Success-Criterion:``,
    and any ``extra`` pairs, e.g. ``Skill: strict-answer-extraction``) ``parse_trailers`` reads back.
    """

    title: str
    hypothesis: str
    factor: str
    success_criterion: str
    body: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    def render(self) -> str:
        """Return the full commit message text."""
        if not self.title.strip():
            raise ValueError("InterventionMessage.title is empty; give the candidate a one-line summary")
        trailers = {
            "Hypothesis": self.hypothesis,
            "Factor": self.factor,
            "Success-Criterion": self.success_criterion,
            **self.extra,
        }
        lines = [one_line(self.title), ""]
        if self.body.strip():
            lines += [self.body.strip(), ""]
        for key, value in trailers.items():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", key):
                raise ValueError(f"trailer key {key!r} must be letters, digits and '-'")
            lines.append(f"{key}: {one_line(value)}")
        return commit_text("\n".join(lines))


def one_line(text: str) -> str:
    """`text` with every run of whitespace, newlines included, as one space."""
    return " ".join(text.split())


def commit_text(message: str) -> str:
    """Return ``message`` with a one-line subject of at most ``SUBJECT_MAX`` characters.

    A longer first line is cut after the last whole word that fits (marked with "…") and kept whole as the
    body's first paragraph, so no evidence is lost and trailers stay in the last paragraph.

    Raises:
        ValueError: the message is empty.
    """
    first, _, rest = message.strip().partition("\n")
    subject, body = one_line(first), rest.strip()
    if not subject:
        raise ValueError("empty commit message")
    if len(subject) > SUBJECT_MAX:
        cut = subject[: SUBJECT_MAX - 1]
        if cut.rfind(" ") > SUBJECT_MAX // 2:  # a word boundary not too far back; else cut mid-word
            cut = cut[: cut.rfind(" ")]
        body = f"{subject}\n\n{body}" if body else subject
        subject = cut.rstrip(" ,;:.-") + "…"
    return subject + (f"\n\n{body}" if body else "") + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    """Return the ``Key: value`` trailers of the last paragraph of a commit message."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if len(paragraphs) < 2:
        return {}
    out: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(": ")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", key):
            out[key] = value.strip()
    return out
