"""Tiny models built from a config, written out as ordinary HF directories.

Nothing can be downloaded from a model hub here, so every test and demo starts from one of
these: a tiny Llama-style causal LM (served by vLLM's CPU build), and a tiny
GLM-4.1V-architecture VLM (``Glm4vForConditionalGeneration``) with a processor that needs no
torchvision. Both use the byte-level tokenizer from :mod:`rlcs.tokenizer`, with BPE merges
learnt from the run's texts where ``model.tokenizer_merges`` asks for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcs.tokenizer import build_tokenizer, stop_token_ids

#: Text model defaults: 2 layers, 128 wide. ``vocab_size`` is rounded up from the tokenizer's.
TINY_TEXT: dict[str, Any] = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)

#: VLM defaults: head dim 32 with partial rotary 0.5 gives rotary dim 16, so the 3D-RoPE
#: ``mrope_section`` must sum to 8.
TINY_VLM_TEXT: dict[str, Any] = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000.0,
        "mrope_section": [2, 3, 3],
        "partial_rotary_factor": 0.5,
    },
)
TINY_VLM_VISION: dict[str, Any] = dict(
    depth=2,
    hidden_size=64,
    intermediate_size=128,
    num_heads=2,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    image_size=112,
)
#: How the tiny VLM's vision tower starts out knowing where each patch is. HF initialises the
#: learned position table like any weight (std 0.02, beside unit-RMS patch features), and a
#: tower trained from scratch for minutes never learns to use it; the language model's 3-D
#: RoPE gives columns only its lowest frequencies. The demo's SFT model then found a lone
#: shape's column 47% of the time. ``"sincos"`` starts the table as a 2-D sine-cosine code
#: (``sincos_2d``): rows and columns both 100% (figures in docs/demo.md, "Where each patch is").
#: ``"random"`` keeps HF's initialisation; set it in ``model.tiny_overrides``.
TINY_VLM_POS_EMBED = "sincos"
#: The tiny GLM-4.5V-architecture model's language-model experts (``model.tiny: vlm_moe``):
#: four routed experts, two per token, and a shared one, after one dense layer, as in GLM-4.5V.
TINY_VLM_MOE = dict(n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                    moe_intermediate_size=64, first_k_dense_replace=1, n_group=1, topk_group=1)  # fmt: skip
#: Image budget for the tiny VLM's processor: at most 16x16 patches (64 image tokens).
TINY_VLM_PIXELS = dict(min_pixels=28 * 28, max_pixels=224 * 224)


def _vocab_size(tokenizer, multiple: int = 64) -> int:
    n = len(tokenizer)
    return (n + multiple - 1) // multiple * multiple


def _special_ids(tokenizer) -> dict[str, int]:
    ids = tokenizer.convert_tokens_to_ids
    return dict(
        bos_token_id=ids("[gMASK]"),
        eos_token_id=stop_token_ids(tokenizer),
        pad_token_id=ids("<|pad|>"),
    )


def build_tiny_text_model(
    path: str | Path,
    seed: int = 0,
    dtype: str = "float32",
    merges: Sequence[tuple[str, str]] = (),
    **overrides: Any,
) -> Path:
    """Write a randomly initialised tiny Llama causal LM and its tokenizer (byte-level, plus
    ``merges``: :func:`rlcs.tokenizer.learn_merges`) to ``path``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    path = Path(path)
    tok = build_tokenizer(merges)
    special = _special_ids(tok)
    cfg = LlamaConfig(vocab_size=_vocab_size(tok), **{**TINY_TEXT, **overrides}, **special)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(**special)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def build_tiny_vlm(
    path: str | Path,
    seed: int = 0,
    dtype: str = "float32",
    moe: bool = False,
    merges: Sequence[tuple[str, str]] = (),
    **overrides: Any,
) -> Path:
    """Write a randomly initialised tiny ``Glm4vForConditionalGeneration`` (GLM-4.1V), or with
    ``moe`` a ``Glm4vMoeForConditionalGeneration`` (GLM-4.5V: routed and shared experts after
    one dense layer), with its tokenizer (byte-level, plus ``merges``) and image-processor
    config, to ``path``."""
    import torch
    from transformers import (
        GenerationConfig,
        Glm4vConfig,
        Glm4vForConditionalGeneration,
        Glm4vMoeConfig,
        Glm4vMoeForConditionalGeneration,
    )

    from rlcs.vlm_processor import Glm4vImageTextProcessor, build_image_processor

    path = Path(path)
    tok = build_tokenizer(merges)
    special = _special_ids(tok)
    ids = tok.convert_tokens_to_ids
    pos_embed = overrides.pop("vision_pos_embed", TINY_VLM_POS_EMBED)
    if pos_embed not in ("sincos", "random"):
        raise ValueError(f"vision_pos_embed must be 'sincos' or 'random', got {pos_embed!r}")
    text_cfg = {**TINY_VLM_TEXT, **(TINY_VLM_MOE if moe else {}), **overrides.pop("text", {})}
    vision_cfg = {**TINY_VLM_VISION, **overrides.pop("vision", {})}
    vision_cfg["out_hidden_size"] = text_cfg["hidden_size"]
    config_cls, model_cls = (
        (Glm4vMoeConfig, Glm4vMoeForConditionalGeneration)
        if moe
        else (Glm4vConfig, Glm4vForConditionalGeneration)
    )
    cfg = config_cls(
        text_config={
            **text_cfg,
            "vocab_size": _vocab_size(tok),
            "pad_token_id": special["pad_token_id"],
        },
        vision_config=vision_cfg,
        image_token_id=ids("<|image|>"),
        video_token_id=ids("<|video|>"),
        image_start_token_id=ids("<|begin_of_image|>"),
        image_end_token_id=ids("<|end_of_image|>"),
        video_start_token_id=ids("<|begin_of_video|>"),
        video_end_token_id=ids("<|end_of_video|>"),
        **overrides,
    )
    torch.manual_seed(seed)
    model = model_cls(cfg)
    if pos_embed == "sincos":
        table = model.model.visual.embeddings.position_embedding.weight
        with torch.no_grad():
            table.copy_(sincos_2d(int(table.shape[0] ** 0.5), table.shape[1]))
    model = model.to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(**special)
    model.save_pretrained(path)
    Glm4vImageTextProcessor(tok, build_image_processor(vision_cfg)).save_pretrained(path)
    return path


def sincos_2d(grid: int, dim: int, base: float = 10000.0):
    """A ``grid*grid x dim`` position table in row-major patch order: sines and cosines of the
    row in the first half of the dimensions, of the column in the second, each at ``dim // 4``
    frequencies from 1 towards ``1 / base``; then centred over the positions (the frequencies
    too low to turn over on this grid leave only a constant, which would shift every patch
    alike) and scaled to unit RMS."""
    import torch

    if dim % 4:
        raise ValueError(f"sincos_2d needs a dimension divisible by 4, got {dim}")
    quarter = dim // 4
    omega = base ** -(torch.arange(quarter, dtype=torch.float64) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")

    def code(pos):
        angle = pos.flatten()[:, None].double() * omega[None]
        return torch.cat([angle.sin(), angle.cos()], dim=1)

    table = torch.cat([code(rows), code(cols)], dim=1)
    table = table - table.mean(0, keepdim=True)
    return (table / table.pow(2).mean().sqrt()).float()


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
