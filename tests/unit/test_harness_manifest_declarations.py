"""The manifest declares what the core used to assume: answer writing, tokens, the selection field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.answers import AnswerProtocol, derive_template
from harness.manifest import HarnessError, load_harness

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"


@pytest.mark.parametrize(
    ("pattern", "written"),
    [
        (r"<ans>(.*?)</ans>", "<ans>42</ans>"),
        (r"ANSWER: (\S+)", "ANSWER: 42"),
        (r"^####\s*(.*)$", "####42"),
        (r"\\boxed\{([^}]*)\}", "\\boxed{42}"),
        (r"Final:\s+(?P<a>.+)", "Final: 42"),
    ],
)
def test_a_plain_pattern_derives_how_an_answer_is_written(pattern: str, written: str) -> None:
    proto = AnswerProtocol(pattern=pattern)
    assert proto.render("42") == written
    assert proto.extract(written) == "42"


@pytest.mark.parametrize("pattern", [r"(?:<a>|<b>)(.*)", r"<ans>(\d+)?", r"\d+: (.*)", r"[Aa]nswer: (.*)"])
def test_a_pattern_without_one_written_form_needs_a_template(pattern: str) -> None:
    assert derive_template(pattern) is None
    with pytest.raises(ValueError, match="declare how an answer is written"):
        AnswerProtocol(pattern=pattern).render("x")
    declared = AnswerProtocol(pattern=pattern, template="answer: {answer}")
    assert declared.render("x") == "answer: x"
    with pytest.raises(ValueError, match="must contain"):
        AnswerProtocol(pattern=pattern, template="no mark")


def test_demo_manifest_declares_its_tokens_and_defaults_the_selection_field() -> None:
    manifest = load_harness(DEMO).manifest
    assert manifest.special_tokens == ("<ans>", "</ans>") and manifest.alphabet == "0123456789+-*=;> "
    assert manifest.data.select_by == "data_source"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("special_tokens: ['x']\n", "at least 2 characters"),
        ("special_tokens: ['<eos>']\n", "reserved"),
        ("special_tokens: ['<a>', '<a>']\n", "repeat"),
        ("alphabet: 'abca'\n", "repeats 'a'"),
    ],
)
def test_bad_token_declarations_name_the_field(tmp_path: Path, text: str, match: str) -> None:
    root = tmp_path / "h"
    shutil.copytree(DEMO, root)
    manifest = (root / "evotrainer.yaml").read_text()
    manifest = "\n".join(x for x in manifest.splitlines() if not x.startswith(("special_tokens", "alphabet")))
    (root / "evotrainer.yaml").write_text(manifest + "\n" + text)
    field = text.split(":")[0]
    with pytest.raises(HarnessError, match=rf"field '{field}.*{match}"):
        load_harness(root)


def test_an_unwritable_answer_protocol_is_refused_at_load(tmp_path: Path) -> None:
    root = tmp_path / "h"
    shutil.copytree(DEMO, root)
    text = (root / "evotrainer.yaml").read_text()
    old = "answer: {pattern: '<ans>(.*?)</ans>', compare: integer, final: true}"
    (root / "evotrainer.yaml").write_text(text.replace(old, r"answer: {pattern: '[Aa]nswer: (\d+)'}"))
    with pytest.raises(HarnessError, match=r"field 'answer'.*add answer.template"):
        load_harness(root)
    (root / "evotrainer.yaml").write_text(
        text.replace(old, r"answer: {pattern: '[Aa]nswer: (\d+)', template: 'Answer: {answer}'}")
    )
    assert load_harness(root).manifest.answer.render("7") == "Answer: 7"  # type: ignore[union-attr]
