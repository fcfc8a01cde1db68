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

    def task(self) -> str:
        """What the example asks, apart from how its image draws it: a math expression, or the
        prompt with the answer (an OCR word, a grounding target with its box, a GUI instruction
        with its click). Two examples of one task are the same question on other pixels."""
        return str(self.meta.get("expression") or f"{self.prompt}\n{self.answer_text}")

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

    @classmethod  # noqa: B027 - optional hook, most generators need nothing
    def check_ready(cls) -> None:
        """Raise, saying what to install, when this machine lacks something the generator needs
        (the GUI one's browser): called before a build writes anything, so that a missing tool
        does not surface only when the build reaches its domain."""


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


#: Side of one image token of the GLM-4.1V vision tower in pixels: a 14-px patch, merged 2x2.
TOKEN_PX = 28


def draw_cells(
    text: str,
    rng: random.Random,
    difficulty: float,
    min_size: tuple[int, int],
    ink: tuple[int, int, int] = (0, 0, 0),
) -> Image.Image:
    """Render ``text`` one character per ``TOKEN_PX`` cell, on a white canvas of whole cells.

    Below difficulty 0.5 the canvas is one row of exactly ``len(text)`` cells and every glyph is
    bold and centred in its own image token: the easiest reading task a vision tower can get.
    From 0.5 the canvas is ``min_size`` (widened to fit, in whole cells), the line starts on a
    random cell, and difficulty adds sub-cell jitter (up to half a cell), varied fonts and smaller
    glyphs, so that characters straddle tokens.
    """
    easy = difficulty < 0.5
    cols = len(text) if easy else max(min_size[0] // TOKEN_PX, len(text))
    rows = 1 if easy else max(1, min_size[1] // TOKEN_PX)
    img = Image.new("RGB", (cols * TOKEN_PX, rows * TOKEN_PX), "white")
    draw = ImageDraw.Draw(img)
    size = 24 - round(6 * max(0.0, difficulty - 0.5) * 2)
    font = _bold_font(size) if easy else pick_font(rng, size=size, varied=True)
    jitter = 0 if easy else round(difficulty * TOKEN_PX / 2)
    col = rng.randint(0, cols - len(text))
    row = rng.randint(0, rows - 1)
    dx, dy = rng.randint(-jitter, jitter), rng.randint(-jitter, jitter)
    for i, ch in enumerate(text):
        x = (col + i) * TOKEN_PX + TOKEN_PX // 2 + dx
        y = row * TOKEN_PX + TOKEN_PX // 2 + dy
        x = min(max(x, TOKEN_PX // 2), img.width - TOKEN_PX // 2)
        y = min(max(y, TOKEN_PX // 2), img.height - TOKEN_PX // 2)
        draw.text((x, y), ch, fill=ink, font=font, anchor="mm")
    return img


def _bold_font(size: int) -> ImageFont.ImageFont:
    files = font_files()
    bold = [f for f in files if f.endswith("Sans-Bold.ttf")] or [f for f in files if "Bold" in f]
    return _font(bold[0] if bold else (files[0] if files else None), size)


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
