"""The end-of-turn token is read from the chat template, not assumed.

`template_end_of_turn` renders one assistant turn and returns the special token right after its content;
a template that ends a turn with plain text, or no template, is refused in one line. A tiny word-level
tokenizer stands in for a real one (the real SmolLM2 folder: `tests/integration/test_smollm2_model_folder.py`).
"""

from __future__ import annotations

from typing import Any

import pytest

from trainer_backend.models import ModelError
from trainer_backend.models.convert import template_end_of_turn


def _tokenizer(template: str | None) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(["<unk>", "<|turn|>", "<s>", *"abcdefghijklmnopqrstuvwxyz \n:-"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<s>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|turn|>"]})
    tokenizer.chat_template = template
    return tokenizer


def test_the_token_after_an_assistant_message_is_the_end_of_turn_whatever_eos_says() -> None:
    template = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '<|turn|>' + '\n' }}{% endfor %}"
    tokenizer = _tokenizer(template)
    assert tokenizer.eos_token == "<s>"
    assert template_end_of_turn(tokenizer) == "<|turn|>"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}", "not a special token"),
        ("{% for m in messages %}{{ m['content'] }}{% endfor %}", "not a special token"),
        (None, "has no chat template"),
    ],
    ids=["plain-text-end", "nothing-after", "no-template"],
)
def test_a_template_that_never_writes_a_stop_token_is_refused(template: str | None, expected: str) -> None:
    with pytest.raises(ModelError, match=expected):
        template_end_of_turn(_tokenizer(template))
