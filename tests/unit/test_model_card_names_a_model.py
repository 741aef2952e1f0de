"""The model card (`diagnostics.model_card`): read back as written, tolerant of bad summaries, and its identity
tells another model under the same path from the same one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnostics.model_card import ModelCard, card_from_json, read_card

CARD = ModelCard(
    path="/models/qwen",
    architecture="Qwen2ForCausalLM",
    model_type="qwen2",
    parameters=1_234_567,
    tokenizer_class="Qwen2TokenizerFast",
    vocab_size=151_665,
    weights_sha256="ab" * 32,
    dtype="float32",
    device="cpu",
    start_weights_sha256="cd" * 32,
)


def test_card_reads_back_from_summary_json(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"outcome": "ok", "model": CARD.as_json()}))
    assert read_card(tmp_path) == CARD
    assert CARD.line() == (
        "/models/qwen (Qwen2ForCausalLM, qwen2; 1.2M parameters; tokenizer Qwen2TokenizerFast, 151665 ids; "
        "weights sha256 abababababababab; float32 on cpu)"
    )


@pytest.mark.parametrize("summary", ["{", '{"model": 3}', '{"model": {"path": "x"}}', "[]", '{"outcome": "ok"}'])
def test_a_summary_without_a_readable_card_gives_none(tmp_path: Path, summary: str) -> None:
    (tmp_path / "summary.json").write_text(summary)
    assert read_card(tmp_path) is None
    assert read_card(tmp_path / "missing") is None


def test_identity_compares_architecture_size_and_a_folder_s_weights() -> None:
    from dataclasses import replace

    same = replace(CARD, device="cuda:0", dtype="bfloat16", start_weights_sha256="ef" * 32)
    assert same.identity() == CARD.identity()  # where and how it ran, and where step 1 began, are not the model
    assert replace(CARD, weights_sha256="00" * 32).identity() != CARD.identity()
    assert replace(CARD, architecture="LlamaForCausalLM").identity() != CARD.identity()
    tiny = replace(CARD, path="tiny")  # seeded init: each run's own, not the model's identity
    assert replace(tiny, weights_sha256="00" * 32).identity() == tiny.identity()
    assert replace(tiny, parameters=9).identity() != tiny.identity()
    assert card_from_json(CARD.as_json()) == CARD
