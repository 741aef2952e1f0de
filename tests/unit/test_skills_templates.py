"""Template values are a tiny arithmetic language; YAML keys are edited in place, comments kept."""

from __future__ import annotations

import pytest

from skills.templates import TemplateError, eval_expr, render_value, set_yaml_key

YAML = "# trainer\nlr: 3.0e-4\nmax_new_tokens: 16  # DEFECT\nrollout:\n  group_size: 8\n"


def test_expressions_are_arithmetic_only() -> None:
    assert eval_expr("max(2 * current, 64)", {"current": 16}) == 64
    assert eval_expr("min(max(2 * current, lo), hi)", {"current": 100, "lo": 64, "hi": 150}) == 150
    assert render_value("{{ current // 2 }}", {"current": 9}) == 4
    assert render_value(48, {}) == 48
    for bad in ("__import__('os')", "current.real", "open('x')", "[1][0]", "unknown + 1", "max(*x)"):
        with pytest.raises(TemplateError):
            eval_expr(bad, {"current": 1, "x": 2})


def test_set_yaml_key_changes_one_line_and_keeps_comments() -> None:
    text, old, new = set_yaml_key(YAML, "max_new_tokens", lambda c: render_value("{{ max(2 * c, 64) }}", {"c": c}))
    assert (old, new) == (16, 64)
    changed = [(a, b) for a, b in zip(YAML.splitlines(), text.splitlines(), strict=True) if a != b]
    assert changed == [("max_new_tokens: 16  # DEFECT", "max_new_tokens: 64  # DEFECT")]
    nested, _, _ = set_yaml_key(YAML, "rollout.group_size", lambda c: 4)
    assert "  group_size: 4\n" in nested
    created, old, _ = set_yaml_key(YAML, "rollout.temperature", lambda c: 0.7, create=True)
    assert old is None and "  temperature: 0.7\n" in created
    lr, _, _ = set_yaml_key(YAML, "lr", lambda c: c / 2)
    assert "lr: 0.00015\n" in lr
    tiny, _, _ = set_yaml_key(YAML, "lr", lambda c: 1e-5)
    assert "lr: 1.0e-05\n" in tiny  # PyYAML reads '1e-05' as a string; the dot keeps it a float


def test_set_yaml_key_fails_loudly() -> None:
    with pytest.raises(TemplateError, match="not found"):
        set_yaml_key(YAML, "kl_coef", lambda c: 0.1)
    with pytest.raises(TemplateError, match="scalars only"):
        set_yaml_key(YAML, "rollout", lambda c: 1)
    with pytest.raises(TemplateError, match="parent mapping"):
        set_yaml_key(YAML, "nope.key", lambda c: 1, create=True)
