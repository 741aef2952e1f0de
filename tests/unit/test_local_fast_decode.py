"""The fast sampler computes what the model's own forward computes, and draws the same tokens.

The reference here is the framework path the trainer used before (`LlamaForCausalLM.forward` per token with
its own KV cache), kept in this test only: same logits to float rounding, same tokens for the same seed.
"""

from __future__ import annotations

import torch

from trainer_backend.local import decode
from trainer_backend.local.model import CharTokenizer, ModelShape, build_model, generate, left_pad


@torch.no_grad()
def reference_generate(model, prompts, max_new_tokens, eos_id, pad_id, temperature, generator):  # type: ignore[no-untyped-def]
    """The framework decode loop: one `model(...)` call per token with a DynamicCache."""
    ids, mask = left_pad(prompts, pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1, :]
    next_pos = positions[:, -1] + 1
    finished = torch.zeros(ids.shape[0], dtype=torch.bool)
    tokens, all_logits = [], []
    for _ in range(max_new_tokens):
        all_logits.append(logits)
        if temperature > 0:
            tok = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator).squeeze(-1)
        else:
            tok = logits.argmax(-1)
        tok = torch.where(finished, torch.full_like(tok, pad_id), tok)
        tokens.append(tok)
        finished = finished | (tok == eos_id)
        if bool(finished.all()):
            break
        mask = torch.cat([mask, torch.ones((ids.shape[0], 1), dtype=torch.long)], dim=-1)
        out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None], past_key_values=cache)
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        next_pos = next_pos + 1
    return torch.stack(tokens, dim=1), torch.stack(all_logits, dim=1)


def _setup(seed: int = 0):  # type: ignore[no-untyped-def]
    tok = CharTokenizer(["<pad>", "<bos>", "<eos>", "<ans>", "</ans>", *"0123456789+-*=;> "])
    model = build_model(ModelShape(n_layers=2, hidden=64), len(tok), seed).eval()
    texts = ["1+2=>", "12*3+4=>", "9=>", "77-8=>", "5*5*5-1=>"]
    return tok, model, [[tok.bos_id, *tok.encode(t)] for t in texts * 3]


def test_fast_sampler_draws_the_reference_tokens_for_the_same_seed() -> None:
    tok, model, prompts = _setup()
    ref, _ = reference_generate(model, prompts, 24, tok.eos_id, tok.pad_id, 1.0, torch.Generator().manual_seed(3))
    resp, mask, finished = generate(model, prompts, 24, tok.eos_id, tok.pad_id, 1.0, torch.Generator().manual_seed(3))
    assert torch.equal(resp, ref)
    for row in range(resp.shape[0]):
        eos = (resp[row] == tok.eos_id).nonzero()
        live = int(eos[0]) + 1 if len(eos) else resp.shape[1]
        assert mask[row].tolist() == [1] * live + [0] * (resp.shape[1] - live)
    assert torch.equal(finished, (resp == tok.eos_id).any(1))


def test_fast_sampler_logits_match_the_model_forward() -> None:
    tok, model, prompts = _setup(seed=1)
    ref, ref_logits = reference_generate(model, prompts, 16, tok.eos_id, tok.pad_id, 0.0, None)
    ids, mask = left_pad(prompts, tok.pad_id)
    stack = decode._Stack(model)
    # Re-run the greedy path step by step and compare each step's logits with the framework's.
    resp, _, _ = decode.sample(model, ids, mask, 16, tok.eos_id, tok.pad_id, 0.0, None)
    assert torch.equal(resp, ref)
    full = torch.cat([ids, resp], 1)
    full_mask = torch.cat([mask, torch.ones_like(resp)], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions).logits
    p = ids.shape[1]
    torch.testing.assert_close(logits[:, p - 1 : p - 1 + resp.shape[1]], ref_logits, atol=1e-4, rtol=1e-4)
    assert stack.head is model.lm_head.weight


def test_stop_ids_end_a_response_like_eos() -> None:
    tok, model, prompts = _setup(seed=2)
    stop = tok.encode(";")[0]
    resp, mask, finished = generate(
        model, prompts, 30, tok.eos_id, tok.pad_id, 1.0, torch.Generator().manual_seed(0), stop_ids=(stop,)
    )
    for row in range(resp.shape[0]):
        live = resp[row][mask[row].bool()].tolist()
        ends = [i for i, t in enumerate(live) if t in (stop, tok.eos_id)]
        assert ends == ([len(live) - 1] if finished[row] else [])
