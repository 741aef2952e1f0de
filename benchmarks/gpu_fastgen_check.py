"""GPU self-check of the static sampler: graphs equal eager, bf16 fidelity, ms per decode step.

For a random-init Qwen2 of Qwen2.5-0.5B's shape with a 32,000-token vocabulary (0.39 B parameters, tied head)
and a small untied GQA Llama, both with fp32 master weights and a bf16 decode copy:

(a) the CUDA-graph replay and the same step run eagerly give identical logits (teacher-forced) and identical
    greedy and sampled tokens (the sampled run stops rows early, so rows also move between batch buckets);
(b) the fast path's bf16 logits against the model's own bf16 forward (and both against the fp32 forward):
    max |difference| / max |reference|, which must stay within bf16 rounding — the fast path no further from
    fp32 than the framework's own bf16 forward (within 2x);
(c) ms per decode step at batch 64, 64-token prompts, 256 new tokens, EOS disabled: transformers `generate`
    (dynamic cache), the static step eagerly, and the static step replayed from CUDA graphs (graph capture
    reported apart).

Run from the repository root on the GPU machine: ``python3 benchmarks/gpu_fastgen_check.py`` (well under two
minutes on one H200). Rehearsal on CPU (what the unit tests run): ``--device cpu --tiny``. Prints a compact
table, writes ``$OUT/gpu_fastgen_check.json`` when ``OUT`` is set, and exits 1 when (a) or (b) fails.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

ROOT = Path(__file__).resolve().parents[1]
PAD, BOS, EOS = 0, 1, 2


def import_fastgen() -> Any:
    """Import `trainer_backend.local.fastgen` without running the parent packages' `__init__`.

    Those import the whole backend (pydantic, the harness, ...), which the GPU machine does not have; the
    fast sampler itself needs only torch.
    """
    for name in ("trainer_backend", "trainer_backend.local"):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(ROOT.joinpath(*name.split(".")))]
            sys.modules[name] = package
    return importlib.import_module("trainer_backend.local.fastgen")


def build_models(tiny: bool, device: torch.device) -> dict[str, Any]:
    """The fp32 models to check, built with random weights directly on `device`."""
    common: dict[str, Any] = dict(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, max_position_embeddings=4096)
    if tiny:
        qwen = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4)
        llama = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
        qwen["num_key_value_heads"], llama["num_key_value_heads"] = 2, 1
    else:  # Qwen2.5-0.5B's shape with a 32,000-token vocabulary (gpu.md), and a small untied GQA Llama
        qwen = dict(vocab_size=32000, hidden_size=896, intermediate_size=4864, num_hidden_layers=24)
        qwen |= dict(num_attention_heads=14, num_key_value_heads=2, rms_norm_eps=1e-6)
        qwen["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
        llama = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8)
        llama |= dict(num_attention_heads=16, num_key_value_heads=4)
    configs = (
        ("qwen2-0.5B-shape", Qwen2Config(**qwen, tie_word_embeddings=True, **common), Qwen2ForCausalLM),
        ("llama-small", LlamaConfig(**llama, tie_word_embeddings=False, **common), LlamaForCausalLM),
    )
    out = {}
    for name, config, cls in configs:
        torch.manual_seed(0)
        with torch.device(device):
            out[name] = cls(config).float().eval()
    return out


def left_padded(rows: int, width: int, vocab: int, device: torch.device, mixed: bool, seed: int) -> tuple[Any, Any]:
    """Prompts `ids[rows, width]`, `mask[rows, width]`: BOS then random tokens; mixed lengths when `mixed`."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, width), generator=gen)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen) if mixed else torch.full((rows,), width)
    mask = (torch.arange(width)[None] >= width - lengths[:, None]).long()
    ids = torch.where(mask.bool(), ids, PAD)
    ids[torch.arange(rows), width - lengths] = BOS
    return ids.to(device), mask.to(device)


@torch.no_grad()
def forward_logits(model: Any, ids: Any, mask: Any) -> Any:
    """The model's own fp32 logits `[B, L, V]` (positions count real tokens)."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()


def teacher_forced(sampler: Any, ids: Any, mask: Any, cont: Any) -> Any:
    """The sampler's fp32 logits `[B, 1 + T, V]` after the prompt and after each token of `cont[B, T]`."""
    out = [sampler.prefill(ids, mask, cont.shape[1] + 1)]
    out += [sampler.step(cont[:, i]).clone() for i in range(cont.shape[1])]
    return torch.stack(out, dim=1)


def rel(a: Any, b: Any) -> float:
    """max |a - b| / max |b|."""
    return float((a - b).abs().max() / b.abs().max())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_graphs(fastgen: Any, sampler: Any, vocab: int, args: Any, device: torch.device) -> dict[str, Any]:
    """(a) Graph replay against the same step run eagerly: logits, greedy tokens, sampled tokens with stops."""
    ids, mask = left_padded(args.batch, args.prompt, vocab, device, mixed=True, seed=1)
    forced, new = min(16, args.new - 1), min(48, args.new)
    cont = torch.randint(3, vocab, (args.batch, forced), generator=torch.Generator().manual_seed(2)).to(device)
    stops = list(range(3, 3 + vocab // 8))  # 1 token in 8 stops a row: rows end at many lengths
    runs = {}
    for graphs in (True, False):
        sampler.graphs = graphs and device.type == "cuda"
        logits = teacher_forced(sampler, ids, mask, cont)
        greedy = fastgen.fast_sample(sampler, ids, mask, new, [EOS], PAD, 0.0, None)
        gen = torch.Generator(device=device).manual_seed(3)
        before = sampler.compactions
        sampled = fastgen.fast_sample(sampler, ids, mask, new, stops, PAD, 1.0, gen)
        runs[graphs] = (logits, greedy, sampled, sampler.compactions - before)
    sampler.graphs = device.type == "cuda"
    (lg, gg, sg, moves), (le, ge, se, _) = runs[True], runs[False]
    same_tokens = all(torch.equal(x, y) for x, y in zip((*gg, *sg), (*ge, *se), strict=True))
    diff = rel(lg, le)
    return {
        "graphs": device.type == "cuda",
        "logits_bitwise": bool(torch.equal(lg, le)),
        "logits_rel_diff": diff,
        "tokens_identical": same_tokens,
        "bucket_moves": moves,
        "graphs_captured": len(sampler._graph_of),
        "ok": same_tokens and diff <= 1e-3,
    }


def check_fidelity(sampler: Any, model: Any, model_bf16: Any, args: Any, device: torch.device) -> dict[str, Any]:
    """(b) bf16 fast-path logits against the model's own bf16 and fp32 forwards, teacher-forced."""
    vocab, rows, forced = model.config.vocab_size, min(16, args.batch), min(24, args.new - 1)
    ids, mask = left_padded(rows, args.prompt, vocab, device, mixed=True, seed=4)
    cont = torch.randint(3, vocab, (rows, forced), generator=torch.Generator().manual_seed(5)).to(device)
    fast = teacher_forced(sampler, ids, mask, cont)
    full, full_mask = torch.cat([ids, cont], 1), torch.cat([mask, torch.ones_like(cont)], 1)
    start = ids.shape[1] - 1
    bf16 = forward_logits(model_bf16, full, full_mask)[:, start:]
    fp32 = forward_logits(model, full, full_mask)[:, start:]
    out = {
        "fast_vs_hf_bf16": rel(fast, bf16),
        "hf_bf16_vs_fp32": rel(bf16, fp32),
        "fast_vs_fp32": rel(fast, fp32),
        "greedy_agreement_with_hf_bf16": float((fast.argmax(-1) == bf16.argmax(-1)).float().mean()),
    }
    out["ok"] = (
        out["fast_vs_fp32"] <= 2 * out["hf_bf16_vs_fp32"] and out["fast_vs_hf_bf16"] <= 3 * out["hf_bf16_vs_fp32"]
    )
    return out


def time_generate(model_bf16: Any, ids: Any, mask: Any, new: int, device: torch.device) -> float:
    """Seconds per decode step of transformers `generate` (dynamic cache, sampling, EOS disabled), warmed up."""
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=None,
                              pad_token_id=PAD, max_new_tokens=new)  # fmt: skip
    model_bf16.generation_config.eos_token_id = None  # or generate may fill it back in from the model's
    warm = copy.deepcopy(config)
    warm.max_new_tokens = 8
    model_bf16.generate(input_ids=ids, attention_mask=mask, generation_config=warm)  # a first call is slow
    sync(device)
    started = time.perf_counter()
    out = model_bf16.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    sync(device)
    assert out.shape[1] == ids.shape[1] + new, f"generate stopped early: {tuple(out.shape)}"
    return (time.perf_counter() - started) / new


def time_paths(sampler: Any, model_bf16: Any, vocab: int, args: Any, device: torch.device) -> dict[str, Any]:
    """(c) ms per decode step, EOS disabled: framework generate, static step eagerly, static step from graphs."""
    ids, mask = left_padded(args.batch, args.prompt, vocab, device, mixed=False, seed=6)
    new = args.new
    steps: dict[str, Any] = {}
    if not args.skip_hf:
        try:
            steps["hf_generate_dynamic"] = time_generate(model_bf16, ids, mask, new, device)
        except Exception:  # keep the static paths' timings
            steps["hf_generate_dynamic_error"] = traceback.format_exc(limit=4)
            print(steps["hf_generate_dynamic_error"])
    gen = torch.Generator(device=device).manual_seed(7)
    graphs_usable = sampler.graphs  # False on CPU, or after (a) failed to capture
    for label, graphs in (("static_eager", False), ("static_cuda_graphs", True)):
        if graphs and not graphs_usable:
            continue
        sampler.graphs = graphs
        try:
            sampler.sample(ids, mask, new, (), PAD, 1.0, gen)  # warm-up (captures the graph if (a) has not)
            if graphs:  # every capture of this run, (a)'s bucket moves included: paid once per run
                steps["graph_capture_s"], steps["graphs_captured"] = sampler.capture_seconds, len(sampler._graph_of)
            sync(device)
            started = time.perf_counter()
            reps = 2
            for _ in range(reps):
                resp = sampler.sample(ids, mask, new, (), PAD, 1.0, gen)[0]
            sync(device)
            assert resp.shape == (args.batch, new), resp.shape
            steps[label] = (time.perf_counter() - started) / (reps * new)
        except Exception:  # keep the other path's timing
            steps[f"{label}_error"] = traceback.format_exc(limit=4)
            print(steps[f"{label}_error"])
    sampler.graphs = graphs_usable
    return steps


def check_model(fastgen: Any, name: str, model: Any, args: Any, device: torch.device) -> dict[str, Any]:
    """Run (a), (b) and (c) on one fp32 model; a failing check is recorded with its traceback, the rest still run."""
    entry: dict[str, Any] = {"params": sum(p.numel() for p in model.parameters())}
    try:
        reason = fastgen.supports(model, args.prompt + args.new)
        assert reason is None, reason
        model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
        sampler = fastgen.StaticSampler(
            model, max_batch=args.batch, max_len=args.prompt + args.new, dtype=torch.bfloat16, device=device
        )
    except Exception:
        entry["error"] = traceback.format_exc(limit=3)
        print(entry["error"])
        return entry
    checks = (
        ("a_graph_vs_eager", check_graphs, (fastgen, sampler, model.config.vocab_size, args, device)),
        ("b_bf16_fidelity", check_fidelity, (sampler, model, model_bf16, args, device)),
        ("c_ms_per_step", time_paths, (sampler, model_bf16, model.config.vocab_size, args, device)),
    )
    for key, check, inputs in checks:
        try:
            entry[key] = check(*inputs)
        except Exception:  # one failing check must not hide the others
            entry[key] = {"ok": False, "error": traceback.format_exc(limit=4)}
            print(f"{name} {key} failed:\n{entry[key]['error']}")
            if key == "a_graph_vs_eager" and sampler.graphs:  # (b) and (c) then measure the same step eagerly
                sampler.graphs, entry["graphs_disabled_after_error"] = False, True
    if device.type == "cuda":
        entry["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny configs (a CPU rehearsal of the script)")
    parser.add_argument("--batch", type=int, default=None, help="rows per generation (64; 8 with --tiny)")
    parser.add_argument("--prompt", type=int, default=None, help="prompt tokens (64; 16 with --tiny)")
    parser.add_argument("--new", type=int, default=None, help="new tokens per row (256; 24 with --tiny)")
    parser.add_argument("--skip-hf", action="store_true", help="do not time transformers generate")
    args = parser.parse_args()
    args.batch = args.batch or (8 if args.tiny else 64)
    args.prompt = args.prompt or (16 if args.tiny else 64)
    args.new = args.new or (24 if args.tiny else 256)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device visible to torch: run with --device cpu --tiny for a rehearsal", file=sys.stderr)
        return 2
    fastgen = import_fastgen()
    import transformers

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {where}  torch {torch.__version__}  transformers {transformers.__version__}")
    report: dict[str, Any] = {"device": where, "torch": torch.__version__, "transformers": transformers.__version__}
    report |= {"batch": args.batch, "prompt": args.prompt, "new_tokens": args.new, "models": {}}
    started = time.perf_counter()
    for name, model in build_models(args.tiny, device).items():
        report["models"][name] = check_model(fastgen, name, model, args, device)
    report["wall_s"] = time.perf_counter() - started
    report["ok"] = all(
        "error" not in e and e["a_graph_vs_eager"].get("ok") and e["b_bf16_fidelity"].get("ok")
        for e in report["models"].values()
    )
    print_table(report)
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "gpu_fastgen_check.json"
        path.write_text(json.dumps(report, indent=2))
        print(f"wrote {path}")
    return 0 if report["ok"] else 1


def print_table(report: dict[str, Any]) -> None:
    """Print the checks and the timings as two compact tables."""
    print(f"\n{'model':<18} {'check':<32} {'result':<52} ok")
    for name, e in report["models"].items():
        if "error" in e:
            print(f"{name:<18} {'setup':<32} {'error (see above)':<52} no")
            continue
        a, b = e["a_graph_vs_eager"], e["b_bf16_fidelity"]
        for label, failed in (("(a) graph vs eager", a), ("(b) bf16 max rel err", b)):
            if "error" in failed:
                print(f"{name:<18} {label:<32} {'error (traceback above)':<52} NO")
        if e.get("graphs_disabled_after_error"):
            print(f"{name:<18} {'(b), (c) ran eagerly':<32} {'graphs off after the (a) error':<52} --")
        if "error" not in a:
            kind = "graph vs eager" if a["graphs"] else "eager vs eager (no graphs)"
            logits = "bitwise" if a["logits_bitwise"] else f"rel diff {a['logits_rel_diff']:.1e}"
            tokens = "same tokens" if a["tokens_identical"] else "TOKENS DIFFER"
            result = f"{logits}, {tokens}, {a['bucket_moves']} moves"
            print(f"{name:<18} {'(a) ' + kind:<32} {result:<52} {'yes' if a['ok'] else 'NO'}")
        if "error" not in b:
            result = f"fast/hf {b['fast_vs_hf_bf16']:.1e} hf/fp32 {b['hf_bf16_vs_fp32']:.1e} "
            result += f"fast/fp32 {b['fast_vs_fp32']:.1e}"
            print(f"{name:<18} {'(b) bf16 max rel err':<32} {result:<52} {'yes' if b['ok'] else 'NO'}")
    print(f"\n{'model':<18} {'path (batch x new tokens)':<30} {'ms/step':>9} {'tokens/s':>10}")
    rows, new = report["batch"], report["new_tokens"]
    for name, e in report["models"].items():
        c = e.get("c_ms_per_step", {})
        for label in ("hf_generate_dynamic", "static_eager", "static_cuda_graphs"):
            if f"{label}_error" in c or "error" in c:
                print(f"{name:<18} {label:<30} {'error (traceback above)':>20}")
        for label in ("hf_generate_dynamic", "static_eager", "static_cuda_graphs"):
            if label in c:
                ms = 1000 * c[label]
                path = f"{label} ({rows}x{new})"
                print(f"{name:<18} {path:<30} {ms:>9.2f} {rows / c[label]:>10,.0f}")
        if "graph_capture_s" in c:
            label = f"graph capture ({c['graphs_captured']} graphs)"
            print(f"{name:<18} {label:<30} {1000 * c['graph_capture_s']:>9.0f} ms in all, once per run")
        if "peak_memory_gb" in e:
            print(f"{name:<18} {'peak memory so far':<30} {e['peak_memory_gb']:>9.2f} GB")
    print(f"\nall checks ok: {report['ok']}  wall {report['wall_s']:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
