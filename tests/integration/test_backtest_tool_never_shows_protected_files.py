"""What `request_backtest` returns never carries the text of a protected file (held-out data, strict evaluator).

Under the process sandbox an edited reward runs as the controller's user: one that opened
``data/val.jsonl`` and ``eval/strict.py`` next to it and raised with their text had both sent back verbatim
in the tool reply. There the tool is refused, like the model's scripts, before anything runs or is spent.
Under Docker the protected files are not in the sandbox; whatever a candidate's failure text says still
reaches the model capped, with each line that quotes a protected file withheld. Real `ChatOpenAI` against
the mock server, real git worktrees and store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm_session import fake_session
from mock_openai import MockOpenAI

from agent.llm.tool_base import MAX_CANDIDATE_TEXT_CHARS, WITHHELD
from agent.policies.llm import propose_with_llm
from harness.manifest import load_harness

pytestmark = pytest.mark.llm
READS_PROTECTED = (
    "from pathlib import Path\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    root = Path(__file__).resolve().parents[1]\n"
    "    raise ValueError((root / 'data' / 'val.jsonl').read_text() + (root / 'eval' / 'strict.py').read_text())\n"
)
QUOTES = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    raise ValueError({quoted!r} + 'x' * 20000)\n"
)


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": args}


def _script(reward: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [_call("open", "create_candidate", slug="leak", factors=["reward"],
                              hypothesis="If the reward changes, strict accuracy rises.",
                              success_criterion="strict held-out accuracy above the control")]},
        {"tool_calls": [_call("write", "write_file", path="harness/reward.py", content=reward)]},
        {"tool_calls": [_call("backtest", "request_backtest")]},
        {"tool_calls": [_call("done", "finish", summary="done")]},
    ]  # fmt: skip


def _run(ctx: Any, state: dict[str, Any], reward: str) -> MockOpenAI:
    with MockOpenAI(_script(reward)) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    return mock


def _protected_marks(root: Path) -> list[str]:
    val = [json.loads(line) for line in (root / "data" / "val.jsonl").read_text().splitlines()]
    return [v["prompt_id"] for v in val] + [v["prompt"] for v in val[:20]] + ["Protected strict evaluator", "_ANSWER"]


def test_the_process_sandbox_refuses_to_backtest_edited_code(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1, sandbox="process")
    mock = _run(ctx, state, READS_PROTECTED)
    assert mock.reply_to("write")[1].startswith("wrote harness/reward.py")
    reply = mock.reply_to("backtest")[1]
    assert reply.startswith("ERROR:") and "docker sandbox" in reply and "request_backtest are off" in reply, reply
    sent = json.dumps(mock.requests)
    for mark in _protected_marks(Path(state["harness_dir"])):
        assert mark not in sent, mark
    assert not (ctx.session_dir(state["session_id"]) / "llm" / "iter1" / "backtests").exists(), "nothing ran"


def test_a_failure_that_quotes_a_protected_file_is_capped_and_withheld(
    tmp_path: Path, git_available: None, docker_client: Any
) -> None:
    from sandboxes.image import ensure_image

    ensure_image(docker_client)
    ctx, state = fake_session(tmp_path, max_candidates=1, sandbox="docker")
    root = Path(state["harness_dir"])
    val_line = (root / "data" / "val.jsonl").read_text().splitlines()[3]
    strict_line = next(line for line in (root / "eval" / "strict.py").read_text().splitlines() if "_ANSWER" in line)
    mock = _run(ctx, state, QUOTES.format(quoted=f"{val_line}\n{strict_line}\nmy own words\n"))
    reply = mock.reply_to("backtest")[1]
    assert '"outcome": "candidate_error"' in reply, reply
    assert WITHHELD in reply and "my own words" in reply, reply
    assert json.loads(val_line)["prompt_id"] not in reply and "_ANSWER" not in reply, reply
    assert "xxxxx" in reply and len(reply) < MAX_CANDIDATE_TEXT_CHARS + 1000, len(reply)
