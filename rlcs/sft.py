"""SFT examples in the GLM reasoning format, with the loss on assistant tokens only.

SFT teaches the output style: ``<think>{reasoning}</think><answer>{answer}</answer>``, with the
verifiable answer in one ``<|begin_of_box|>…<|end_of_box|>`` span. In the non-thinking mode the
chat template appends ``/nothink`` to the prompt and pre-fills an empty ``<think></think>``;
that pre-fill is part of the prompt, so it carries no loss. The end-of-text token that closes
the turn does carry loss, so the model learns to stop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from PIL import Image

THINK_FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL)
NOTHINK_FORMAT = re.compile(r"^<answer>.*?</answer>$", re.DOTALL)
EMPTY_THINK = "<think></think>"
END_OF_TURN = "<|endoftext|>"


@dataclass
class SFTExample:
    """Token ids, a 0/1 loss mask aligned with them, and the image tensors if any."""

    input_ids: list[int]
    loss_mask: list[int]
    images: dict[str, Any] | None = None


def check_response(response: str, thinking: bool) -> str:
    """Return the response in the form the model must produce, or raise ``ValueError``.

    In non-thinking mode a leading empty ``<think></think>`` is accepted and dropped, because
    the template already pre-fills it.
    """
    if thinking:
        if not THINK_FORMAT.match(response):
            raise ValueError("thinking response must be <think>…</think><answer>…</answer>")
        return response
    if response.startswith(EMPTY_THINK):
        response = response[len(EMPTY_THINK) :].lstrip()
    if not NOTHINK_FORMAT.match(response):
        raise ValueError("non-thinking response must be <answer>…</answer> (empty think optional)")
    return response


def build_sft_example(
    processor_or_tokenizer: Any,
    prompt: str,
    response: str,
    images: list[Image.Image] | None = None,
    thinking: bool = True,
) -> SFTExample:
    """Tokenise one single-turn example through the chat template.

    ``processor_or_tokenizer`` is a tokenizer for text models, or a ``Glm4vImageTextProcessor``-like
    processor (with ``.tokenizer`` and ``__call__(text, images)``) when there are images.
    """
    tok = getattr(processor_or_tokenizer, "tokenizer", processor_or_tokenizer)
    images = images or []
    content: Any = prompt
    if images:
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": prompt}]
    prompt_text = tok.apply_chat_template(
        [{"role": "user", "content": content}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=thinking,
    )
    target = check_response(response, thinking) + END_OF_TURN
    image_data = None
    if images:
        enc = processor_or_tokenizer(prompt_text, images)
        prompt_ids = enc["input_ids"][0].tolist()
        image_data = {k: enc[k] for k in ("pixel_values", "image_grid_thw")}
    else:
        prompt_ids = tok(prompt_text, add_special_tokens=False)["input_ids"]
    target_ids = tok(target, add_special_tokens=False)["input_ids"]
    ids = prompt_ids + target_ids
    if image_data is not None:
        import torch

        image_id = tok.convert_tokens_to_ids("<|image|>")
        image_data["mm_token_type_ids"] = (torch.tensor(ids) == image_id).to(torch.int32)
    return SFTExample(
        input_ids=ids, loss_mask=[0] * len(prompt_ids) + [1] * len(target_ids), images=image_data
    )
