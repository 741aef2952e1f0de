"""A candidate may not point the trainer at another model.

`model:` (local) and `model_path` (verl) name a folder the trainer loads outside the sandbox; a candidate
that set them could make a run load any folder on the host. The model that trains is fixed for a session: a
candidate that changes it, in any YAML spelling, is refused at submit with the setting named, and its
worktree goes back to its base commit. Real `ChatOpenAI` over HTTP against the scripted mock server, real
git worktrees and store.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from llm_session import fake_session
from mock_openai import MockOpenAI

from agent.policies.llm import propose_with_llm
from harness.manifest import load_harness

pytestmark = pytest.mark.llm


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": args}


def _submit_settings(tmp_path: Path, edit: Any) -> tuple[str, dict[str, Any], Path, Path]:
    """One candidate rewrites harness/trainer.yaml with `edit(text)` and submits; (reply, candidate, base, wt)."""
    ctx, state = fake_session(tmp_path, max_candidates=1)
    base = Path(state["harness_dir"]) / "harness" / "trainer.yaml"
    script = [
        {"tool_calls": [_call("open", "create_candidate", slug="swap", factors=["trainer"], hypothesis="h",
                              success_criterion="c")]},
        {"tool_calls": [_call("write", "write_file", path="harness/trainer.yaml", content=edit(base.read_text()))]},
        {"tool_calls": [_call("submit", "submit_candidate", title="t")]},
    ]  # fmt: skip
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        outcome = propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    assert mock.reply_to("write")[1].startswith("wrote harness/trainer.yaml")
    sid = state["session_id"]
    wt = ctx.session_dir(sid) / "worktrees" / sid / "v1.1-swap"
    return mock.reply_to("submit")[1], outcome.candidates[0], base, wt


@pytest.mark.parametrize(
    "edit",
    [
        lambda text, host: text + f"model: {host}\n",
        lambda text, host: text + f'"model": "{host}"\n',
        lambda text, host: text.replace("lr:", f"model: {host}\nlr:"),
        lambda text, host: yaml.safe_dump({**yaml.safe_load(text), "model": str(host)}, default_flow_style=True),
    ],
    ids=["plain", "quoted", "first-key", "flow-mapping"],
)
def test_a_candidate_that_points_the_trainer_at_a_host_folder_is_refused(
    tmp_path: Path, git_available: None, edit: Any
) -> None:
    host = tmp_path / "host-model"
    host.mkdir()
    (host / "config.json").write_text("{}")
    reply, cand, base, wt = _submit_settings(tmp_path, lambda text: edit(text, host))
    assert reply.startswith("REFUSED:") and "harness/trainer.yaml:model" in reply, reply
    assert "fixed for the session" in reply
    assert cand["status"] == "refused"
    assert (wt / "harness" / "trainer.yaml").read_text() == base.read_text()  # restored to its base commit


def test_a_settings_change_that_keeps_the_model_is_not_refused_for_it(tmp_path: Path, git_available: None) -> None:
    reply, cand, _, _ = _submit_settings(tmp_path, lambda text: re.sub(r"(?m)^lr: .*$", "lr: 5.0e-5", text))
    assert "fixed for the session" not in reply
    assert cand["status"] != "refused", cand["reason"]


def test_settings_that_do_not_parse_are_not_called_a_model_swap(tmp_path: Path, git_available: None) -> None:
    """A broken settings file is its run's problem (named there), not a model change."""
    reply, _, _, _ = _submit_settings(tmp_path, lambda text: text + "lr: [unclosed\n")
    assert "fixed for the session" not in reply, reply
