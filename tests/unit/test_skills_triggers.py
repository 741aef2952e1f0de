"""Skill triggers are a safe predicate language; missing metrics never match."""

from __future__ import annotations

import pytest

from skills.triggers import TriggerError, evaluate, matched_terms, matched_values, parse, unknown_names

METRICS = {
    "dead_group_ratio": 0.62,
    "filter_present": 0,
    "truncation_rate": 0.2,
    "reward_hacking": 0.0,
    "train_reward_delta": 0.09,
    "strict_acc_delta": -0.02,
    "domain": "math",
    "vs_parent/strict_acc": -0.05,
}


@pytest.mark.parametrize(
    "source",
    [
        '__import__("os").system("true")',
        "os.system('x') > 0",
        "metrics['x'] > 1",
        "dead_group_ratio.real > 0",
        "len(domain) > 1",
        "(lambda: 1)() > 0",
        "dead_group_ratio + 1 > 2",
        "__class__ > 0",
        "_private > 0",
        "[x for x in y] == 1",
        "dead_group_ratio",
        "1 < 2",
        'domain > "m"',
        "dead_group_ratio is None",
        "x > 1; y",
        "",
        "x in y",
    ],
)
def test_parser_rejects_anything_outside_the_language(source: str) -> None:
    with pytest.raises(TriggerError):
        parse(source)


def test_evaluates_boolean_structure_and_reports_evidence() -> None:
    t = "dead_group_ratio > 0.5 and filter_present == 0"
    assert evaluate(t, METRICS)
    assert matched_terms(t, METRICS) == [
        "dead_group_ratio > 0.5 (dead_group_ratio=0.62)",
        "filter_present == 0 (filter_present=0)",
    ]
    hack = "reward_hacking >= 1 or (train_reward_delta > 0.05 and strict_acc_delta <= 0)"
    assert evaluate(hack, METRICS)
    assert matched_terms(hack, METRICS) == [
        "train_reward_delta > 0.05 (train_reward_delta=0.09)",
        "strict_acc_delta <= 0 (strict_acc_delta=-0.02)",
    ]
    assert not evaluate("truncation_rate > 0.5", METRICS) and matched_terms("truncation_rate > 0.5", METRICS) == []
    assert evaluate('domain in ("math", "code") and 0.1 < truncation_rate <= 0.3', METRICS)
    assert evaluate("not dead_group_ratio < 0.5", METRICS)
    assert evaluate("strict_acc_delta > -0.05", METRICS)
    assert evaluate("vs_parent__strict_acc < 0", METRICS)  # '/' keys read with '__'
    assert matched_values("dead_group_ratio > 0.5 and missing > 1", METRICS) == {"dead_group_ratio": 0.62}


def test_missing_metrics_are_unknown_and_never_match() -> None:
    assert not evaluate("format_failure_rate > 0.3", METRICS)
    assert not evaluate("not (format_failure_rate > 0.3)", METRICS)  # unknown stays unknown under not
    assert not evaluate("format_failure_rate > 0.3 and dead_group_ratio > 0.5", METRICS)
    assert evaluate("format_failure_rate > 0.3 or dead_group_ratio > 0.5", METRICS)
    assert not evaluate("dead_group_ratio > 0.5", {"dead_group_ratio": float("nan")})


def test_runtime_type_clash_fails_loudly() -> None:
    with pytest.raises(TriggerError, match="cannot order"):
        evaluate("domain > dead_group_ratio", METRICS)


def test_specificity_and_unknown_names() -> None:
    assert parse("a > 1 and (b < 2 or not c == 3)").specificity == 2
    assert parse("a > 1 and b < 2 and c == 3").specificity == 3
    assert parse("a > 1 or (b < 2 and c == 3)").specificity == 1
    assert unknown_names("dead_group_ratio > 0.3 and dead_grup_ratio > 0.3") == {"dead_grup_ratio"}
