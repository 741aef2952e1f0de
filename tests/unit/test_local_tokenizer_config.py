"""Char tokenizer, trainer config and data selection of the local backend (issue #3)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from trainer_backend.local.artifacts import sample_rows
from trainer_backend.local.config import load_level_weights, load_trainer_config
from trainer_backend.local.model import CharTokenizer, TokenizerError


def test_round_trip_with_single_token_tags() -> None:
    tok = CharTokenizer()
    text = "7*3=21;12+21=33<ans>33</ans>"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) == len("7*3=21;12+21=33") + 2 + 2  # each tag is one token
    assert tok.decode([tok.bos_id, *ids, tok.eos_id, *tok.encode("99")]) == text  # stops at EOS


def test_unknown_character_is_rejected() -> None:
    with pytest.raises(TokenizerError, match="'x'"):
        CharTokenizer().encode("1+x")


def test_trainer_config_errors_name_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "trainer.yaml"
    path.write_text("lr: 1e-3\ngroup_size: 1\n")
    with pytest.raises(ValueError, match=r"trainer.yaml: field 'group_size'"):
        load_trainer_config(path)
    path.write_text("lr: 1e-3\nbogus: 3\n")
    with pytest.raises(ValueError, match="field 'bogus'"):
        load_trainer_config(path)
    path.write_text("max_new_tokens: 20\n")
    assert load_trainer_config(path).max_new_tokens == 20


def test_level_weights_select_only_weighted_levels(tmp_path: Path) -> None:
    path = tmp_path / "data.yaml"
    path.write_text("level_weights: {1: 0, 2: 1}\n")
    weights = load_level_weights(path)
    rows = [{"prompt": str(i), "level": 1 + i % 2} for i in range(20)]
    drawn = sample_rows(rows, weights, 50, random.Random(0))
    assert {r["level"] for r in drawn} == {2}
    path.write_text("level_weights: {1: 0}\n")
    with pytest.raises(ValueError, match="at least one weight"):
        load_level_weights(path)
    with pytest.raises(ValueError, match="match no training level"):
        sample_rows(rows, {7: 1.0}, 1, random.Random(0))
