"""The attention the HF engine and the learner load their models with on CPU: transformers'
SDPA attention with grouped key/value heads left to the kernel, and computed in fp32 when the
model runs in bf16 or fp16 (docs/rollout.md, docs/learner.md)."""

from __future__ import annotations

from typing import Any

import torch

#: the name it is registered under with transformers (``register_cpu_attention``)
CPU_ATTENTION = "rlcs_sdpa_gqa"


def sdpa_gqa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, with grouped-query heads left to the kernel (``enable_gqa``),
    in fp32 whatever the model's dtype.

    transformers copies the key and value heads out to the query heads (``repeat_kv``) before
    SDPA whenever there is a mask, and generation of left-padded batches and the learner's
    packed rows always have one. On CPU the kernel takes the grouped heads as they are, to the
    same result: the copy was a quarter of the decoder's time in the demo's rollouts, which
    generate 1.23 times faster without it (benchmarks/hf_generate.py). CPU's SDPA kernels are
    slower in bf16 than in fp32 (2.2 times in the demo's decode steps, and their backward in
    the learner's step), where its matmuls are 3 to 4 times faster; so a bf16 model's
    attention alone runs in fp32. CUDA keeps "sdpa", whose fast kernels take no grouped heads
    with a mask. Under ``torch.autocast`` (bf16 matmuls over fp32 weights) it stays fp32 as
    well."""
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    is_causal = bool(query.shape[2] > 1 and attention_mask is None and is_causal)
    dtype = query.dtype
    # all three: under autocast the rotary embedding leaves queries and keys fp32, values bf16
    query, key, value = query.float(), key.float(), value.float()
    with torch.autocast(device_type=query.device.type, enabled=False):
        out = torch.nn.functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=dropout,
            scale=scaling,
            is_causal=is_causal,
            enable_gqa=query.shape[1] != key.shape[1],
        )
    return out.transpose(1, 2).contiguous().to(dtype), None


def register_cpu_attention() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(CPU_ATTENTION, sdpa_gqa)
    AttentionMaskInterface.register(CPU_ATTENTION, sdpa_mask)  # the masks "sdpa" gets


def from_pretrained_on_cpu(model_cls: Any, path: Any, **load: Any) -> torch.nn.Module:
    """``model_cls.from_pretrained(path, **load)`` with the CPU attention in place of "sdpa";
    an architecture that takes no registered attention keeps "sdpa"."""
    if load.get("attn_implementation", "sdpa") != "sdpa":
        return model_cls.from_pretrained(path, **load)
    register_cpu_attention()
    try:
        return model_cls.from_pretrained(path, **{**load, "attn_implementation": CPU_ATTENTION})
    except ValueError:
        return model_cls.from_pretrained(path, **load)
