"""Nothing the model can call returns a held-out prompt, response or reference answer.

Before the fix ``read_file data/val.jsonl`` was refused, yet ``sample_rollouts(split="val")`` printed each
held-out prompt with its answer and ``run_analysis`` received ``val.jsonl`` itself. The rule is stated once
(`agent.adapters.held_out.HELD_OUT_RULE`, `held_out_scores`); here every registered tool is called with arguments
aimed at the held-out set (a tool added without a probe fails the test), over a real session whose held-out
rollouts carry a marker in their prompt, response, reference answer and reward components. Scripts the
model writes (analyses, proposed diagnostics, the harness's analyzers) see held-out scores only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm_session import fake_session

from agent.adapters.held_out import HELD_OUT_SCORES, HELD_OUT_SPLIT
from agent.llm.tools import Toolbox
from harness.manifest import load_harness

MARK = "HELDOUT"
SEARCH = f"""
import json, os
folder = os.environ["EVOTRAINER_INPUTS_DIR"]
names = sorted(os.listdir(folder))
found = [n for n in names if {MARK!r} in open(os.path.join(folder, n), errors="replace").read()]
fields = sorted({{k for n in names if n.startswith("val") for line in open(os.path.join(folder, n))
                 for k in json.loads(line)}})
json.dump({{"names": names, "found": found, "val_fields": fields}}, open(os.path.join(
    os.environ["EVOTRAINER_RESULTS_DIR"], "out.json"), "w"))
"""
ANALYZER = f"""
import json, os
folder = os.environ["EVOTRAINER_INPUTS_DIR"]
text = "".join(open(os.path.join(folder, n), errors="replace").read() for n in os.listdir(folder))
json.dump({{"metrics": {{"held_out_seen": float({MARK!r} in text), "inputs": float(len(os.listdir(folder)))}}}},
          open(os.path.join(os.environ["EVOTRAINER_RESULTS_DIR"], "out.json"), "w"))
"""
COPY_VAL = (
    'diff --git "a/data/val.jsonl" "b/harness/v.jsonl"\nsimilarity index 100%\ncopy from "data/val.jsonl"\n'
    'copy to "harness/v.jsonl"\n'
)
# every registered tool, with the arguments most likely to reach the held-out set; run in this order
PROBES: dict[str, list[dict[str, Any]]] = {
    "read_health_report": [{}],
    "sample_rollouts": [
        {"split": "val", "limit": 20},
        {"split": "val", "reward_min": 0.0},
        {"split": "val", "step": 3, "limit": 20},
        {"split": "train", "limit": 20},
    ],
    "run_analysis": [{"script": SEARCH}],
    "list_files": [{}, {"path": "data"}],
    "read_file": [{"path": "data/val.jsonl"}, {"path": "harness/reward.py"}],
    "search_skills": [{}],
    "search_cases": [{}],
    "create_candidate": [{"slug": "probe", "factors": ["diagnostic"], "hypothesis": "h", "success_criterion": "c"}],
    "write_file": [{"path": "harness/diagnostics/v.jsonl", "content": "x\n"}],
    "apply_patch": [{"diff": COPY_VAL}],
    "propose_diagnostic": [{"name": "held_out_probe", "script": ANALYZER}],
    "request_backtest": [{}],
    "submit_candidate": [{"title": "probe"}],
    "finish": [{"summary": "done"}],
}


def _mark_held_out(run_dir: Path) -> None:
    """Give every held-out rollout a marker in each field that could carry text or an answer."""
    from dataclasses import replace

    from diagnostics.schema import ReadResult, read_rollout_file, rollout_files, write_rollouts

    for path in rollout_files(run_dir, HELD_OUT_SPLIT):
        read = ReadResult()
        read_rollout_file(path, read)
        rows = [
            replace(r, prompt=f"{MARK}-prompt {r.prompt}", response=f"{MARK}-response", ground_truth=f"{MARK}-answer",
                    reward_components={f"{MARK}-component": 1.0})
            for r in read.rollouts
        ]  # fmt: skip
        assert rows
        write_rollouts(path, rows)


@pytest.fixture
def box(tmp_path: Path, git_available: None, docker_client: Any) -> Toolbox:
    """The tools of a session on the docker sandbox, the only one model-written scripts run in."""
    from diagnostics.report import build_report
    from sandboxes.image import ensure_image

    ensure_image(docker_client)
    ctx, state = fake_session(tmp_path, max_candidates=1, sandbox="docker")
    run_dir = Path(state["version"]["run_dir"])
    _mark_held_out(run_dir)
    state["report"] = build_report(run_dir).to_json()
    return Toolbox(ctx, state, load_harness(Path(state["harness_dir"])))  # type: ignore[arg-type]


def test_every_tool_keeps_held_out_text_and_answers_from_the_model(box: Toolbox) -> None:
    assert set(PROBES) == set(box.tools), "a new tool needs a held-out probe here"
    replies = {name: [box.call(name, args) for args in calls] for name, calls in PROBES.items()}
    for name, texts in replies.items():
        for text in texts:
            assert MARK not in text, (name, text[:600])
    val, rejected, by_step, train = replies["sample_rollouts"]
    assert "held-out rollouts match" in val and "strict" in val and "answer:" not in val
    assert rejected.startswith("ERROR:") and "scores only" in rejected
    assert by_step.count("\n- ") == 8 and "/3/" in by_step  # two prompts of four samples at step 3
    assert "answer:" in train  # training rollouts are shown whole
    analysis = json.loads(replies["run_analysis"][0].split("out.json: ", 1)[1])
    assert analysis["names"] == ["train.jsonl", "train_all.jsonl", "val_scores.jsonl"]
    assert analysis["found"] == [] and set(analysis["val_fields"]) <= set(HELD_OUT_SCORES)
    assert "'held_out_seen': 0.0" in replies["propose_diagnostic"][0], replies["propose_diagnostic"][0]
    assert replies["read_file"][0].startswith("ERROR:") and "protected" in replies["read_file"][0]


def test_scripts_the_model_writes_never_run_outside_docker(tmp_path: Path, git_available: None) -> None:
    """In process mode a script would run as the controller's user, able to open the held-out file by its path."""
    from diagnostics.report import build_report

    ctx, state = fake_session(tmp_path, max_candidates=1, sandbox="process")
    state["report"] = build_report(Path(state["version"]["run_dir"])).to_json()
    box = Toolbox(ctx, state, load_harness(Path(state["harness_dir"])))  # type: ignore[arg-type]
    read_val = "import os\nprint(open(os.path.abspath('data/val.jsonl')).read())\n"
    analysis = box.call("run_analysis", {"script": read_val})
    assert analysis.startswith("ERROR:") and "docker sandbox" in analysis and "process" in analysis
    box.call("create_candidate", {"slug": "d", "factors": ["diagnostic"], "hypothesis": "h", "success_criterion": "c"})
    diagnostic = box.call("propose_diagnostic", {"name": "probe", "script": read_val})
    assert diagnostic.startswith("ERROR:") and "docker sandbox" in diagnostic
    assert box._analyses == 0, "a refused script spends nothing"
    assert not list(tmp_path.rglob("probe.py")), "a refused diagnostic writes nothing"


def test_the_harness_analyzers_see_held_out_scores_only(tmp_path: Path, git_available: None) -> None:
    """An analyzer the model wrote runs again on later runs; its metrics reach the health report."""
    from agent.adapters.analyzers import run_analyzer

    _, state = fake_session(tmp_path, max_candidates=1)
    run_dir = Path(state["version"]["run_dir"])
    _mark_held_out(run_dir)
    script = tmp_path / "held_out_probe.py"
    script.write_text(ANALYZER)
    assert run_analyzer(script, run_dir, "process") == {"held_out_seen": 0.0, "inputs": 2.0}


@pytest.mark.llm
def test_the_model_never_receives_held_out_text_over_the_wire(box: Toolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real entry point: `ChatOpenAI` over HTTP against the scripted mock server, every held-out probe."""
    from mock_openai import MockOpenAI

    from agent.policies.llm import propose_with_llm

    calls = [
        {"id": f"{name}{i}", "name": name, "arguments": args}
        for name in ("sample_rollouts", "run_analysis", "read_file", "propose_diagnostic")
        for i, args in enumerate(PROBES[name])
    ]
    script = [{"tool_calls": calls}, {"tool_calls": [{"id": "done", "name": "finish", "arguments": {"summary": "x"}}]}]
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    with MockOpenAI(script) as mock:
        monkeypatch.setenv("OPENAI_BASE_URL", mock.base_url)
        outcome = propose_with_llm(box.ctx, box.state, box.harness)
    assert outcome.note == "" and len(mock.requests) == 2
    answers = mock.tool_messages(1)
    assert sorted(answers) == sorted(c["id"] for c in calls)
    assert "held-out rollouts match" in answers["sample_rollouts0"]
    assert '"found": []' in answers["run_analysis0"] or "'found': []" in answers["run_analysis0"]
    for request in mock.requests:  # what the session sent: prompts and tool answers (the calls quote the scripts)
        sent = [m for m in request["messages"] if m["role"] != "assistant"]
        assert sent and MARK not in json.dumps(sent), "a held-out prompt, response or answer reached the model"
