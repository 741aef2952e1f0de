"""The report's Rollouts section: sampled responses per run, with chat text shown readably.

A response is decoded up to its stop token with special tokens kept (`trainer_backend/local/hf.py`), so a
model that runs past its end of turn shows the chat markup it wrote (``<|im_start|>user``...). Those
special-token texts are set apart as marked chips, whitespace and line breaks are kept, and everything
else is escaped text.
"""

from __future__ import annotations

import re

from agent.reporting.cells import esc, html_table, note_divs, num
from agent.reporting.records import SessionReport

VIEWER_JS = """
(function () {
  var select = document.getElementById("rollout-select");
  if (!select) { return; }
  function show() {
    var panels = document.getElementsByClassName("rollout-panel");
    for (var i = 0; i < panels.length; i++) {
      panels[i].classList.toggle("shown", panels[i].id === select.value);
    }
  }
  select.addEventListener("change", show);
  show();
  select.setAttribute("data-ready", "1");
})();
"""

# A chat model's special-token text (ChatML ``<|im_end|>``, Llama 3 ``<|eot_id|>``...) once HTML-escaped.
_SPECIAL = re.compile(r"&lt;\|[^\s&|]{1,40}\|&gt;")


def chat_text(text: str) -> str:
    """`text` escaped for HTML, with each special-token text in a `special` chip (its text kept, for copying)."""
    return _SPECIAL.sub(lambda m: f'<span class="special" title="special token">{m.group(0)}</span>', esc(text))


def rollouts_section(r: SessionReport) -> str:
    if not r.rollouts:
        return '<section id="rollouts"><h2>Rollouts</h2><p>No runs to sample from.</p></section>'
    options, panels = [], []
    for n, run in enumerate(r.rollouts):
        panel_id = f"rollouts-{n}"
        options.append(f'<option value="{panel_id}">{esc(run.label)} ({len(run.samples)} samples)</option>')
        rows = (
            (
                esc(s.split),
                str(s.step),
                f"<code>{esc(s.prompt_id)}</code>#{s.sample_index}",
                f'<span class="text">{chat_text(s.prompt)}</span>',
                f'<span class="text">{chat_text(s.response)}</span>',
                num(s.reward),
                num(s.strict_score),
                esc(s.stop_reason) + (" (truncated)" if s.truncated else ""),
                str(s.response_tokens),
            )
            for s in run.samples
        )
        header = ("split", "step", "prompt id", "prompt", "response", "reward", "strict", "stop reason", "tokens")
        table = html_table(f"rollout-table-{n}", header, rows, cls="rollout-table") if run.samples else ""
        body = f"<h3>{esc(run.label)} <code>{esc(run.run_id)}</code></h3>{note_divs([run.note] if run.note else [])}"
        panels.append(f'<div class="rollout-panel" id="{panel_id}" data-run="{esc(run.run_id)}">{body}{table}</div>')
    intro = (
        "<p>Sampled responses of each version and each pilot: from the last validation step (strict score from "
        "the protected evaluator) and the last training step; rewarded-but-wrong answers first. Texts are cut to "
        "a few hundred characters.</p>"
    )
    select = f'<label>run <select id="rollout-select">{"".join(options)}</select></label>'
    return f'<section id="rollouts"><h2>Rollouts</h2>{intro}{select}{"".join(panels)}</section>'
