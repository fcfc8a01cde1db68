"""What every synthetic task generator produces, and the drawing helpers they share.

A generator turns a seeded random source and a difficulty in [0, 1] into one ``Example``: an
image, a question, a verifiable answer, plus a caption (for the pretraining corpus) and a short
correct reasoning (for SFT).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFilter, ImageFont

#: Fonts tried in order; any that exist are used. PIL's built-in font is the fallback.
FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation")
BOX_OPEN, BOX_CLOSE = "<|begin_of_box|>", "<|end_of_box|>"


@dataclass
class Example:
    domain: str
    prompt: str
    image: Image.Image
    answer: Any  # what the verifier compares against
    answer_text: str  # what a correct model writes inside the box
    reasoning: str  # a short, correct chain of thought for SFT (short keeps tiny models fast)
    caption: str  # a description of the image for pretraining
    meta: dict[str, Any] = field(default_factory=dict)
    text_prompt: str | None = None  # the task with the image's content written out, if it can be

    def response(self) -> str:
        """The SFT target in the recipe's format, with exactly one box."""
        return f"<think>{self.reasoning}</think><answer>{BOX_OPEN}{self.answer_text}{BOX_CLOSE}</answer>"


class TaskGenerator(ABC):
    """One domain's generator. ``difficulty`` is in [0, 1]; harder means bigger or noisier."""

    domain: str = ""

    @abstractmethod
    def sample(self, rng: random.Random, difficulty: float) -> Example: ...

    def close(self) -> None:  # noqa: B027 - optional hook, most generators hold nothing
        """Release anything the generator holds (a browser, for instance)."""


@lru_cache(maxsize=1)
def font_files() -> tuple[str, ...]:
    found: list[str] = []
    for d in FONT_DIRS:
        p = Path(d)
        if p.is_dir():
            found += sorted(str(f) for f in p.glob("*.ttf") if "Oblique" not in f.name)
    return tuple(found)


@lru_cache(maxsize=256)
def _font(path: str | None, size: int) -> ImageFont.ImageFont:
    return ImageFont.truetype(path, size) if path else ImageFont.load_default(size=size)


def pick_font(rng: random.Random, size: int, varied: bool = True) -> ImageFont.ImageFont:
    files = font_files()
    if not files:
        return _font(None, size)
    return _font(rng.choice(files) if varied else files[0], size)


def add_noise(img: Image.Image, rng: random.Random, amount: float) -> Image.Image:
    """Speckle and blur in proportion to ``amount`` in [0, 1]."""
    if amount <= 0:
        return img
    draw = ImageDraw.Draw(img)
    w, h = img.size
    for _ in range(int(amount * w * h / 40)):
        x, y = rng.randrange(w), rng.randrange(h)
        g = rng.randrange(256)
        draw.point((x, y), fill=(g, g, g))
    if amount > 0.5:
        img = img.filter(ImageFilter.GaussianBlur(radius=0.4 + amount * 0.4))
    return img


def to_norm_box(box: tuple[float, float, float, float], size: tuple[int, int]) -> list[int]:
    """Pixel box -> ``[x1, y1, x2, y2]`` in 0-999 normalised coordinates."""
    w, h = size
    x1, y1, x2, y2 = box
    return [
        max(0, min(999, round(x1 / w * 999))),
        max(0, min(999, round(y1 / h * 999))),
        max(0, min(999, round(x2 / w * 999))),
        max(0, min(999, round(y2 / h * 999))),
    ]
