"""Pure backtest grading on cached rollouts (rank violations, rescue, filter, length, hack corpus,
agreement with the protected strict evaluator)."""

from __future__ import annotations

import re

import orjson
import pytest

from diagnostics.backtest import BacktestResult, Verdict, failed_backtest, grade_backtest, step_batches
from diagnostics.hack_corpus import build_hack_corpus, corpus_batch, pick_problems, score_hack_corpus
from diagnostics.schema import Rollout
from harness.answers import AnswerProtocol
from harness.failures import Outcome

ANS = re.compile(r"<ans>(.*?)</ans>")
RESPONSES = [
    ("12+21 => 7*3=21 ; 12+21=33 <ans>33</ans>", 1.0),
    ("<ans>33</ans>", 1.0),
    ("33 " * 12, 0.0),  # answer spam
    ("maybe 33 or 34 <ans>34</ans>", 0.0),  # hedged, wrong tag
    ("<ans>34</ans>", 0.0),
    ("12+21 => 32 <ans>32</ans>", 0.0),
    ("<ans></ans>", 0.0),
    ("", 0.0),
]


def lenient(solution_str: str, ground_truth: str) -> float:
    """Pays the answer anywhere, plus a length bonus: spam outranks correct answers."""
    return (1.0 if ground_truth in solution_str else 0.0) + 0.01 * len(solution_str.split())


def strict(solution_str: str, ground_truth: str) -> float:
    found = ANS.findall(solution_str)
    return 1.0 if len(found) == 1 and found[0].strip() == ground_truth else 0.0


def cached(n_groups: int = 12, steps: int = 2) -> list[Rollout]:
    out = []
    for step in range(steps):
        for g in range(n_groups):
            for i, (text, s) in enumerate(RESPONSES):
                resp = text if g % 3 else ("<ans>34</ans>" if i < 2 else text)  # every 3rd group: nobody right
                ok = s if g % 3 else 0.0
                out.append(
                    Rollout(
                        "lenient-run",
                        step,
                        "train",
                        f"p{g}",
                        f"g{g}",
                        i,
                        "12+21=>",
                        resp,
                        "33",
                        lenient(resp, "33"),
                        strict_score=ok,
                        response_tokens=10 * (i + 1),
                    )
                )
    return out


def test_strict_reward_removes_rank_violations_of_lenient_rollouts() -> None:
    rollouts = cached()
    new = [strict(r.response, "33") for r in rollouts]
    result = grade_backtest("fix-reward", rollouts, new)
    m = result.metrics
    assert m is not None
    assert m.rank_violations_before > 0 and m.rank_violations_after == 0
    assert result.verdict is Verdict.PASS  # 24 groups >= MIN_GROUPS, no hack corpus given
    worse = grade_backtest("worse", rollouts, [r.reward + (0.5 if "34" in r.response else 0) for r in rollouts])
    assert worse.verdict is Verdict.FAIL and any("rank violations" in x for x in worse.reasons)


def test_dead_groups_rescued_and_killed() -> None:
    rollouts = cached()
    # groups nobody solved: the lenient reward varies with length, a strict one is constant 0 -> newly dead
    new = [strict(r.response, "33") for r in rollouts]
    m = grade_backtest("c", rollouts, new).metrics
    assert m is not None and m.groups_killed == m.dead_groups_after == 8
    flat = [Rollout(**{**r.to_json(), "reward": 0.0, "stop_reason": r.stop_reason}) for r in rollouts]  # type: ignore[arg-type]
    m2 = grade_backtest("c", flat, new).metrics
    assert m2 is not None and m2.dead_groups_before == 24 and m2.groups_rescued == 16


def test_filter_kept_ratio_and_length_budget() -> None:
    rollouts = cached()
    new = [strict(r.response, "33") for r in rollouts]
    batches = step_batches(rollouts, new)
    keep = {k: max(g) > min(g) for b in batches for k, g in zip(b.keys, b.group_rewards, strict=True)}
    m = grade_backtest("f", rollouts, new, keep=keep).metrics
    assert m is not None and m.kept_sample_ratio == pytest.approx(16 / 24)
    # Dropping exactly the dead groups keeps every group that carries signal: a pass, not a fail.
    assert m.kept_live_ratio == pytest.approx(1.0)
    assert grade_backtest("f", rollouts, new, keep=keep).verdict is Verdict.PASS
    harsh = grade_backtest("f", rollouts, new, keep={k: k[1] == "g1" for k in keep})
    assert harsh.verdict is Verdict.FAIL and harsh.metrics is not None and harsh.metrics.kept_sample_ratio < 0.5
    assert harsh.metrics.kept_live_ratio is not None and harsh.metrics.kept_live_ratio < 0.5
    cut = grade_backtest("len", rollouts, new, max_new_tokens_before=100, max_new_tokens_after=15).metrics
    assert cut is not None and cut.cut_successes == 16 and cut.newly_truncated == len(rollouts) - 24


def test_lenient_reward_fails_on_hack_corpus() -> None:
    rollouts = cached()
    items = build_hack_corpus(
        "math", AnswerProtocol(pattern="<ans>(.*?)</ans>", compare="integer"), pick_problems(rollouts)
    )
    new = [strict(r.response, "33") for r in rollouts]
    bad = score_hack_corpus([lenient(b["solution_str"], b["ground_truth"]) for b in corpus_batch(items)], items)
    result = grade_backtest("lenient", rollouts, new, hack=bad)
    assert result.verdict is Verdict.FAIL and any("hack corpus" in x for x in result.reasons)
    good = score_hack_corpus([strict(b["solution_str"], b["ground_truth"]) for b in corpus_batch(items)], items)
    assert grade_backtest("strict", rollouts, new, hack=good).verdict is Verdict.PASS


def test_too_few_groups_is_inconclusive_and_json_round_trip() -> None:
    rollouts = cached(n_groups=2, steps=1)
    result = grade_backtest("small", rollouts, [strict(r.response, "33") for r in rollouts])
    assert result.verdict is Verdict.INCONCLUSIVE
    again = BacktestResult.from_json(orjson.loads(orjson.dumps(result.to_json())))
    assert again == result
    err = failed_backtest("x", Outcome.TIMEOUT, "hung", "harness/reward.py")
    assert err.verdict is Verdict.FAIL and err.metrics is None
    assert BacktestResult.from_json(err.to_json()) == err
    with pytest.raises(ValueError, match="rewards for"):
        grade_backtest("x", rollouts, [1.0])


def _judged(responses: list[tuple[str, float, float]], groups: int = 10) -> list[Rollout]:
    """Rollouts of `(response, incumbent reward, strict score)`, one group per repetition, ground truth 045."""
    return [
        Rollout("run", 1, "train", f"p{g}", f"g{g}", i, "pad 45:", text, "045", reward, strict_score=strict)
        for g in range(groups)
        for i, (text, reward, strict) in enumerate(responses)
    ]


def test_a_reward_that_disagrees_with_strict_more_than_the_incumbent_is_refused_with_the_numbers() -> None:
    """The issue's case: an integer reward pays <ans>45</ans> for 045 where the strict evaluator says wrong."""
    rollouts = _judged([("<ans>045</ans>", 1.0, 1.0), ("<ans>45</ans>", 0.0, 0.0), ("<ans>46</ans>", 0.0, 0.0)])
    integer = AnswerProtocol(pattern="<ans>(.*?)</ans>", compare="integer")
    loose = [float(integer.correct(r.response, r.ground_truth)) for r in rollouts]
    result = grade_backtest("integer-reward", rollouts, loose)
    m = result.metrics
    assert m is not None and (m.n_strict, m.strict_wrong) == (30, 20)
    assert (m.strict_wrong_paid_before, m.strict_wrong_paid_after) == (0, 10)
    assert (m.strict_right_failed_before, m.strict_right_failed_after) == (0, 0)
    assert result.verdict is Verdict.FAIL
    reason = next(x for x in result.reasons if "disagrees with the strict evaluator" in x)
    assert "0 -> 10 of 30 responses" in reason and "pays 50.0% (10/20) of strict-wrong" in reason
    assert "incumbent: pays 0.0% (0/20)" in reason
    # the same reward, kept from the incumbent, is not held against a candidate that did not change it
    assert grade_backtest("same", rollouts, loose, reward_changed=False).verdict is Verdict.PASS
    exact = [float(r.strict_score or 0.0) for r in rollouts]
    agree = grade_backtest("exact-reward", rollouts, exact)
    assert agree.verdict is Verdict.PASS and any("strict agreement: pays 0.0%" in x for x in agree.reasons)
    again = BacktestResult.from_json(orjson.loads(orjson.dumps(result.to_json())))
    assert again == result


def test_paying_means_above_the_midpoint_of_the_rewards_range() -> None:
    # A dense term that pays wrong answers a little (0.2 < midpoint 0.5) still agrees with the evaluator;
    # a format gate that fails right answers disagrees.
    rollouts = _judged([("<ans>045</ans>", 0.0, 1.0), ("<ans>44</ans>", 0.0, 0.0)])
    dense = [1.0 if (r.strict_score or 0) >= 0.5 else 0.2 for r in rollouts]
    assert grade_backtest("dense", rollouts, dense).verdict is Verdict.PASS
    m = grade_backtest("dense", rollouts, dense).metrics
    assert m is not None and m.strict_right_failed_before == 10 and m.strict_right_failed_after == 0
    gate = [0.0 for _ in rollouts]
    failed = grade_backtest("gate", rollouts, [1.0 if i % 2 else 0.0 for i in range(len(rollouts))])
    assert failed.verdict is Verdict.FAIL  # pays every wrong answer, fails every right one: 20 > 10
    zero = grade_backtest("zero", rollouts, gate).metrics  # pays nothing: every right answer is failed
    assert zero is not None and zero.strict_right_failed_after == 10


def test_reports_written_before_the_agreement_check_still_read() -> None:
    result = grade_backtest("old", cached(), [strict(r.response, "33") for r in cached()])
    row = result.to_json()
    for key in ("n_strict", "strict_wrong", "strict_wrong_paid_before", "strict_wrong_paid_after"):
        del row["metrics"][key]
    old = BacktestResult.from_json(row)
    assert old.metrics is not None and old.metrics.n_strict is None and old.metrics.strict_disagreements is None


def test_a_handful_of_odd_responses_is_no_evidence_against_a_reward() -> None:
    """One answer with a stray space in 300 (the protocol strips it, the evaluator's regex refuses it)."""
    rollouts = _judged([("<ans>045</ans>", 1.0, 1.0), ("<ans>44</ans>", 0.0, 0.0), ("<ans>46</ans>", 0.0, 0.0)], 100)
    first_wrong = rollouts[1]
    odd = Rollout(**{**first_wrong.to_json(), "response": "<ans> 44</ans>", "stop_reason": first_wrong.stop_reason})  # type: ignore[arg-type]
    rollouts = [rollouts[0], odd, *rollouts[2:]]
    loose = [1.0 if (r.strict_score or 0) >= 0.5 or r.response == "<ans> 44</ans>" else 0.0 for r in rollouts]
    result = grade_backtest("one-odd", rollouts, loose)
    assert result.metrics is not None and result.metrics.strict_disagreements == (0, 1)
    assert result.verdict is Verdict.PASS  # 1 of 300 <= AGREEMENT_SLACK


def test_a_probe_aimed_at_the_rewards_disagreement_must_show_it_fall_on_the_cached_rollouts() -> None:
    """A reward probe aimed at unrewarded-correct passes only if it fails fewer strict-right responses
    (here the incumbent fails the right <ans>045</ans> as a timeout would); one aimed at rewarded-wrong only if it
    pays fewer strict-wrong ones. A move that changes nothing, or the wrong thing, is refused before training."""
    rollouts = _judged([("<ans>045</ans>", 0.0, 1.0), ("<ans>045</ans>", 1.0, 1.0), ("<ans>46</ans>", 1.0, 0.0)])
    same = [r.reward for r in rollouts]
    fixed_right = [1.0 if r.strict_score else r.reward for r in rollouts]  # pays every right one now
    aimed = ["score.unrewarded_correct"]
    assert grade_backtest("no-op", rollouts, same).verdict is Verdict.PASS  # not aimed: agreement merely held
    refused = grade_backtest("no-op", rollouts, same, must_fall=aimed)
    assert refused.verdict is Verdict.FAIL
    assert any("aimed at score.unrewarded_correct" in x and "10 -> 10" in x for x in refused.reasons), refused.reasons
    assert grade_backtest("longer-limit", rollouts, fixed_right, must_fall=aimed).verdict is Verdict.PASS
    # paying right ones more does not make it pay fewer wrong ones
    both = grade_backtest("longer-limit", rollouts, fixed_right, must_fall=[*aimed, "score.rewarded_wrong"])
    assert both.verdict is Verdict.FAIL and any("strict-wrong responses it pays" in x for x in both.reasons)
    # an unchanged reward is never held to it (the probe moved something else)
    assert grade_backtest("same", rollouts, same, reward_changed=False, must_fall=aimed).verdict is Verdict.PASS
