"""Shared by the learner's tests: the tiny VLM's learner config and its three stages' batches
(images drawn here), so every test file builds the same fixed batches."""

from __future__ import annotations

from PIL import Image, ImageDraw

from actors.learner import Learner
from rlcs.config import Config

THINK = "<think>{r}</think><answer><|begin_of_box|>{a}<|end_of_box|></answer>"


def _image(color: str, w: int = 112, h: int = 84) -> Image.Image:
    img = Image.new("RGB", (w, h), "white")
    ImageDraw.Draw(img).rectangle([10, 10, 60, 50], fill=color)
    return img


def _config(model_path, **learner) -> Config:
    lc = dict(lr=2e-3, zero_stage=2, micro_batch=2, grad_clip=1.0)
    lc.update(learner)
    return Config.model_validate(
        {
            "stage": "pretrain",
            "model": {"path": str(model_path)},
            "learner": lc,
            "data": {"seq_len": 256},
        }
    )


def pretrain_batch():
    texts = [{"text": f"plain text document number {i} about shapes"} for i in range(3)]
    images = [
        {"text": f"<|begin_of_image|><|image|><|end_of_image|>a {c} box", "images": [_image(c)]}
        for c in ("red", "blue")
    ]
    return texts + images


def sft_batch():
    out = []
    for c in ("red", "green"):
        out.append(
            {
                "prompt": "What colour is the box?",
                "response": THINK.format(r="look", a=c),
                "images": [_image(c)],
            }
        )
    out.append(
        {
            "prompt": "2+3?",
            "response": "<answer><|begin_of_box|>5<|end_of_box|></answer>",
            "thinking": False,
        }
    )
    return out


def rl_batch(learner: Learner):
    """Two prompts (one with an image) x 4 rollouts, rewarded 1 for answer 'a', 0 otherwise."""
    proc, tok = learner.processor, learner.tokenizer
    trajs = []
    for item, img in (("img", _image("red")), ("txt", None)):
        content = [{"type": "image"}, {"type": "text", "text": "Colour?"}] if img else "Colour?"
        text = tok.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        ids = proc(text, [img] if img else None)["input_ids"][0].tolist()
        for k, ans in enumerate("abab"):
            resp = tok(
                THINK.format(r="hm" * (k + 1), a=ans) + "<|endoftext|>", add_special_tokens=False
            )["input_ids"]
            trajs.append(
                dict(
                    item_id=item,
                    prompt_token_ids=ids,
                    token_ids=resp,
                    reward=float(ans == "a"),
                    images=[img] if img else [],
                )
            )
    return trajs
