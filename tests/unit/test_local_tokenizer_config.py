"""Char tokenizer, trainer config and data selection of the local backend.

Nothing about the vocabulary is fixed in code. It comes from the harness's data files plus the
manifest's special tokens (and alphabet order); a character a continued policy's vocabulary lacks is an
error naming the file, row, field and character. Data selection weighs the row field the manifest names.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.manifest import load_harness
from trainer_backend.local.artifacts import sample_rows
from trainer_backend.local.config import load_data_weights, load_trainer_config
from trainer_backend.local.model import CharTokenizer, TokenizerError
from trainer_backend.local.vocab import VocabularyError, tokenizer_for

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic-oracle"


def _demo_tokenizer() -> CharTokenizer:
    return tokenizer_for(load_harness(DEMO), "data/warmstart.jsonl", None)


def test_round_trip_with_single_token_specials() -> None:
    tok = _demo_tokenizer()
    text = "7*3=21;12+21=33<ans>33</ans>"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) == len("7*3=21;12+21=33") + 2 + 2  # each special token is one token
    assert tok.decode([tok.bos_id, *ids, tok.eos_id, *tok.encode("99")]) == text  # stops at EOS


def test_demo_vocabulary_is_the_declared_order_so_cached_warm_starts_stay_valid() -> None:
    # The manifest's special_tokens and alphabet pin the vocabulary the demo always had: same warm-start key.
    assert _demo_tokenizer().vocab == ["<pad>", "<bos>", "<eos>", "<ans>", "</ans>", *"0123456789+-*=;> "]


def test_unknown_character_is_rejected() -> None:
    with pytest.raises(TokenizerError, match="'x'"):
        _demo_tokenizer().encode("1+x")


def _letters_harness(tmp_path: Path) -> Path:
    """The demo harness turned into a letters task with a non-tag answer and no declared tokens."""
    root = tmp_path / "h"
    shutil.copytree(DEMO, root)
    manifest = (root / "evotrainer.yaml").read_text()
    manifest = manifest.replace("special_tokens: ['<ans>', '</ans>']\n", "").replace(
        "alphabet: '0123456789+-*=;> '\n", ""
    )
    manifest = manifest.replace(
        "pattern: '<ans>(.*?)</ans>', compare: integer", "pattern: 'ANSWER: (.*)', compare: exact"
    )
    (root / "evotrainer.yaml").write_text(manifest)
    rows = [{"prompt": f"reverse {w}:", "ground_truth": w[::-1], "data_source": "words"} for w in ("abc", "hello")]
    for name in ("train", "val"):
        (root / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "data" / "warmstart.jsonl").write_text(
        json.dumps({"prompt": "reverse ab:", "response": "ANSWER: ba"}) + "\n"
    )
    (root / "harness" / "data.yaml").write_text("weights: {words: 1.0}\n")
    return root


def test_vocabulary_comes_from_the_data_files_and_the_answer_protocol(tmp_path: Path) -> None:
    harness = load_harness(_letters_harness(tmp_path))
    tok = tokenizer_for(harness, "data/warmstart.jsonl", None)
    assert tok.vocab[:3] == ["<pad>", "<bos>", "<eos>"]
    assert sorted(tok.vocab[3:]) == tok.vocab[3:]  # nothing declared: the characters found, sorted
    assert set("reverse hello:ANSWER") <= set(tok.vocab)  # prompts, ground truths and the answer's written form
    assert tok.decode(tok.encode("reverse hello: ANSWER: olleh")) == "reverse hello: ANSWER: olleh"


def test_special_tokens_count_once_and_add_no_characters() -> None:
    tok = CharTokenizer.build(["<x>ab</x>", "b"], special_tokens=("<x>", "</x>"), alphabet="ba")
    assert tok.vocab == ["<pad>", "<bos>", "<eos>", "<x>", "</x>", "b", "a"]
    assert tok.encode("<x>ab</x>") == [3, 6, 5, 4]


def test_a_continued_policy_names_file_row_and_character_it_cannot_read(tmp_path: Path) -> None:
    root = _letters_harness(tmp_path)
    harness = load_harness(root)
    policy = tokenizer_for(harness, "data/warmstart.jsonl", None).vocab
    with (root / "data" / "train.jsonl").open("a") as fh:
        fh.write(json.dumps({"prompt": "reverse zz!:", "ground_truth": "!zz", "data_source": "words"}) + "\n")
    with pytest.raises(VocabularyError, match=r"data/train\.jsonl:3: field 'prompt' has character 'z'") as err:
        tokenizer_for(harness, "data/warmstart.jsonl", policy)
    assert err.value.path == "data/train.jsonl"
    assert "'z'" in str(tokenizer_for(harness, "data/warmstart.jsonl", None).vocab)  # a fresh policy learns it


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


def test_weights_select_only_weighted_values_of_the_declared_field(tmp_path: Path) -> None:
    path = tmp_path / "data.yaml"
    path.write_text("weights: {easy: 0, hard/x: 1}\n")
    weights = load_data_weights(path)
    assert weights == {"easy": 0.0, "hard/x": 1.0}
    rows = [{"prompt": str(i), "data_source": "easy" if i % 2 else "hard/x", "tier": i % 3} for i in range(20)]
    assert {r["data_source"] for r in sample_rows(rows, weights, "data_source", 50, random.Random(0))} == {"hard/x"}
    assert {r["tier"] for r in sample_rows(rows, {"2": 1.0}, "tier", 20, random.Random(0))} == {2}  # keys as text
    path.write_text("weights: {easy: 0}\n")
    with pytest.raises(ValueError, match="at least one weight"):
        load_data_weights(path)
    path.write_text("level_weights: {1: 1.0}\n")
    with pytest.raises(ValueError, match=r"exactly one field 'weights: \{value: weight\}'"):
        load_data_weights(path)
    with pytest.raises(ValueError, match=r"match no row's field 'data_source'.*its rows hold 'easy', 'hard/x'"):
        sample_rows(rows, {"gsm8k": 1.0}, "data_source", 1, random.Random(0))


def test_the_warm_start_cache_key_follows_the_vocabulary(tmp_path: Path) -> None:
    from trainer_backend.local.config import LocalTrainerConfig
    from trainer_backend.local.warmstart import cache_key

    shape, data = LocalTrainerConfig().shape(), b"rows"
    plain = CharTokenizer.build(["<x>ab"], alphabet="ab")
    special = CharTokenizer.build(["<x>ab"], special_tokens=("<x>",), alphabet="ab")
    reordered = CharTokenizer.build(["<x>ab"], alphabet="ba")

    def key(tok: CharTokenizer, *rest: Any) -> str:
        return cache_key(data, {"shape": shape.__dict__, "vocab": tok.vocab}, 10, 0, *rest)

    keys = {key(t) for t in (plain, special, reordered)}
    assert len(keys) == 3  # a changed vocabulary never loads a warm start trained for another
    again = CharTokenizer.build(["ab<x>", "b"], alphabet="ab")
    assert key(again) == key(plain)
    # the key covers any model; the tiny model's keys stay what they were (caches stay valid)
    assert key(plain) == "ea0e881e22baa43fba5d6ea7"
    assert key(plain, "<obs>{result}</obs>") == "467035e96cd416ec347e2bf7"
