"""One path rule (harness/paths.py) decides what a harness path names, for the surface and the factors.

Odd paths an attacker (or a careless model) sends: parent and dot-only components, leading-dot names that a
string prefix check mistook for `harness/`, `.git` in any case and position, absolute paths, NUL,
backslashes, control characters and whitespace.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.decisions.factors import check_candidate
from harness.manifest import Harness, Manifest
from harness.paths import PathRuleError, normalise

REFUSED = [
    "",
    ".",
    "/",
    "/etc/passwd",
    "/harness/reward.py",
    "../eval/strict.py",
    "harness/../eval/strict.py",
    "harness/..",
    "..",
    "...",
    ".../harness/x.py",
    "harness/.../x.py",
    "harness//x.py",
    "//harness/x.py",
    "harness/x.py//",
    "harness/.git/config",
    ".git/config",
    "harness/.GIT/hooks/pre-commit",
    "harness/.git./x",
    "harness/.git /x",
    "harness/x\0.py",
    "harness\\x.py",
    "harness/x\n.py",
    "harness/x\t.py",
    "harness/\x7fx.py",
    " harness/x.py",
    "harness/x.py ",
    "x" * 5000,
]

CANONICAL = {
    "harness/reward.py": "harness/reward.py",
    "./harness/reward.py": "harness/reward.py",
    "harness/./reward.py": "harness/reward.py",
    "harness/": "harness",
    "..harness/x.py": "..harness/x.py",  # a different name, not the parent: never under harness/
    ".harness/x.py": ".harness/x.py",
    "harness/.gitignore": "harness/.gitignore",
    "harness/réward.py": "harness/réward.py",
}


@pytest.mark.parametrize("path", REFUSED)
def test_odd_paths_are_refused_naming_the_path(path: str) -> None:
    with pytest.raises(PathRuleError) as info:
        normalise(path)
    assert repr(path[:20])[:-1] in str(info.value) or len(path) > 200


@pytest.mark.parametrize(("path", "canonical"), sorted(CANONICAL.items()))
def test_canonical_forms(path: str, canonical: str) -> None:
    assert normalise(path) == canonical
    assert normalise(canonical) == canonical  # idempotent


def test_root_only_when_asked() -> None:
    assert normalise("", allow_root=True) == normalise(".", allow_root=True) == normalise("./", allow_root=True) == ""
    with pytest.raises(PathRuleError):
        normalise("../", allow_root=True)


def _harness() -> Harness:
    manifest = Manifest.model_validate(
        {
            "name": "t",
            "domain": "math",
            "data": {"train": "data/train.jsonl", "val": "data/val.jsonl"},
            "reward": "harness/reward.py:compute_score",
            "eval": {"strict": "eval/strict.py:score"},
            "trainer": {"backend": "local", "config": "harness/trainer.yaml"},
            "surface": {"editable": ["harness/"], "protected": ["eval/", "data/val.jsonl", "evotrainer.yaml"]},
        }
    )
    return Harness(root=Path("/nonexistent"), manifest=manifest)


@pytest.mark.parametrize("path", [*REFUSED, "..harness/x.py", ".harness/x.py", "harnessx/y.py", "harness.py"])
def test_no_odd_path_is_editable(path: str) -> None:
    harness = _harness()
    assert not harness.is_editable(path)


@pytest.mark.parametrize("path", REFUSED)
def test_a_path_breaking_the_rule_counts_as_protected(path: str) -> None:
    assert _harness().is_protected(path)


def test_surface_compares_components_not_string_prefixes() -> None:
    harness = _harness()
    assert harness.is_editable("harness/reward.py") and harness.is_editable("./harness/sub/x.py")
    assert harness.is_protected("./eval/strict.py") and harness.is_protected("eval/./strict.py")
    assert harness.is_protected("./evotrainer.yaml")
    assert not harness.is_protected("evaluation/x.py") and not harness.is_editable("harness.py")


@pytest.mark.parametrize(
    "path", ["..harness/x.py", ".harness/x.py", ".../harness/x.py", "harness/.git/config", "harness/../eval/strict.py"]
)
def test_the_factor_check_refuses_odd_paths(path: str) -> None:
    diff = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n"
    check = check_candidate([path], diff, _harness(), declared_factors=("reward",))
    assert not check.ok and check.reason.startswith("refused")


def test_the_factor_check_reads_canonical_paths_like_the_surface() -> None:
    path = "./harness/reward.py"
    diff = "diff --git a/harness/reward.py b/harness/reward.py\n--- a/harness/reward.py\n+++ b/harness/reward.py\n"
    diff += "@@ -1 +1 @@\n-x = 0\n+x = 1\n"
    check = check_candidate([path], diff, _harness(), declared_factors=("reward",))
    assert check.ok and check.factors == ("reward",), check


def test_manifest_surface_entries_follow_the_rule() -> None:
    from pydantic import ValidationError

    raw = _harness().manifest.model_dump()
    raw["surface"] = {"editable": ["../outside/"], "protected": []}
    with pytest.raises(ValidationError, match="made of dots"):
        Manifest.model_validate(raw)
