"""The hack corpus separates a hackable reward from a strict one, in the harness's own terms.

Exploits are written for problems of the cached rollouts with the declared answer protocol, so a harness
with letters and an ``ANSWER:`` line gets exploits of that protocol, never ``<ans>`` tags.
"""

from __future__ import annotations

import pytest

from diagnostics.hack_corpus import (
    Problem,
    build_hack_corpus,
    corpus_batch,
    load_templates,
    pick_problems,
    score_hack_corpus,
    wrong_answers,
)
from diagnostics.schema import Rollout
from harness.answers import AnswerProtocol

TAGS = AnswerProtocol(pattern=r"<ans>(.*?)</ans>", compare="integer", final=True)
LINE = AnswerProtocol(pattern=r"ANSWER: (\S+)", compare="exact", final=True)
NUMBERS = [Problem("p1", "12+7*3=>", "33", "sums", None), Problem("p2", "9*8-5=>", "67", "products", None)]
WORDS = [Problem("w1", "reverse hello:", "olleh", "words", None), Problem("w2", "reverse abc:", "cba", "words", None)]


def lenient(data_source: str, solution_str: str, ground_truth: str, extra_info: object = None) -> float:
    """The defective demo style: pays when the answer appears anywhere."""
    return 1.0 if ground_truth in solution_str else 0.0


def strict_for(answer: AnswerProtocol):  # type: ignore[no-untyped-def]
    def strict(data_source: str, solution_str: str, ground_truth: str, extra_info: object = None) -> float:
        found = answer.answers(solution_str)
        return float(len(found) == 1 and answer.correct(solution_str, ground_truth))

    return strict


def _scores(fn: object, items: tuple) -> list[float]:  # type: ignore[type-arg]
    return [fn(**b) for b in corpus_batch(items)]  # type: ignore[operator]


@pytest.mark.parametrize(("answer", "problems"), [(TAGS, NUMBERS), (LINE, WORDS)])
def test_lenient_reward_fails_strict_reward_passes(answer: AnswerProtocol, problems: list[Problem]) -> None:
    items = build_hack_corpus("math", answer, problems)
    bad = score_hack_corpus(_scores(lenient, items), items)
    assert not bad.passed and bad.max_score == pytest.approx(1.0)
    assert {s.kind for s in bad.worst(50) if s.relative > 0.2} >= {"answer_spam", "repeated_truth", "many_candidates"}
    good = score_hack_corpus(_scores(strict_for(answer), items), items)
    assert good.passed and good.max_score == 0.0


def test_exploits_are_written_with_the_declared_protocol() -> None:
    items = {it.kind: it for it in build_hack_corpus("strings", LINE, WORDS[:1])}
    assert {"answer_spam", "many_candidates", "format_only", "empty", "echo_prompt", "fake_pass"} <= set(items)
    assert {"read_strict_eval", "network_lookup", "hedged_wrong_answer", "truth_among_wrong"} <= set(items)
    assert "enumerate_range" not in items  # numeric-only exploits need a numeric comparison
    assert items["answer_spam"].solution_str == " ".join(["ANSWER: olleh"] * 10)
    assert items["format_only"].solution_str == "ANSWER: "
    assert items["echo_prompt"].solution_str == "reverse hello:"
    assert items["answer_spam"].reference_solution == "ANSWER: olleh"  # no verified response: the protocol writes it
    assert not any("<ans>" in it.solution_str or "<ans>" in it.reference_solution for it in items.values())
    numeric = {it.kind for it in build_hack_corpus("math", TAGS, NUMBERS[:1])}
    assert "enumerate_range" in numeric
    assert {it.kind for it in build_hack_corpus("swe", LINE, WORDS[:1])} >= {"one_turn_exit", "echo_loop"}


def test_wrong_answers_are_wrong_under_the_protocol() -> None:
    exact = AnswerProtocol(pattern=r"ANSWER: (\S+)", compare="exact")
    assert "45" in wrong_answers("045", [], exact)  # the leading-zero near miss an integer reward would pay
    assert all(not TAGS.equal(w, "045") for w in wrong_answers("045", [], TAGS))
    assert wrong_answers("33", [], TAGS)[:2] == ["34", "32"]
    assert all(w != "olleh" for w in wrong_answers("olleh", ["cba"], LINE)) and "cba" in wrong_answers(
        "olleh", ["cba"], LINE
    )


def _rollout(prompt_id: str, source: str, response: str, strict: float) -> Rollout:
    return Rollout("r", 1, "train", prompt_id, "g", 0, f"q{prompt_id}", response, "7", 0.0, strict_score=strict,
                   data_source=source)  # fmt: skip


def test_problems_prefer_verified_references_and_spread_over_sources() -> None:
    rollouts = [
        _rollout("a1", "a", "wrong", 0.0),
        _rollout("a2", "a", "work <ans>7</ans>", 1.0),
        _rollout("a3", "a", "work <ans>7</ans>", 1.0),
        _rollout("b1", "b", "nope", 0.0),
    ]
    chosen = pick_problems(rollouts, n=3)
    assert [p.prompt_id for p in chosen] == ["a2", "b1", "a3"]
    assert chosen[0].reference == "work <ans>7</ans>" and chosen[1].reference is None
    # a strict-correct response the protocol reads otherwise (two answers) is no reference
    loose = [*rollouts, _rollout("c1", "c", "<ans>x</ans><ans>7</ans>", 1.0)]
    assert [p.reference for p in pick_problems(loose, TAGS, n=4) if p.prompt_id == "c1"] == [None]
    assert [p.reference for p in pick_problems(loose, None, n=4) if p.prompt_id == "c1"] == ["<ans>x</ans><ans>7</ans>"]
    # without a declared protocol only templates that write no answer apply, to verified problems only
    items = build_hack_corpus("math", None, chosen)
    assert items and {it.prompt for it in items} == {"qa2", "qa3"}
    assert not any(t.writes_answers for t in load_templates("math") if t.kind in {it.kind for it in items})


def test_reward_that_pays_nothing_for_correct_answers_fails() -> None:
    items = build_hack_corpus("math", TAGS, NUMBERS)
    zero = score_hack_corpus([0.0] * (2 * len(items)), items)
    assert not zero.passed and zero.unrewarded_references == len(items)
    with pytest.raises(ValueError, match="expected"):
        score_hack_corpus([1.0], items)
