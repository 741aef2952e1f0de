"""A run records the model it trained (summary.json, `status`, the report), and refuses another model under
the same path: a resume or a candidate continuing a checkpoint of a model whose folder has since changed.

Real short trainings: the tiny model, and a random-init Qwen2 folder loaded through ``from_pretrained``
(`tests/hf_models.py`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from diagnostics.model_card import DIGEST_CHARS, read_card
from harness.failures import Outcome
from trainer_backend.base import RunSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = """lr: 1.0e-3
group_size: 2
prompts_per_step: 2
max_new_tokens: 12
val_every: 1
n_layers: 1
hidden: 32
warmstart_steps: 5
"""
HF = """model: {folder}
prompt_format: chat
lr: 1.0e-3
group_size: 2
prompts_per_step: 2
max_new_tokens: 12
val_every: 1
warmstart_steps: 0
"""

pytestmark = pytest.mark.slow


def _harness(tmp_path: Path, settings: str, hf: bool = False) -> Path:
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", root)
    if hf:  # a pretrained tokenizer writes the answer tags as text: the manifest declares no one-id tokens
        manifest = (root / "evotrainer.yaml").read_text().splitlines()
        kept = [line for line in manifest if not line.startswith(("special_tokens:", "alphabet:"))]
        (root / "evotrainer.yaml").write_text("\n".join(kept) + "\n")
    (root / "harness" / "trainer.yaml").write_text(settings)
    val = (root / "data" / "val.jsonl").read_text().splitlines()
    (root / "data" / "val.jsonl").write_text("\n".join(val[::25]) + "\n")
    return root


def _train(harness: Path, out: Path, steps: int, **kw: object) -> dict[str, object]:
    from trainer_backend.local import train

    out.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(run_id=out.name, harness_dir=harness, out_dir=out, steps=steps, **kw)  # type: ignore[arg-type]
    (out / "spec.json").write_text(spec.model_dump_json())
    train.main(["--spec", str(out / "spec.json"), *(["--resume"] if kw.get("resume") else [])])
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    return summary


def test_tiny_run_records_its_model_in_summary_status_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from trainer_backend.local.model_card import weights_digest

    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    harness = _harness(tmp_path, TINY)
    out = tmp_path / "sessions" / "s0" / "runs" / "s0-control"
    summary = _train(harness, out, steps=1)
    assert summary["outcome"] == "ok", summary
    card = read_card(out)
    assert card is not None
    start = torch.load(out / "checkpoints" / "start.pt", weights_only=True)["model"]
    assert (card.path, card.architecture, card.model_type) == ("tiny", "LlamaForCausalLM", "llama")
    shared = {t.data_ptr(): t for t in start.values()}  # the output layer shares the embedding's weights
    assert card.parameters == sum(t.numel() for t in shared.values()) < sum(t.numel() for t in start.values())
    assert (card.tokenizer_class, card.dtype, card.device) == ("CharTokenizer", "float32", "cpu")
    assert card.vocab_size == len(json.loads((out / "config.json").read_text())["vocab"])
    assert card.start_weights_sha256 == weights_digest(start)  # step 1 trained from the warm-started weights
    assert card.weights_sha256 != card.start_weights_sha256  # the seeded init, before the warm start

    from seeded_store import seeded_store

    from store import repository as repo
    from store.engine import make_engine, session_scope

    url = seeded_store(tmp_path, "s0", seeded=False)
    engine = make_engine(url)
    with session_scope(engine) as db:
        repo.add_run(db, run_id="s0-control", session_id="s0", backend="local", kind="pilot", steps=1,
                     artefact_dir=str(out))  # fmt: skip
    from typer.testing import CliRunner

    from agent.cli import app

    shown = CliRunner().invoke(app, ["status", "s0", "--db", url], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert f"model: {card.line()}" in " ".join(shown.output.split())

    from sqlalchemy.orm import Session

    from agent.reporting.gather import gather_session
    from agent.reporting.html import render_html

    with Session(engine) as db:
        report = gather_session(db, "s0")
    engine.dispose()
    assert [m.card for m in report.models] == [card]
    page = render_html(report)
    assert "model trained" in page and card.weights_sha256[:DIGEST_CHARS] in page and "LlamaForCausalLM" in page


def test_hf_run_records_its_model_and_refuses_a_changed_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hf_arith_folder: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer_backend.local.model_card import weights_digest

    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    shutil.copytree(hf_arith_folder, folder)
    harness = _harness(tmp_path, HF.format(folder=folder), hf=True)
    parent = tmp_path / "runs" / "parent"
    summary = _train(harness, parent, steps=1)
    assert summary["outcome"] == "ok", summary
    card = read_card(parent)
    assert card is not None
    shipped = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert (card.path, card.architecture, card.model_type) == (str(folder), "Qwen2ForCausalLM", "qwen2")
    assert card.parameters == sum(p.numel() for p in shipped.parameters())
    assert (card.tokenizer_class, card.vocab_size) == (type(tokenizer).__name__, len(tokenizer))
    assert card.weights_sha256 == weights_digest(shipped.state_dict())  # the folder's weights as shipped
    assert card.start_weights_sha256 == card.weights_sha256  # no warm start: step 1 trained from them

    with torch.no_grad():  # another model under the same path: the same architecture, other weights
        next(shipped.parameters()).add_(0.01)
    shipped.save_pretrained(folder)
    changed = weights_digest(shipped.state_dict())[:DIGEST_CHARS]

    pilot = _train(harness, tmp_path / "runs" / "pilot", steps=1, init_checkpoint=parent / "checkpoints" / "last.pt")
    assert pilot["outcome"] == Outcome.CANDIDATE_ERROR.value
    message = str(pilot["message"])
    assert "last.pt was trained on" in message and card.weights_sha256[:DIGEST_CHARS] in message
    assert changed in message and "a lineage keeps its model" in message

    (parent / "summary.json").unlink()
    resumed = _train(harness, parent, steps=2, resume=True)
    assert resumed["outcome"] == Outcome.CANDIDATE_ERROR.value
    assert card.weights_sha256[:DIGEST_CHARS] in str(resumed["message"]) and changed in str(resumed["message"])
