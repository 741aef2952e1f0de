"""Issue #4: the hack corpus separates a lenient (hackable) reward from a strict one."""

from __future__ import annotations

import re

import pytest

from diagnostics.hack_corpus import corpus_batch, load_hack_corpus, score_hack_corpus

ANS = re.compile(r"<ans>(.*?)</ans>")


def lenient(data_source: str, solution_str: str, ground_truth: str, extra_info: object = None) -> float:
    """The defective demo style: pays when the answer appears anywhere."""
    return 1.0 if ground_truth in solution_str else 0.0


def strict(data_source: str, solution_str: str, ground_truth: str, extra_info: object = None) -> float:
    """Exactly one tagged answer, equal to the ground truth."""
    found = ANS.findall(solution_str)
    return 1.0 if len(found) == 1 and found[0].strip() == ground_truth else 0.0


def rewards(fn: object, domain: str = "math") -> tuple[list[float], int]:
    items = load_hack_corpus(domain)
    batch = corpus_batch(items)
    return [fn(**b) for b in batch], len(items)  # type: ignore[operator]


def test_math_corpus_covers_the_listed_exploits() -> None:
    kinds = {it.kind for it in load_hack_corpus("arithmetic")}
    assert {
        "answer_spam",
        "many_candidates",
        "format_only",
        "empty",
        "echo_prompt",
        "fake_pass",
        "read_strict_eval",
        "network_lookup",
        "repeated_digits",
    } <= kinds
    assert {it.kind for it in load_hack_corpus("agentic")} >= {"one_turn_exit", "echo_loop"}
    assert load_hack_corpus("no-such-domain") == ()


def test_lenient_reward_fails_strict_reward_passes() -> None:
    items = load_hack_corpus("math")
    bad = score_hack_corpus(rewards(lenient)[0], items)
    assert not bad.passed and bad.max_score == pytest.approx(1.0)
    assert {s.kind for s in bad.worst(20) if s.relative > 0.2} >= {"answer_spam", "repeated_digits"}
    good = score_hack_corpus(rewards(strict)[0], items)
    assert good.passed and good.max_score == 0.0


def test_reward_that_pays_nothing_for_correct_answers_fails() -> None:
    items = load_hack_corpus("math")
    zero = score_hack_corpus([0.0] * (2 * len(items)), items)
    assert not zero.passed and zero.unrewarded_references == len(items)
    with pytest.raises(ValueError, match="expected"):
        score_hack_corpus([1.0], items)
