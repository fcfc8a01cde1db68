"""What the HF engine decodes with on top of transformers: a KV cache that writes into buffers
instead of concatenating (and, on CPU, SDPA over grouped key/value heads: actors/cpu_attention.py).
Both remove a copy that grew with the KV cache at every step; the rollouts are transformers'
own to the token (tests/actors/test_hf_decoding.py, docs/rollout.md)."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views of buffers with ``room`` tokens to spare:
    a step writes its keys and values into them, where transformers' DynamicLayer concatenates
    the whole cache anew every step. That copy grows with the cache; it was a fifth of the
    CPU time of the demo's generation, which runs 1.07 times faster without it
    (benchmarks/hf_generate.py, docs/rollout.md)."""

    def __init__(self, room: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.room = room
        self.dtype_held = dtype  # the buffers' dtype; the states' own when None
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
            held = self.dtype_held or key_states.dtype
            buf = (
                key_states.new_empty(shape, dtype=held),
                value_states.new_empty(shape, dtype=held),
            )
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
    windows: the decoders the HF engine serves). ``dtype`` float32 keeps a bf16 model's cache
    in fp32 for an attention that runs in fp32 (actors/cpu_attention.py), which would otherwise
    cast the whole cache up at every step, at more than the attention's own cost."""

    def __init__(self, num_layers: int, room: int, dtype: torch.dtype | None = None):
        Cache.__init__(self, layers=[GrowingLayer(room, dtype) for _ in range(num_layers)])
