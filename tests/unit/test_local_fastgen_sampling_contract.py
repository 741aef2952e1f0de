"""The static sampler keeps `decode.sample`'s contract, follows weight updates and names what it refuses.

- Sampled responses: the stop token ends a row and is its last masked token, PAD after, `finished` says
  whether a stop was drawn, T is the longest response; rows that stop leave the batch (compaction) without
  changing what the others draw.
- The decode weights are a copy refreshed in place: after an optimizer step the sampler decodes the new
  weights (same addresses, so captured graphs stay valid); an update behind autograd's back (`.data`) needs
  `refresh()`.
- The decode step can run twice on the same inputs with the same result (what CUDA graph warm-up relies on).
- bf16 decoding matches the model's own bf16 forward within bf16 rounding.
- `supports` returns a one-line reason for what it cannot reproduce; `fast_sample` keeps the tiny character
  model on its existing decoder, bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from fastgen_models import BOS, EOS, PAD, VOCAB, build, build_case, forward_logits, prompts
from transformers import GPT2Config, GPT2LMHeadModel

from trainer_backend.local import decode
from trainer_backend.local.fastgen import StaticSampler, fast_sample, supports
from trainer_backend.local.model import ModelShape, build_model


def _check_contract(resp: torch.Tensor, mask: torch.Tensor, finished: torch.Tensor, stops: set[int]) -> list[int]:
    """Assert the response contract row by row; return each row's response length."""
    lengths = []
    for row in range(resp.shape[0]):
        tokens, live = resp[row].tolist(), int(mask[row].sum())
        assert mask[row].tolist() == [1] * live + [0] * (len(tokens) - live)
        assert set(tokens[live:]) <= {PAD}
        assert not stops & set(tokens[: live - 1])  # no stop before the last live token
        assert bool(finished[row]) == (tokens[live - 1] in stops)
        lengths.append(live)
    assert resp.shape[1] == max(lengths)
    return lengths


def test_sampled_rows_stop_at_a_stop_token_and_pad_after() -> None:
    model = build_case("qwen3-qk-norm-gqa", seed=11)
    ids, mask = prompts(16, seed=12)
    stops = {EOS, *range(10, 22)}  # about one token in seven: rows stop at many different lengths
    sampler = StaticSampler(model, max_batch=16, max_len=64, check_every=2)
    gen = torch.Generator().manual_seed(13)
    resp, resp_mask, finished = sampler.sample(ids, mask, 40, sorted(stops), PAD, 1.0, gen)
    lengths = _check_contract(resp, resp_mask, finished, stops)
    assert len(set(lengths)) > 4 and finished.sum() >= 12
    assert sampler.compactions >= 2
    # Without compaction (one batch bucket) every row draws the same tokens: the draw covers all rows
    # every step, whichever are still in the cache.
    whole = StaticSampler(model, max_batch=16, max_len=64, batch_buckets=(16,), check_every=2)
    again = whole.sample(ids, mask, 40, sorted(stops), PAD, 1.0, torch.Generator().manual_seed(13))
    assert whole.compactions == 0
    assert all(torch.equal(x, y) for x, y in zip((resp, resp_mask, finished), again, strict=True))


def test_no_stop_ids_runs_every_row_to_max_new_tokens() -> None:
    model = build("mistral", seed=14, sliding_window=None)
    ids, mask = prompts(3, seed=15)
    sampler = StaticSampler(model, max_batch=4, max_len=30)
    resp, resp_mask, finished = sampler.sample(ids, mask, 9, (), PAD, 0.7, torch.Generator().manual_seed(0))
    assert resp.shape == (3, 9) and resp_mask.sum() == 27 and not finished.any()
    empty = sampler.sample(ids, mask, 0, (EOS,), PAD, 1.0, None)
    assert [tuple(t.shape) for t in empty] == [(3, 0), (3, 0), (3,)]


def test_an_optimizer_step_reaches_the_decode_weights_in_place() -> None:
    model = build_case("llama-tied-gqa", seed=16)
    ids, mask = prompts(4, seed=17)
    sampler = StaticSampler(model, max_batch=4, max_len=32)
    before = sampler.sample(ids, mask, 10, (EOS,), PAD, 0.0, None)[0]
    addresses = [t.data_ptr() for t, _ in sampler.weights._plan]
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    with torch.enable_grad():
        model(input_ids=ids, attention_mask=mask).logits.logsumexp(-1).mean().backward()
    opt.step()
    after = sampler.sample(ids, mask, 10, (EOS,), PAD, 0.0, None)[0]
    fresh = StaticSampler(model, max_batch=4, max_len=32).sample(ids, mask, 10, (EOS,), PAD, 0.0, None)[0]
    assert not torch.equal(before, after) and torch.equal(after, fresh)
    assert [t.data_ptr() for t, _ in sampler.weights._plan] == addresses
    with torch.no_grad():  # behind autograd's back: the version counter does not move
        for p in model.parameters():
            p.data.mul_(-1.0)
    stale = sampler.sample(ids, mask, 10, (EOS,), PAD, 0.0, None)[0]
    sampler.refresh()
    flipped = sampler.sample(ids, mask, 10, (EOS,), PAD, 0.0, None)[0]
    expect = StaticSampler(model, max_batch=4, max_len=32).sample(ids, mask, 10, (EOS,), PAD, 0.0, None)[0]
    assert torch.equal(stale, after) and torch.equal(flipped, expect) and not torch.equal(flipped, after)


def test_the_decode_step_is_idempotent() -> None:
    model = build_case("qwen2-tied-qkv-bias", seed=19)
    ids, mask = prompts(3, seed=20)
    sampler = StaticSampler(model, max_batch=4, max_len=20)
    sampler.prefill(ids, mask, 5)
    sampler._tok[:3] = torch.tensor([5, 6, 7])
    sampler._slot.fill_(ids.shape[1])
    sampler._step_body()
    state = [t.clone() for t in (sampler._logits, sampler._keymask, *sampler._cache[0], *sampler._cache[1])]
    sampler._step_body()
    again = [sampler._logits, sampler._keymask, *sampler._cache[0], *sampler._cache[1]]
    assert all(torch.equal(x, y) for x, y in zip(state, again, strict=True))


def test_bf16_decoding_matches_the_models_bf16_forward() -> None:
    model = build_case("qwen2-tied-qkv-bias", seed=21)
    ids, mask = prompts(4, seed=22)
    cont = torch.randint(3, VOCAB, (4, 4), generator=torch.Generator().manual_seed(23))
    sampler = StaticSampler(model, max_batch=4, max_len=24, dtype=torch.bfloat16)  # fp32 masters, bf16 copy
    got = [sampler.prefill(ids, mask, 5)] + [sampler.step(cont[:, i]).clone() for i in range(4)]
    full, full_mask = torch.cat([ids, cont], 1), torch.cat([mask, torch.ones_like(cont)], 1)
    p = ids.shape[1] - 1
    exact = forward_logits(model, full, full_mask)[:, p:]
    bf16 = forward_logits(model.to(torch.bfloat16), full, full_mask)[:, p:]
    fast_err = (torch.stack(got, 1) - bf16).abs().max() / bf16.abs().max()
    bf16_err = (bf16 - exact).abs().max() / exact.abs().max()
    assert sampler._cos.dtype == torch.bfloat16
    assert 0 < fast_err < 3 * bf16_err and bf16_err < 0.05


@pytest.mark.parametrize(
    ("model", "max_len", "reason"),
    [
        (lambda: GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2)), 16, "model_type gpt2 is not one of"),
        (lambda: build("llama", hidden_act="gelu"), 16, "hidden_act gelu is not silu"),
        (lambda: build("mistral", sliding_window=12), 16, "sliding_window 12 is shorter than 16 tokens"),
        (lambda: build("mistral", sliding_window=12), None, "sliding_window 12 is shorter than an unknown length"),
        (
            lambda: build("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=1),
            16,
            "sliding_window 8 is shorter",
        ),
        (
            lambda: build("llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}),
            16,
            "rope_type dynamic",
        ),
    ],
)
def test_unsupported_models_get_a_reason(model, max_len, reason) -> None:  # type: ignore[no-untyped-def]
    found = supports(model(), max_len)
    assert found is not None and reason in found and "\n" not in found
    with pytest.raises(ValueError, match="cannot decode this model exactly"):
        StaticSampler(model(), max_batch=2, max_len=max_len or 16)


def test_supported_models_and_windows_that_cover_the_sequence() -> None:
    assert supports(build("mistral", sliding_window=16), 16) is None
    assert supports(build("qwen2", use_sliding_window=True, sliding_window=64, max_window_layers=1), 64) is None
    assert supports(build("qwen3", head_dim=16)) is None


def test_fast_sample_keeps_the_tiny_model_on_its_decoder_bit_for_bit() -> None:
    model = build_model(ModelShape(n_layers=2, hidden=64), 40, seed=0).eval()
    ids = torch.tensor([[0, 0, 1, 5, 6], [1, 7, 8, 9, 10], [0, 1, 11, 12, 13]])
    mask = (ids != 0).long()
    got = fast_sample(model, ids, mask, 12, (2, 9), 0, 1.0, torch.Generator().manual_seed(4))
    ref = decode.sample(model, ids, mask, 12, 2, 0, 1.0, torch.Generator().manual_seed(4), (9,))
    assert all(torch.equal(x, y) for x, y in zip(got, ref, strict=True))


def test_fast_sample_takes_a_sampler_or_a_supported_model() -> None:
    model = build_case("qwen3-untied-attention-bias", seed=24)
    ids, mask = prompts(3, seed=25)
    sampler = StaticSampler(model, max_batch=4, max_len=32)
    via_sampler = fast_sample(sampler, ids, mask, 8, (EOS,), PAD, 0.0, None)
    via_model = fast_sample(model, ids, mask, 8, (EOS,), PAD, 0.0, None)
    assert all(torch.equal(x, y) for x, y in zip(via_sampler, via_model, strict=True))
    with pytest.raises(ValueError, match="exceed the sampler"):
        fast_sample(sampler, ids, mask, 40, (EOS,), PAD, 0.0, None)
    with pytest.raises(ValueError, match="model_type gpt2"):
        fast_sample(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2)), ids, mask, 4, (BOS,), PAD, 0.0, None)


def test_graph_mode_captures_each_bucket_once_and_replays_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA-graph branch on a fake GPU: a 'graph' replays the step of the bucket it was captured for."""
    model = build_case("qwen3-qk-norm-gqa", seed=26)
    ids, mask = prompts(16, seed=27)
    stops = sorted({EOS, *range(10, 22)})
    eager = StaticSampler(model, max_batch=16, max_len=64, check_every=2)
    ref = eager.sample(ids, mask, 30, stops, PAD, 1.0, torch.Generator().manual_seed(28))
    sampler = StaticSampler(model, max_batch=16, max_len=64, check_every=2)
    events: list[tuple[str, int]] = []

    class FakeGraph:
        def __init__(self) -> None:
            self.bucket = (0, 0)

        def replay(self) -> None:
            assert (sampler._b, sampler._s) == self.bucket, "a graph replayed for another bucket"
            sampler._step_body()

    class Stream:
        def wait_stream(self, other: object) -> None:
            pass

    class OnSideStream:  # `with torch.cuda.stream(side)`: the warm-up
        def __init__(self, stream: Stream) -> None:
            pass

        def __enter__(self) -> None:
            events.append(("warm-up", sampler._b))

        def __exit__(self, *exc: object) -> None:
            pass

    class Capture:  # `with torch.cuda.graph(g, pool=...)`
        def __init__(self, graph: FakeGraph, pool: object = None) -> None:
            assert pool == "pool"
            self.graph = graph

        def __enter__(self) -> None:
            self.graph.bucket = (sampler._b, sampler._s)
            events.append(("capture", sampler._b))

        def __exit__(self, *exc: object) -> None:
            pass

    fakes = {
        "graph_pool_handle": lambda: "pool",
        "Stream": lambda device=None: Stream(),
        "current_stream": lambda device=None: Stream(),
        "stream": OnSideStream,
        "CUDAGraph": FakeGraph,
        "graph": Capture,
        "synchronize": lambda device=None: None,
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(torch.cuda, name, fake)
    sampler.graphs = True
    got = sampler.sample(ids, mask, 30, stops, PAD, 1.0, torch.Generator().manual_seed(28))
    assert all(torch.equal(x, y) for x, y in zip(got, ref, strict=True))
    captured = [b for kind, b in events if kind == "capture"]
    assert events == [e for b in captured for e in (("warm-up", b), ("capture", b))]  # each capture warmed up
    assert sampler.compactions >= 2 and len(set(captured)) == len(captured) == len(sampler._graph_of) >= 3
    assert sampler.capture_seconds > 0
