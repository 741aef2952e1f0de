"""Generated GRPO config composes + validates with verl's own Hydra config; bad configs fail clearly;
verl's own reward manager loads the harness reward through the generated config and scores a batch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from harness.manifest import load_harness
from trainer_backend.base import RunSpec
from trainer_backend.verl import VerlConfigError, dry_run, prepare
from trainer_backend.verl.validate import check_overrides, compose

pytestmark = pytest.mark.verl
pytest.importorskip("verl")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_harness"


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("run")
    return prepare(RunSpec(run_id="r1", harness_dir=FIXTURE, out_dir=out, steps=3))[1]


def test_dry_run_validates_the_generated_grpo_config(tmp_path: Path) -> None:
    text = dry_run(RunSpec(run_id="r1", harness_dir=FIXTURE, out_dir=tmp_path / "run", steps=3))
    assert "python -m verl.trainer.main_ppo" in text and "(config validated)" in text
    assert f"VERL_FILE_LOGGER_PATH={(tmp_path / 'run').resolve()}/verl_metrics.1.jsonl" in text
    assert "NOT run by verl" in text  # the custom filter function is said plainly not to run
    resolved = yaml.safe_load(text.split("# resolved verl config:\n", 1)[1])
    assert resolved["reward"]["custom_reward_function"]["path"] == str(FIXTURE / "harness" / "reward.py")
    assert resolved["trainer"]["total_training_steps"] == 3 and resolved["actor_rollout_ref"]["rollout"]["n"] == 4
    assert (tmp_path / "run" / "verl_data" / "train.parquet").is_file()


def test_dry_run_fails_naming_a_misspelled_harness_key(tmp_path: Path) -> None:
    harness = tmp_path / "h"
    shutil.copytree(FIXTURE, harness)
    cfg = harness / "harness" / "verl.yaml"
    raw = yaml.safe_load(cfg.read_text())
    raw["overrides"] = ["actor_rollout_ref.rollout.temprature=0.7"]
    cfg.write_text(yaml.safe_dump(raw))
    with pytest.raises(VerlConfigError, match=r"actor_rollout_ref\.rollout\.temprature: not a verl 0\.9\.1 config key"):
        dry_run(RunSpec(run_id="r1", harness_dir=harness, out_dir=tmp_path / "run", steps=3))


def test_generated_overrides_pass_and_each_bad_override_fails_with_key_and_fix(plan) -> None:
    assert check_overrides(plan.overrides)[1] == []
    cases = {
        "custom_reward_function.path=/x/reward.py": "use reward.custom_reward_function.path",
        "actor_rollout_ref.rollout.temprature=0.7": "actor_rollout_ref.rollout.temprature: not a verl",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2": "exceeds trainer.n_gpus_per_node x trainer.nnodes",
        "data.val_files=/nonexistent/val.parquet": "data.val_files: file /nonexistent/val.parquet does not exist",
        "trainer.logger=[console,wandbb]": "trainer.logger: unknown backend 'wandbb'",
        "trainer.save_freq=-1": "trainer.save_freq=-1",
        "reward.reward_manager.name=prime": "reward.reward_manager.name=prime: does not resolve",
        "reward.custom_reward_function.name=missing_fn": "cannot load missing_fn",
    }
    for bad, expected in cases.items():
        _, problems = check_overrides([*plan.overrides, bad])
        assert any(expected in p for p in problems), (bad, problems)


def _tiny_tokenizer(folder: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab.update({s: len(vocab) + i for i, s in enumerate(specials)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fast.save_pretrained(folder)
    return fast


def test_verl_reward_manager_scores_a_batch_with_the_harness_reward(plan, tmp_path: Path) -> None:
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tokenizer = _tiny_tokenizer(tmp_path / "tok")
    cfg = compose(plan.overrides)
    dataset = RLHFDataset(data_files=cfg.data.train_files, tokenizer=tokenizer, config=cfg.data)
    assert 3 <= len(dataset) <= 6  # verl drops prompts over max_prompt_length (byte-level tiny tokenizer)
    manager = load_reward_manager(cfg, tokenizer)
    assert type(manager).__name__ == "NaiveRewardManager"
    truths = [dataset.dataframe[i]["reward_model"]["ground_truth"] for i in range(3)]
    responses = [f"so #### {truths[0]}", "no idea", f"#### {int(truths[2]) + 1}"]
    scores = []
    for i, text in enumerate(responses):
        row = dataset.dataframe[i]
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        prompt = torch.zeros((1, 3), dtype=torch.long)
        data = DataProto.from_dict(
            tensors={
                "prompts": prompt,
                "responses": ids,
                "attention_mask": torch.ones((1, 3 + ids.shape[1]), dtype=torch.long),
            },
            non_tensors={
                "data_source": np.array([row["data_source"]], dtype=object),
                "reward_model": np.array([row["reward_model"]], dtype=object),
                "extra_info": np.array([dict(row["extra_info"])], dtype=object),
            },
        )
        result = manager.loop.run_until_complete(manager.run_single(data))
        scores.append((result["reward_score"], result["reward_extra_info"]["acc"]))
    assert scores == [(1.0, 1.0), (0.0, 0.0), (0.0, 0.0)]
    load_harness(FIXTURE)  # the fixture stays a valid harness
