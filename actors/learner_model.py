"""The model a learner trains: loading it and its processors, and choosing which parameters
train and at what learning rate (``learner.freeze``, ``learner.lr_groups``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from actors.cpu_attention import from_pretrained_on_cpu


def load_hf_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
    on_cpu: bool = False,
) -> torch.nn.Module:
    """Any HF causal LM, or an image-text-to-text model (e.g. GLM-4.1V) when it has vision.
    ``on_cpu``: "sdpa" is the CPU attention of actors/cpu_attention.py (grouped heads to the
    kernel, fp32 under bf16), as in the HF engine."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    if attn_implementation.startswith("flash") and importlib.util.find_spec("flash_attn") is None:
        raise ImportError(
            f"learner.attn_implementation={attn_implementation} needs the flash-attn package on "
            "every learner node (pip install flash-attn --no-build-isolation); or use sdpa"
        )
    cfg = AutoConfig.from_pretrained(path)
    auto = AutoModelForImageTextToText if hasattr(cfg, "vision_config") else AutoModelForCausalLM
    if on_cpu:
        return from_pretrained_on_cpu(
            auto, path, dtype=dtype, attn_implementation=attn_implementation
        )
    return auto.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)


def logits_in_fp32(model: torch.nn.Module) -> None:
    """Run ``model``'s output layer in fp32 under ``torch.autocast`` (``learner.precision:
    bf16-mixed``): bf16 logits round a token's logprob by up to about 0.03 nats at the demo's
    logit scale, the size of the updates PPO's ratio is there to measure."""
    head = model.get_output_embeddings()
    inner = head.forward

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            return inner(hidden.float())

    head.forward = forward


def load_for_training(path: str | Path, lc: Any, device: str) -> torch.nn.Module:
    """The model a learner rank trains, or its frozen KL reference, from ``lc``
    (``LearnerConfig``): the CPU attention on CPU, no KV cache, and under ``precision:
    bf16-mixed`` the output layer in fp32."""
    model = load_hf_model(path, attn_implementation=lc.attn_implementation, on_cpu=device == "cpu")
    model.config.use_cache = False
    if lc.precision == "bf16-mixed":
        logits_in_fp32(model)
    return model


def uses_varlen_kernel(attn_implementation: str) -> bool:
    """Whether that attention keeps packed documents apart without a mask (flash-attention's
    variable-length kernels): the learner then lays a micro-batch's rows end to end in one."""
    return attn_implementation.startswith("flash_attention")


def checkpoint_layout(
    model: torch.nn.Module, named: list[tuple[str, torch.Tensor]]
) -> list[tuple[str, torch.Tensor]]:
    """One module's weights as its checkpoint holds them, the layout vLLM's loader reads.

    transformers fuses some weights on load and splits them again on save: a mixture of
    experts' per-expert projections (GLM-4.5V's ``experts.N.gate_proj`` / ``up_proj`` /
    ``down_proj``) become one tensor per layer in memory. Other weights come back unchanged."""
    from transformers.core_model_loading import revert_weight_conversion

    return list(revert_weight_conversion(model, dict(named)).items())


def load_processors(path: str | Path) -> tuple[Any, Any]:
    """(tokenizer, image-text processor or None) for a model directory: this project's tiny
    models and published GLM-4.1V-architecture checkpoints alike."""
    from transformers import AutoTokenizer

    from rlcs.vlm_processor import load_vlm_processor

    proc = load_vlm_processor(path)
    if proc is not None:
        return proc.tokenizer, proc
    return AutoTokenizer.from_pretrained(path), None


def _match_prefixes(
    model: torch.nn.Module, prefixes: Iterable[str], setting: str, trainable_only: bool = False
) -> dict[str, str]:
    """Map each parameter name under one of ``prefixes`` to its longest matching prefix.

    A prefix that matches nothing is a typo in the config, not a no-op: it raises, naming
    ``setting``.
    """
    by_length = sorted(prefixes, key=len, reverse=True)
    found: dict[str, str] = {}
    for name, p in model.named_parameters():
        if trainable_only and not p.requires_grad:
            continue
        prefix = next(
            (k for k in by_length if name == k or name.startswith(k.rstrip(".") + ".")), None
        )
        if prefix is not None:
            found[name] = prefix
    missing = sorted(set(by_length) - set(found.values()))
    if missing:
        some = ", ".join(n for n, _ in list(model.named_parameters())[:3])
        kind = "trainable parameter" if trainable_only else "parameter"
        raise ValueError(f"{setting}: no {kind} name starts with {missing}; names look like {some}")
    return found


def freeze_parameters(model: torch.nn.Module, prefixes: list[str]) -> int:
    """Freeze every parameter whose name starts with one of ``prefixes``; return how many."""
    frozen = _match_prefixes(model, prefixes, "learner.freeze")
    for name, p in model.named_parameters():
        if name in frozen:
            p.requires_grad_(False)
    return len(frozen)


def param_groups(
    model: torch.nn.Module, base_lr: float, lr_by_prefix: dict[str, float]
) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: trainable parameters at ``base_lr``, except those under
    a prefix of ``lr_by_prefix``, which get that prefix's learning rate (the longest matching
    prefix wins). A prefix that matches no trainable parameter raises, as in ``learner.freeze``.
    """
    prefix_of = _match_prefixes(model, lr_by_prefix, "learner.lr_groups", trainable_only=True)
    groups: dict[float, list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            lr = lr_by_prefix[prefix_of[name]] if name in prefix_of else base_lr
            groups.setdefault(lr, []).append(p)
    # the base group first: the learner reports param_groups[0]'s learning rate
    order = sorted(groups, key=lambda lr: lr != base_lr)
    return [{"params": groups[lr], "lr": lr} for lr in order]
