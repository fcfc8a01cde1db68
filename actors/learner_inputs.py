"""Packed documents into model inputs, and the model's logits on them, for one learner rank.

``rlcs.packing.collate`` lays documents out in rows; ``ModelInputs`` adds what the model needs
beyond that: GLM-4.1V's 3-D rotary positions per document, the attention mask of tree documents
(a group's prompt once, its rollouts continuing it), the rows end to end for a varlen kernel,
and the weight-0 rows a rank runs when it has no work or no image.
"""

from __future__ import annotations

from typing import Any

import torch

from actors.learner_model import uses_varlen_kernel
from rlcs.packing import Document, collate, tree_attention_mask


class ModelInputs:
    """Builds the inputs of ``model`` (the HF model a DeepSpeed engine wraps) on ``device``.

    ``tower_every_pass``: every micro-batch runs the vision tower, with a blank image where it
    holds none (several ranks training a VLM; see ``blank_image_doc``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        attn_implementation: str,
        device: torch.device | str,
        tower_every_pass: bool = False,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id or 0
        self.is_vlm = hasattr(model.config, "vision_config")
        self.attn_implementation = attn_implementation
        self.varlen = uses_varlen_kernel(attn_implementation)
        self.device = device
        self.tower_every_pass = tower_every_pass

    def position_ids(self, b: dict[str, Any]) -> torch.Tensor:
        """Per-document positions; for GLM-4.1V, per-document 3-D RoPE with text positions first."""
        pos = b["position_ids"]
        if not self.is_vlm:
            return pos
        rope = pos[None].repeat(3, 1, 1)
        inner = self.model.model
        for row, start, length, grid, prefix in b.get("doc_spans", []):
            if grid is None:
                continue
            ids = b["input_ids"][row : row + 1, start : start + prefix]
            mm = b["mm_token_type_ids"][row : row + 1, start : start + prefix]
            p3, _ = inner.get_rope_index(ids, mm_token_type_ids=mm, image_grid_thw=grid)
            rope[:, row, start : start + prefix] = p3[:, 0]
            if prefix < length:  # a tree's continuations: text after the prefix, one step a token
                after = pos[row, start + prefix : start + length] - prefix
                rope[:, row, start + prefix : start + length] = p3.max() + 1 + after
        return torch.cat([pos[None], rope], dim=0)

    def logits(self, model: Any, b: dict[str, Any]) -> torch.Tensor:
        """``model``'s logits on a collated batch: the policy's engine or the KL reference."""
        dev = self.device
        kw: dict[str, Any] = dict(input_ids=b["input_ids"].to(dev), use_cache=False)
        kw["position_ids"] = self.position_ids(b).to(dev)
        if "mm_token_type_ids" in b:
            kw["mm_token_type_ids"] = b["mm_token_type_ids"].to(dev)
        if "pixel_values" in b:
            kw["pixel_values"] = b["pixel_values"].to(dev)
            kw["image_grid_thw"] = b["image_grid_thw"].to(dev)
        if "branch_ids" in b:  # tree documents: attention only the explicit mask can express
            if self.varlen:
                raise ValueError("tree documents (learner.grpo.share_prompts) need sdpa or eager")
            mask = tree_attention_mask(b["doc_index"], b["branch_ids"]).to(dev)
            if self.attn_implementation == "eager":  # an additive mask
                mask = torch.zeros(mask.shape, device=dev).masked_fill(~mask, float("-inf"))
            kw["attention_mask"] = mask
        if not self.varlen:
            return model(**kw).logits
        # flash-attention: the rows end to end in one, where transformers reads each document's
        # bounds from where its positions restart (each row's padding is a document of its own)
        rows = kw["input_ids"].shape[0]
        for key in ("input_ids", "position_ids", "mm_token_type_ids"):
            if key in kw:
                kw[key] = kw[key].reshape(*kw[key].shape[:-2], 1, -1)
        logits = model(**kw).logits
        return logits.reshape(rows, -1, logits.shape[-1])

    def collate(
        self, docs: list[Document], rows: list[list[int]]
    ) -> tuple[dict[str, Any], list[Document]]:
        """The batch of ``rows`` (indices into ``docs``), and its documents in batch order."""
        row_docs = [[docs[i] for i in row] for row in rows]
        if self.tower_every_pass and not any(d.images for row in row_docs for d in row):
            row_docs.append([self.blank_image_doc()])
        order = [d for row in row_docs for d in row]
        return collate(row_docs, self.pad_id), order

    def filler_batch(self, objective: str, ref_logprobs: bool = False) -> dict[str, Any]:
        """A micro-batch of weight 0 (a two-token document, and the blank image where the
        vision tower must run), for a pass a rank must run without work. ``ref_logprobs``:
        the policy loss has a KL term, which reads them (at weight 0 here)."""
        zeros = [0.0, 0.0]
        extras = {"advantages": zeros, "rollout_logprobs": zeros} if objective == "policy" else {}
        if extras and ref_logprobs:
            extras["ref_logprobs"] = zeros
        return self.collate([Document([self.pad_id] * 2, zeros, extras=extras)], [[0]])[0]

    def blank_image_doc(self) -> Document:
        """A weight-0 row holding one blank image of the smallest grid, for a micro-batch
        without images when several ranks train a VLM.

        ZeRO gathers the vision tower's parameters (stage 3) and reduces their gradients (every
        stage) in collectives that all ranks must join in the same order: a rank whose
        micro-batch had no image would skip them and the ranks' collectives would no longer
        match (a crash under gloo, a hang under NCCL). With this row every pass runs the tower
        where an image pass does; the row's targets are ignored and its gradient is zero."""
        vision = self.model.config.vision_config
        m = vision.spatial_merge_size
        width = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
        ids = self.tokenizer.convert_tokens_to_ids(
            ["<|begin_of_image|>", "<|image|>", "<|end_of_image|>"]
        )
        images = {
            "pixel_values": torch.zeros(m * m, width),
            "image_grid_thw": torch.tensor([[1, m, m]]),
            "mm_token_type_ids": torch.tensor([0, 1, 0], dtype=torch.int32),
        }
        return Document(ids, [0.0, 0.0, 0.0], images=images)
