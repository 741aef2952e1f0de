"""The report shows a chat model's text readably: special-token texts stand apart, the rest is
escaped text with its line breaks (a model that runs past its end of turn writes the chat markup itself)."""

from __future__ import annotations

from agent.reporting.rollouts_html import chat_text


def test_special_tokens_become_chips_and_everything_else_stays_escaped_text() -> None:
    ran_on = "<ans>21</ans><|im_end|>\n<|im_start|>user\n17+4=<script>x</script><|eot_id|>"
    shown = chat_text(ran_on)
    chip = '<span class="special" title="special token">&lt;|{}|&gt;</span>'
    assert shown.count('class="special"') == 3
    for name in ("im_end", "im_start", "eot_id"):
        assert chip.format(name) in shown
    assert "&lt;ans&gt;21&lt;/ans&gt;" in shown and "&lt;script&gt;" in shown and "<script>" not in shown
    assert "</span>\n<span" in shown and "user\n17+4=" in shown  # line breaks kept (the cell is pre-wrap)


def test_text_that_only_looks_like_markup_is_left_as_text() -> None:
    for plain in ("a <| b |> c", "x<||>y", "<|two words|>", "17 | 4 > 3"):
        assert 'class="special"' not in chat_text(plain), plain
