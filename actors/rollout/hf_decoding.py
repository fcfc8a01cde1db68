"""What the HF engine decodes with on top of transformers: SDPA over grouped key/value heads on
CPU, and a KV cache that writes into buffers instead of concatenating. Both remove a copy that
grew with the KV cache at every step; the rollouts are transformers' own to the token
(tests/actors/test_hf_decoding.py, docs/rollout.md)."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

#: the attention the HF engine loads its model with on CPU (``register_cpu_attention``)
CPU_ATTENTION = "rlcs_sdpa_gqa"


def _sdpa_gqa(
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
    """transformers' SDPA attention, with grouped-query heads left to the kernel (``enable_gqa``).

    transformers copies the key and value heads out to the query heads (``repeat_kv``) before
    SDPA whenever there is a mask, and generation of left-padded batches always has one. On
    CPU the kernel takes the grouped heads as they are, to the same result: the copy was a
    quarter of the decoder's time in the demo's rollouts, which generate 1.23 times faster
    without it (benchmarks/hf_generate.py, docs/rollout.md). CUDA keeps "sdpa", whose
    fast kernels take no grouped heads with a mask."""
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    is_causal = bool(query.shape[2] > 1 and attention_mask is None and is_causal)
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
    return out.transpose(1, 2).contiguous(), None


def register_cpu_attention() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(CPU_ATTENTION, _sdpa_gqa)
    AttentionMaskInterface.register(CPU_ATTENTION, sdpa_mask)  # the masks "sdpa" gets


class GrowingLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views of buffers with ``room`` tokens to spare:
    a step writes its keys and values into them, where transformers' DynamicLayer concatenates
    the whole cache anew every step. That copy grows with the cache; it was a fifth of the
    CPU time of the demo's generation, which runs 1.07 times faster without it
    (benchmarks/hf_generate.py, docs/rollout.md)."""

    def __init__(self, room: int):
        super().__init__()
        self.room = room
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, q = self.get_seq_length(), key_states.shape[-2]
        buf = self.buffers
        # new buffers when these are full, or when the keys are no longer views of them
        # (batch_select_indices and the like replace the keys)
        if (
            buf is None
            or buf[0].shape[-2] < n + q
            or (
                n
                and (self.keys.data_ptr(), self.keys.shape[0])
                != (buf[0].data_ptr(), buf[0].shape[0])
            )
        ):
            shape = (*key_states.shape[:-2], n + q + self.room, key_states.shape[-1])
            buf = (key_states.new_empty(shape), value_states.new_empty(shape))
            if n:
                buf[0][..., :n, :] = self.keys
                buf[1][..., :n, :] = self.values
            self.buffers = buf
        buf[0][..., n : n + q, :] = key_states
        buf[1][..., n : n + q, :] = value_states
        self.keys, self.values = buf[0][..., : n + q, :], buf[1][..., : n + q, :]
        return self.keys, self.values

    def reset(self) -> None:
        self.buffers = None
        super().reset()


class GrowingCache(DynamicCache):
    """transformers' DynamicCache with :class:`GrowingLayer` layers (models without sliding
    windows: the decoders the HF engine serves)."""

    def __init__(self, num_layers: int, room: int):
        Cache.__init__(self, layers=[GrowingLayer(room) for _ in range(num_layers)])
