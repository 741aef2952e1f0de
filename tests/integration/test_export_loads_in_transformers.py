"""`evotrainer export` writes a session's trained model as a Hugging Face folder transformers loads as it is.

A short real session (process sandbox) trains a random-init Hugging Face model (`tests/hf_models.py`) on a
copy of the arithmetic harness; `evotrainer export` writes the recommended version; a fresh Python process
loads the folder with `AutoModelForCausalLM` / `AutoTokenizer` alone and answers held-out prompts greedily.
Its answers must equal the version's own greedy answers at its last validation (the run's rollouts), and
the folder must carry the run's stop ids and a model card with the lineage and scores. Refusals (a version
that does not exist, the tiny model, a run without weights) are one line each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hf_models import harness_texts, make_model_folder

from diagnostics.schema import CONFIG_FILE, LAST_CHECKPOINT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SESSION = ("--sandbox", "process", "--iterations", "1", "--base-steps", "3", "--pilot-steps", "3",
           "--candidates", "1", "--replicates", "0", "--escalate-after", "0")  # fmt: skip
ANSWER = """
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, template, max_new, prompts = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
out = []
for prompt in prompts:
    text = tok.apply_chat_template([{"role": "user", "content": template.replace("{prompt}", prompt)}],
                                   add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        gen = model.generate(ids, do_sample=False, max_new_tokens=max_new)[0, ids.shape[1]:].tolist()
    stops = set(model.generation_config.eos_token_id)
    cut = next((i for i, t in enumerate(gen) if t in stops), len(gen))
    out.append(tok.decode(gen[:cut], skip_special_tokens=False))
print(json.dumps(out))
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )


def _harness(tmp_path: Path) -> Path:
    harness = tmp_path / "arith"
    shutil.copytree(ROOT / "examples" / "arithmetic-oracle", harness)
    manifest = yaml.safe_load((harness / "evotrainer.yaml").read_text())
    manifest.pop("special_tokens", None)
    manifest.pop("alphabet", None)
    (harness / "evotrainer.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    folder = make_model_folder(tmp_path / "model", harness_texts(harness))
    val = (harness / "data" / "val.jsonl").read_text().splitlines()
    (harness / "data" / "val.jsonl").write_text("\n".join(val[::10]) + "\n")
    trainer = yaml.safe_load((harness / "harness" / "trainer.yaml").read_text())
    for key in ("n_layers", "hidden"):
        trainer.pop(key, None)
    trainer.update(
        model=str(folder), prompt_format="chat", prompt_template="Compute {prompt}", lr=1.0e-4, group_size=4,
        prompts_per_step=4, val_every=3, save_every=3, warmstart_steps=10, warmstart_batch_size=8,
        warmstart_lr=1.0e-3,
    )  # fmt: skip
    (harness / "harness" / "trainer.yaml").write_text(yaml.safe_dump(trainer))
    return harness


def _last_val(run: Path) -> list[dict[str, object]]:
    files = sorted((run / "rollouts" / "val").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    rows = [json.loads(line) for line in files[-1].read_text().splitlines()]
    return [r for r in rows if r["sample_index"] == 0][:6]


def test_an_exported_version_loads_and_answers_as_the_version_did(tmp_path: Path, git_available: None) -> None:
    harness = _harness(tmp_path)
    run = cli("run", "--harness", str(harness), "--repo", str(tmp_path / "repo"), *SESSION, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [session_dir] = (tmp_path / ".evotrainer" / "sessions").iterdir()
    session = session_dir.name

    out = tmp_path / "exported"
    done = cli("export", session, "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    meta = json.loads((out / "evotrainer-export.json").read_text())
    run_dir = Path(meta["checkpoint"]).parent.parent
    assert Path(meta["checkpoint"]) == run_dir / LAST_CHECKPOINT
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    policy = config["policy"]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "generation_config.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == policy["stop_ids"]
    card = (out / "README.md").read_text()
    assert f"Session `{session}`" in card and "sealed test split" in card and "- v0: starting harness" in card

    val = _last_val(run_dir)
    prompts = [str(r["prompt"]) for r in val]
    args = [str(out), "Compute {prompt}", str(config["trainer"]["max_new_tokens"]), json.dumps(prompts)]
    fresh = subprocess.run([sys.executable, "-c", ANSWER, *args], capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert json.loads(fresh.stdout) == [r["response"] for r in val]

    again = cli("export", session, "--out", str(out), cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr
    missing = cli("export", session, "--version", "9", "--out", str(tmp_path / "v9"), cwd=tmp_path)
    assert missing.returncode == 2 and "no version v9" in missing.stderr, missing.stderr
