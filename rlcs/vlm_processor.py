"""A processor for GLM-4.1V-architecture models that needs no torchvision.

transformers' ``Glm4vProcessor`` builds a video processor that imports torchvision, which has
no CPU build on PyPI. This processor pairs the tokenizer with the image processor and does
the one thing the model needs from a processor: expand each ``<|image|>`` placeholder to the
image's token count (``t * h * w // merge_size**2`` of its ``image_grid_thw``, as
``Glm4vProcessor`` does), exactly once, and mark those tokens in ``mm_token_type_ids``.

:func:`load_vlm_processor` reads it from either kind of model directory: one written by this
project (``rlcs_processor.json``: the tiny models and every checkpoint trained from them) or a
GLM-4.1V / GLM-4.5V checkpoint as published, whose ``preprocessor_config.json`` holds its image
processor. Images are processed by the class that config names where it can be loaded, the PIL
one otherwise, so on a GPU host with torchvision the learner sees the pixels vLLM sees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

IMAGE_TOKEN = "<|image|>"
_CONFIG_NAME = "rlcs_processor.json"  # marks this project's layout


def build_image_processor(
    vision_cfg: dict[str, Any], min_pixels: int | None = None, max_pixels: int | None = None
):
    """The PIL GLM-4.1V image processor, sized for ``vision_cfg``."""
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    from rlcs.models import TINY_VLM_PIXELS

    temporal = vision_cfg.get("temporal_patch_size", 2)
    lo = min_pixels or TINY_VLM_PIXELS["min_pixels"]
    hi = max_pixels or TINY_VLM_PIXELS["max_pixels"]
    return Glm4vImageProcessorPil(
        patch_size=vision_cfg.get("patch_size", 14),
        merge_size=vision_cfg.get("spatial_merge_size", 2),
        temporal_patch_size=temporal,
        # smart_resize budgets pixels over both temporal frames of a still image
        size={"shortest_edge": lo * temporal, "longest_edge": hi * temporal},
    )


class Glm4vImageTextProcessor:
    """Tokenizer + image processor for ``Glm4vForConditionalGeneration``."""

    def __init__(self, tokenizer, image_processor):
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.merge_size = image_processor.merge_size
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Glm4vImageTextProcessor:
        from transformers import AutoTokenizer
        from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

        path = Path(path)
        if not (path / _CONFIG_NAME).is_file():
            raise FileNotFoundError(f"{path}: no {_CONFIG_NAME}; not a directory written by rlcs")
        return cls(
            AutoTokenizer.from_pretrained(path), Glm4vImageProcessorPil.from_pretrained(path)
        )

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> Glm4vImageTextProcessor:
        """A published GLM-4.1V-architecture checkpoint: its tokenizer and the image processor
        of its ``preprocessor_config.json``."""
        from transformers import AutoImageProcessor, AutoTokenizer

        path = Path(path)
        if problem := processor_config_problem(path):
            raise FileNotFoundError(f"{path}: {problem}")
        tokenizer = AutoTokenizer.from_pretrained(path)
        if IMAGE_TOKEN not in tokenizer.get_vocab():
            raise ValueError(f"{path}: the tokenizer has no {IMAGE_TOKEN} token for images")
        image_processor = AutoImageProcessor.from_pretrained(path)
        if getattr(image_processor, "merge_size", None) is None:
            raise ValueError(
                f"{path}: preprocessor_config.json gives {type(image_processor).__name__}, "
                "not a GLM-4.1V image processor (no merge_size)"
            )
        return cls(tokenizer, image_processor)

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        self.tokenizer.save_pretrained(path)
        self.image_processor.save_pretrained(path)
        (path / _CONFIG_NAME).write_text(json.dumps({"processor_class": type(self).__name__}))

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> str:
        kwargs.setdefault("tokenize", False)
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def image_token_counts(self, grid_thw) -> list[int]:
        return [int(t * h * w) // (self.merge_size**2) for t, h, w in grid_thw.tolist()]

    def expand_image_tokens(self, text: str, counts: list[int]) -> str:
        """Replace the i-th ``<|image|>`` with ``counts[i]`` copies; refuses to expand twice."""
        found = text.count(IMAGE_TOKEN)
        if found != len(counts):
            hint = " (was it expanded already?)" if found > len(counts) else ""
            raise ValueError(
                f"prompt has {found} {IMAGE_TOKEN} placeholders for {len(counts)} images{hint}"
            )
        parts = text.split(IMAGE_TOKEN)
        out = [parts[0]]
        for n, rest in zip(counts, parts[1:], strict=True):
            out.append(IMAGE_TOKEN * n)
            out.append(rest)
        return "".join(out)

    def __call__(
        self,
        text: str | list[str],
        images: list[Image.Image] | list[list[Image.Image]] | None = None,
        return_tensors: str = "pt",
    ):
        """Tokenise prompts (left-padded) with their images.

        ``images`` is a flat list for a single prompt, or one list per prompt.
        """
        import torch
        from transformers import BatchFeature

        texts = [text] if isinstance(text, str) else list(text)
        if images is None:
            per_prompt: list[list[Image.Image]] = [[] for _ in texts]
        elif isinstance(text, str):
            per_prompt = [list(images)]
        else:
            per_prompt = [list(x) for x in images]
        if len(per_prompt) != len(texts):
            raise ValueError(f"{len(texts)} prompts but {len(per_prompt)} image lists")
        flat = [img for imgs in per_prompt for img in imgs]
        data: dict[str, Any] = {}
        counts: list[int] = []
        if flat:
            vis = self.image_processor(images=flat, return_tensors="pt")
            data["pixel_values"] = vis["pixel_values"]
            data["image_grid_thw"] = vis["image_grid_thw"]
            counts = self.image_token_counts(vis["image_grid_thw"])
        expanded, start = [], 0
        for t, imgs in zip(texts, per_prompt, strict=True):
            expanded.append(self.expand_image_tokens(t, counts[start : start + len(imgs)]))
            start += len(imgs)
        enc = self.tokenizer(expanded, padding=True, return_tensors="pt", add_special_tokens=False)
        data["input_ids"] = enc["input_ids"]
        data["attention_mask"] = enc["attention_mask"]
        data["mm_token_type_ids"] = (enc["input_ids"] == self.image_token_id).to(torch.int32)
        return BatchFeature(data=data, tensor_type=return_tensors)

    def decode(self, ids, **kwargs: Any) -> str:
        return self.tokenizer.decode(ids, **kwargs)


def is_vision_model(path: str | Path) -> bool:
    """Whether the model directory's config.json has a vision tower."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    return "vision_config" in cfg


def takes_images(path: str | Path) -> bool | None:
    """Whether the model directory's model has a vision tower, or None where its config.json
    cannot be read (missing, or not JSON): for checks that leave that problem to the one that
    loads the model."""
    try:
        return is_vision_model(path)
    except (OSError, ValueError):
        return None


def processor_config_problem(path: str | Path) -> str | None:
    """Why a model directory lacks what its processor is read from, or None: a vision model
    needs this project's processor files or a published checkpoint's preprocessor_config.json.
    Cheap (no file is parsed beyond config.json), for checks before a run starts."""
    path = Path(path)
    if not is_vision_model(path) or any(
        (path / f).is_file() for f in (_CONFIG_NAME, "preprocessor_config.json")
    ):
        return None
    return (
        "a vision model with no preprocessor_config.json (its image processor config); copy "
        "it from the checkpoint this model came from"
    )


def load_vlm_processor(path: str | Path) -> Glm4vImageTextProcessor | None:
    """The image-text processor of a model directory, or None for a text-only model."""
    path = Path(path)
    if (path / _CONFIG_NAME).is_file():
        return Glm4vImageTextProcessor.from_pretrained(path)
    if not is_vision_model(path):
        return None
    return Glm4vImageTextProcessor.from_checkpoint(path)
