"""Fast exact generation for Hugging Face decoders (Llama, Qwen2, Qwen3, Mistral) on CPU or one GPU.

`supports(model, max_len)` says whether the fast path reproduces a model (None) or why not (a one-line reason:
fall back to the framework's `generate` and log it). `StaticSampler` is built once per run: a static KV cache,
a fixed-shape decode step captured into CUDA graphs on a GPU, a decode copy of the weights that `refresh`
updates in place. `fast_sample` is the trainer's single entry point. Modules: `arch` (what is supported, the
decode weights), `forward` (the maths), `sampler` (buckets, graphs, sampling and stops).
"""

from trainer_backend.local.fastgen.arch import ARCHITECTURES, supports
from trainer_backend.local.fastgen.sampler import StaticSampler, fast_sample

__all__ = ["ARCHITECTURES", "StaticSampler", "fast_sample", "supports"]
