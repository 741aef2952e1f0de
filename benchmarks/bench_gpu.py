"""GPU benchmark: the local backend's own GRPO runs against TRL, and SmolLM2 learning.

Every local figure comes from the product's command path: `trainer_backend.local.run(spec)` launches the
trainer subprocess on a real Hugging Face folder exactly as `evotrainer train` does, and the figures are read
back from the run's own ``metrics.jsonl`` / ``summary.json`` (``timing_s/gen``, ``timing_s/update``,
``timing_s/step``, ``perf/max_memory_allocated_gb``). TRL's `GRPOTrainer` trains the same folder, prompts,
reward and lengths in the same process run, timed per generation with a callback.

Parts (``--parts``, in order; each is skipped when the time budget left is too small, and every result is
written to ``$OUT/bench_gpu.json`` as soon as it exists):

- ``throughput``: a random-init model of Qwen2.5-0.5B's shape (vocab 32,000; ``../shared/reference/gpu.md``),
  8 prompts x 8 samples, 64-token prompts, exactly 256 new tokens (its eos id lies outside the model's
  vocabulary, so no sample stops early), 6 steps; step 1 holds the sampler's graph capture, reported apart;
- ``trl``: TRL 1.16 `GRPOTrainer` on the same folder and batch (one generation of 64 feeds 2 optimizer
  steps, as the local step's two minibatches do; beta 0, bf16);
- ``smollm2``: SmolLM2-135M-Instruct from the models cache: strict as shipped, after the harness's warm start
  and after GRPO (`examples/arithmetic-smollm2`, its own settings and `--smollm2-steps` steps);
- ``smollm2_trl``: TRL on SmolLM2 with the example's batch and length, for samples/s.

``--smoke`` shrinks every shape so the whole script runs on a CPU in a few minutes (how it is tested).
Run: ``python benchmarks/bench_gpu.py --out DIR`` (``benchmarks/gpu_check.sh`` does it on a GPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.failures import Outcome  # noqa: E402
from trainer_backend import local  # noqa: E402
from trainer_backend.base import LOG_FILE, METRICS_FILE, SUMMARY_FILE, RunSpec  # noqa: E402

QWEN_05B = {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "inter": 4864, "vocab": 32000}
SMOKE = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "inter": 128, "vocab": 512}
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Dense: the share of words that start with a-m, so every group has reward variance and every step updates."""
    words = solution_str.split()
    return sum(w[:1] <= "m" for w in words) / max(1, len(words))
'''
STRICT = """
def score(solution_str, ground_truth):
    return float(str(ground_truth) in solution_str.split())
"""


class Budget:
    """The wall-clock budget of the whole script: parts check what is left before they start."""

    def __init__(self, seconds: float) -> None:
        self.end = time.time() + seconds

    def left(self) -> float:
        return self.end - time.time()


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def words(vocab: int) -> list[str]:
    """`vocab` - 258 distinct lowercase words, shortest first (each one BPE token after a space)."""
    import itertools
    import string

    out: list[str] = []
    for n in range(1, 5):
        for letters in itertools.product(string.ascii_lowercase, repeat=n):
            out.append("".join(letters))
            if len(out) == vocab - 258:
                return out
    raise ValueError(f"vocab {vocab} is too large for 4-letter words")


def word_folder(path: Path, shape: dict[str, int], seed: int = 0) -> Path:
    """A random-init Qwen2 of `shape` whose tokenizer reads every space-led word as one token and whose eos id
    lies outside the model's vocabulary (so no sample stops early).

    The tokenizer is a byte-level BPE (the Qwen2 tokenizer transformers builds for a qwen2 folder): the 256
    byte symbols, then ``Ġw`` for each word `w` with the merges that build it letter by letter, then ``<pad>``
    (id = vocab - 2, a real token) and ``<eos>`` (id = vocab: the model can never sample it).
    """
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = []
    for word in words(shape["vocab"]):
        vocab["Ġ" + word] = len(vocab)
        merges.append(("Ġ" + word[:-1], word[-1]))
    vocab["<pad>"] = len(vocab)
    vocab["<unused>"] = len(vocab)
    assert len(vocab) == shape["vocab"], len(vocab)
    vocab["<eos>"] = shape["vocab"]
    core = Tokenizer(models.BPE(vocab, merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")
    pad = vocab["<pad>"]
    config = transformers.Qwen2Config(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["inter"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=pad,
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.generation_config = transformers.GenerationConfig(eos_token_id=[shape["vocab"]], pad_token_id=pad)
    path.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def word_harness(
    path: Path, folder: Path, vocab: int, prompt_tokens: int, new_tokens: int, batch: tuple[int, int]
) -> Path:
    """A harness of random 64-word prompts, the dense reward, no filter, no warm start, raw prompts."""
    import random

    rng = random.Random(0)
    vocabulary = words(vocab)
    (path / "data").mkdir(parents=True, exist_ok=True)
    (path / "harness").mkdir(exist_ok=True)
    (path / "eval").mkdir(exist_ok=True)
    for name, n in (("train", 256), ("val", 8)):
        rows = [
            {"prompt": "".join(" " + rng.choice(vocabulary) for _ in range(prompt_tokens)),
             "ground_truth": rng.choice(vocabulary), "prompt_id": f"{name}-{i}"}
            for i in range(n)
        ]  # fmt: skip
        (path / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "harness" / "reward.py").write_text(REWARD)
    (path / "eval" / "strict.py").write_text(STRICT)
    prompts, group = batch
    (path / "harness" / "trainer.yaml").write_text(
        f"model: {folder}\nprompt_format: raw\nlr: 1.0e-6\ngroup_size: {group}\nprompts_per_step: {prompts}\n"
        f"max_new_tokens: {new_tokens}\ntemperature: 1.0\nwarmstart_steps: 0\nval_every: 1000\nsave_every: 1000\n"
        "data_selection: null\n"
    )
    (path / "evotrainer.yaml").write_text(
        "name: bench\ndomain: words\ndata: {train: data/train.jsonl, val: data/val.jsonl}\n"
        "reward: harness/reward.py:compute_score\neval: {strict: eval/strict.py:score}\n"
        "trainer: {backend: local, local: harness/trainer.yaml}\n"
        "surface: {editable: [harness/], protected: [eval/, data/val.jsonl, evotrainer.yaml]}\n"
    )
    return path


def run_local(harness: Path, out: Path, steps: int, seed: int = 0) -> dict[str, Any]:
    """Train through the product's backend (a trainer subprocess) and read its figures back."""
    if out.exists():
        shutil.rmtree(out)
    t0 = time.time()
    result = local.run(RunSpec(run_id=out.name, harness_dir=harness, out_dir=out, steps=steps, seed=seed))
    wall = time.time() - t0
    if result.outcome is not Outcome.OK:
        tail = (out / LOG_FILE).read_text()[-3000:] if (out / LOG_FILE).exists() else ""
        raise RuntimeError(f"{out.name}: {result.outcome.value}: {result.message}\n{tail}")
    rows = [json.loads(x) for x in (out / METRICS_FILE).read_text().splitlines()]
    steps_rows = [r["data"] for r in rows if r["step"] > 0]
    summary = json.loads((out / SUMMARY_FILE).read_text())
    return {"wall_s": wall, "steps": steps_rows, "summary": summary, "log": str(out / LOG_FILE)}


def step_figures(rows: list[dict[str, float]], samples: int) -> dict[str, float]:
    """Median per-step figures over steps 2.. (step 1 holds graph capture), and step 1's extra time."""
    later = rows[1:] or rows
    med = {k: statistics.median(r[k] for r in later) for k in ("timing_s/step", "timing_s/gen", "timing_s/update")}
    tokens = statistics.median(r["perf/throughput"] * r["timing_s/step"] for r in later)
    return {
        "s_per_step": med["timing_s/step"],
        "gen_s": med["timing_s/gen"],
        "update_s": med["timing_s/update"],
        "samples_per_s": samples / med["timing_s/step"],
        "tokens_per_s": tokens / med["timing_s/step"],
        "first_step_extra_s": rows[0]["timing_s/step"] - med["timing_s/step"],
        "mean_response_tokens": statistics.fmean(r["response_length/mean"] for r in later),
        "peak_gb": max(r.get("perf/max_memory_allocated_gb", 0.0) for r in rows),
    }


def trl_throughput(
    folder: Path,
    harness: Path,
    generations: int,
    new_tokens: int,
    batch: tuple[int, int],
    out: Path,
    chat_template: str | None = None,
) -> dict[str, Any]:
    """TRL GRPOTrainer on the same folder/prompts/reward: seconds per generation of prompts x group samples.

    `chat_template`: the harness's prompt template, for a conversational dataset (TRL applies the model's chat
    template, as the local backend's ``prompt_format: chat`` does); None for raw prompts.
    """
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from harness.calls import load_function, validate_reward
    from harness.manifest import load_harness

    h = load_harness(harness)
    reward_fn = load_function(h.root, h.reward)
    rows = [json.loads(x) for x in (harness / "data" / "train.jsonl").read_text().splitlines()]
    prompts, group = batch

    def prompt(text: str) -> Any:
        if chat_template is None:
            return text
        return [{"role": "user", "content": chat_template.replace("{prompt}", text)}]

    data = Dataset.from_list([{"prompt": prompt(r["prompt"]), "ground_truth": str(r["ground_truth"])} for r in rows])

    def text(completion: Any) -> str:
        return completion if isinstance(completion, str) else str(completion[-1]["content"])

    def reward(completions: list[Any], ground_truth: list[str], **_: Any) -> list[float]:
        raw = [reward_fn("", text(c), g, {}) for c, g in zip(completions, ground_truth, strict=True)]
        return [validate_reward(v, str(h.reward))[0] for v in raw]

    stamps: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            stamps.append(time.time())

    cuda = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    fields = set(GRPOConfig.__dataclass_fields__)
    extra = {"max_prompt_length": None} if "max_prompt_length" in fields else {}
    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=not cuda,
        bf16=cuda,
        per_device_train_batch_size=prompts * group // 2,
        gradient_accumulation_steps=1,
        steps_per_generation=2,
        num_generations=group,
        max_completion_length=new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        loss_type="dapo",
        learning_rate=1e-6,
        max_steps=2 * generations,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        disable_dropout=True,
        **extra,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data, processing_class=tok)
    trainer.add_callback(Clock())
    t0 = time.time()
    trainer.train()
    per_gen = [stamps[i + 1] - stamps[i - 1] for i in range(2, len(stamps) - 1, 2)]  # skip the first generation
    s = statistics.median(per_gen) if per_gen else (time.time() - t0) / max(1, generations)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    logged = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    del trainer, model
    if cuda:
        torch.cuda.empty_cache()
    return {
        "s_per_step": s,
        "samples_per_s": prompts * group / s,
        "generations": generations,
        "peak_gb": peak,
        "mean_response_tokens": statistics.fmean(logged) if logged else None,
    }


def smollm2(out: Path, steps: int, smoke: bool) -> dict[str, Any]:
    """SmolLM2 on `examples/arithmetic-smollm2`: strict as shipped, after the warm start, after GRPO."""
    import yaml

    harness = out / "arithmetic-smollm2"
    if harness.exists():
        shutil.rmtree(harness)
    shutil.copytree(ROOT / "examples" / "arithmetic-smollm2", harness)
    settings = harness / "harness" / "trainer.yaml"
    base = yaml.safe_load(settings.read_text())
    if smoke:  # a CPU: a handful of prompts, short outputs, a few warm-start steps
        val = (harness / "data" / "val.jsonl").read_text().splitlines()
        (harness / "data" / "val.jsonl").write_text("\n".join(val[::60]) + "\n")
        base.update(warmstart_steps=3, warmstart_batch_size=4, prompts_per_step=2, group_size=2, max_new_tokens=16)
    shipped = {**base, "warmstart_steps": 0}
    settings.write_text(yaml.safe_dump(shipped))
    as_shipped = run_local(harness, out / "smollm2-shipped", steps=1)
    settings.write_text(yaml.safe_dump(base))
    trained = run_local(harness, out / "smollm2-grpo", steps=steps)
    samples = base["prompts_per_step"] * base["group_size"]
    val = [r for r in trained["steps"] if "val/strict_acc" in r]
    return {
        "strict_as_shipped": as_shipped["summary"]["strict_acc_before"],
        "strict_after_warmstart": trained["summary"]["strict_acc_before"],
        "strict_after_grpo": trained["summary"]["strict_acc_after"],
        "strict_curve": [round(r["val/strict_acc"], 3) for r in val],
        "format_after_warmstart": json.loads((out / "smollm2-grpo" / METRICS_FILE).read_text().splitlines()[0])[
            "data"
        ].get("val/format_rate"),
        "stop_ids": trained["summary"].get("stop_ids"),
        "grpo_steps": steps,
        "warmstart_steps": base["warmstart_steps"],
        "wall_s": trained["wall_s"],
        "warnings": trained["summary"].get("warnings", []),
        **step_figures(trained["steps"], samples),
        "batch": [base["prompts_per_step"], base["group_size"]],
        "max_new_tokens": base["max_new_tokens"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "bench_gpu")
    parser.add_argument("--work", type=Path, default=None, help="model folders and run folders (default OUT/work)")
    parser.add_argument("--parts", default="throughput,trl,smollm2,smollm2_trl")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, for a CPU check of this script")
    parser.add_argument("--budget-s", type=float, default=480.0, help="skip parts that would not fit")
    parser.add_argument("--smollm2-steps", type=int, default=60)
    parser.add_argument("--steps", type=int, default=6, help="local throughput steps")
    parser.add_argument("--trl-generations", type=int, default=4)
    args = parser.parse_args()
    import torch
    import transformers

    budget = Budget(args.budget_s)
    work = args.work or args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }
    results = args.out / "bench_gpu.json"

    def save() -> None:
        results.write_text(json.dumps(report, indent=2, default=str))

    shape = SMOKE if args.smoke else QWEN_05B
    prompt_tokens, new_tokens, batch = (8, 16, (2, 4)) if args.smoke else (64, 256, (8, 8))
    parts = args.parts.split(",")
    folder = harness = None
    if {"throughput", "trl"} & set(parts):
        t0 = time.time()
        folder = word_folder(work / "qwen2-0.5b-shape", shape)
        harness = word_harness(work / "words", folder, shape["vocab"], prompt_tokens, new_tokens, batch)
        log(f"built the model folder and harness in {time.time() - t0:.1f}s")
    for part in parts:
        need = {"throughput": 90, "trl": 90, "smollm2": 200, "smollm2_trl": 45}.get(part, 60)
        if budget.left() < need:
            report[part] = {"skipped": f"{budget.left():.0f}s of the budget left, the part needs ~{need}s"}
            log(f"{part}: skipped ({report[part]['skipped']})")
            save()
            continue
        t0 = time.time()
        try:
            if part == "throughput":
                assert harness is not None
                run = run_local(harness, work / "local-throughput", steps=args.steps)
                config = json.loads((work / "local-throughput" / "config.json").read_text())
                report[part] = {
                    **step_figures(run["steps"], batch[0] * batch[1]),
                    "wall_s": run["wall_s"],
                    "prompt_tokens": prompt_tokens,
                    "new_tokens": new_tokens,
                    "batch": batch,
                    "sampler": config["policy"]["sampler"],
                }
            elif part == "trl":
                assert folder is not None and harness is not None
                report[part] = trl_throughput(folder, harness, args.trl_generations, new_tokens, batch, work / "trl")
                if "throughput" in report and "samples_per_s" in report["throughput"]:
                    report["speedup_local_over_trl"] = (
                        report["throughput"]["samples_per_s"] / report[part]["samples_per_s"]
                    )
            elif part == "smollm2":
                report[part] = smollm2(work, args.smollm2_steps, args.smoke)
            elif part == "smollm2_trl":
                import yaml

                from trainer_backend import models

                smol = models.path("smollm2-135m-instruct")
                sh = work / "arithmetic-smollm2"
                bt = (2, 2) if args.smoke else (8, 8)
                template = yaml.safe_load((sh / "harness" / "trainer.yaml").read_text())["prompt_template"]
                new = 16 if args.smoke else 40
                report[part] = trl_throughput(smol, sh, 3, new, bt, work / "trl-smol", chat_template=template)
                if "samples_per_s" in report.get("smollm2", {}):
                    report["speedup_smollm2_local_over_trl"] = (
                        report["smollm2"]["samples_per_s"] / report[part]["samples_per_s"]
                    )
        except Exception as exc:  # a benchmark part that breaks is reported, and the next part still runs
            report[part] = {"error": f"{type(exc).__name__}: {str(exc)[-2000:]}"}
        report.setdefault("part_wall_s", {})[part] = time.time() - t0
        log(f"{part}: {json.dumps(report[part], default=str)[:600]}")
        save()
    log(json.dumps({k: v for k, v in report.items() if k.startswith("speedup")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
