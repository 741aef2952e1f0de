"""The static sampler computes what each supported architecture's own forward computes.

For tiny random-init Llama, Qwen2, Qwen3 and Mistral models (tied and untied heads, GQA and MHA, q/k/v and MLP
biases, Qwen3's q/k norms, an explicit head_dim, a scaled rope): the prefill and every decode step give the
model's own logits on the whole sequence, with left padding of mixed prompt lengths, in fp32 to float
rounding; rows moved to a smaller batch bucket keep their logits; greedy sampling draws exactly
`model.generate(do_sample=False)`'s tokens, stops included. The step runs eagerly here: on a GPU the same
function is what the CUDA graph captures.
"""

from __future__ import annotations

import pytest
import torch
from fastgen_models import CASES, EOS, PAD, VOCAB, build, build_case, forward_logits, prompts

from trainer_backend.local.fastgen import StaticSampler

ATOL = 2e-5


def _teacher_forced(sampler: StaticSampler, ids: torch.Tensor, mask: torch.Tensor, cont: torch.Tensor) -> torch.Tensor:
    """Logits `[B, 1 + T, V]`: after the prompt, then after each of `cont[B, T]` fed one step at a time."""
    out = [sampler.prefill(ids, mask, cont.shape[1] + 1)]
    out += [sampler.step(cont[:, i]).clone() for i in range(cont.shape[1])]
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_prefill_and_each_step_give_the_models_logits(case: str) -> None:
    model = build_case(case)
    ids, mask = prompts(5, seed=1)
    cont = torch.randint(3, VOCAB, (5, 6), generator=torch.Generator().manual_seed(2))
    sampler = StaticSampler(model, max_batch=8, max_len=32)
    got = _teacher_forced(sampler, ids, mask, cont)
    full_mask = torch.cat([mask, torch.ones_like(cont)], 1)
    ref = forward_logits(model, torch.cat([ids, cont], 1), full_mask)[:, ids.shape[1] - 1 :]
    assert sampler._b == 8 and sampler._s == 32  # the step attended over the whole static length
    torch.testing.assert_close(got, ref, atol=ATOL, rtol=1e-5)


def test_rows_moved_to_a_smaller_bucket_keep_their_logits() -> None:
    model = build_case("qwen2-tied-qkv-bias", seed=3)
    ids, mask = prompts(6, seed=4)
    cont = torch.randint(3, VOCAB, (6, 5), generator=torch.Generator().manual_seed(5))
    sampler = StaticSampler(model, max_batch=8, max_len=24, batch_buckets=(2, 4), len_buckets=(16,))
    sampler.prefill(ids, mask, 6)
    assert (sampler._b, sampler._s) == (8, 16)
    for i in range(2):
        sampler.step(cont[:, i])
    keep = torch.tensor([1, 3, 4])
    sampler.compact(keep)
    assert sampler._b == 4
    got = torch.stack([sampler.step(cont[keep, i]).clone() for i in range(2, 5)], 1)
    full_mask = torch.cat([mask, torch.ones_like(cont)], 1)
    ref = forward_logits(model, torch.cat([ids, cont], 1), full_mask)[keep][:, ids.shape[1] + 2 : ids.shape[1] + 5]
    torch.testing.assert_close(got, ref, atol=ATOL, rtol=1e-5)


def _hf_greedy(model, ids, mask, new, stops):  # type: ignore[no-untyped-def]
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        do_sample=False,
        eos_token_id=list(stops),
        pad_token_id=PAD,
    )
    return out[:, ids.shape[1] :]


@pytest.mark.parametrize("case", ["llama-tied-gqa", "qwen2-untied-mha", "qwen3-qk-norm-gqa", "mistral-window-covers"])
def test_greedy_sampling_draws_the_framework_generate_tokens(case: str) -> None:
    model = build_case(case, seed=7)
    ids, mask = prompts(6, seed=8)
    new = 14
    # Stop ids the greedy run does produce mid-response, so the stop handling is exercised: EOS plus the
    # third token of row 0 and the fifth of row 2.
    free = _hf_greedy(model, ids, mask, new, [EOS])
    stops = (EOS, int(free[0, 2]), int(free[2, 4]))
    ref = _hf_greedy(model, ids, mask, new, stops)
    sampler = StaticSampler(model, max_batch=8, max_len=32, check_every=3)
    resp, resp_mask, finished = sampler.sample(ids, mask, new, stops, PAD, 0.0, None)
    assert torch.equal(resp, ref)
    assert finished[0] and finished[2] and resp.shape[1] <= new
    for row in range(resp.shape[0]):
        hits = [i for i, t in enumerate(resp[row].tolist()) if t in stops]
        live = hits[0] + 1 if hits else resp.shape[1]
        assert resp_mask[row].tolist() == [1] * live + [0] * (resp.shape[1] - live)
        assert bool(finished[row]) == bool(hits)
        assert set(resp[row, live:].tolist()) <= {PAD}


def test_a_bucket_shorter_than_the_cache_gives_the_same_tokens() -> None:
    model = build("llama", seed=9, tie_word_embeddings=False)
    ids, mask = prompts(4, seed=10)
    a = StaticSampler(model, max_batch=4, max_len=40).sample(ids, mask, 12, (EOS,), PAD, 0.0, None)
    b = StaticSampler(model, max_batch=4, max_len=40, len_buckets=(24,)).sample(ids, mask, 12, (EOS,), PAD, 0.0, None)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_norm_and_rotation_are_the_frameworks_bit_for_bit(dtype: torch.dtype) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    from trainer_backend.local.fastgen.forward import rms_norm, rotate

    gen = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(4, 5, 6, 32, generator=gen)).to(dtype)
    for norm_cls in (LlamaRMSNorm, Qwen3RMSNorm):
        norm = norm_cls(32, eps=1e-5).to(dtype)
        with torch.no_grad():
            norm.weight.copy_(1 + torch.randn(32, generator=gen))
        assert torch.equal(rms_norm(x, norm.weight, norm.variance_epsilon), norm(x))
    q, k = x[:, :, :4].transpose(1, 2), x[:, :, 4:].transpose(1, 2)  # [B, heads, T, D] as transformers holds them
    cos, sin = torch.randn(4, 5, 32, generator=gen).to(dtype), torch.randn(4, 5, 32, generator=gen).to(dtype)
    ref_q, ref_k = apply_rotary_pos_emb(q, k, cos, sin)
    both = rotate(x, cos[:, :, None], sin[:, :, None])  # [B, T, heads, D] with q and k together, as run_layers
    assert torch.equal(both[:, :, :4].transpose(1, 2), ref_q) and torch.equal(both[:, :, 4:].transpose(1, 2), ref_k)
