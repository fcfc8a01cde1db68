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

#: The font of every glyph below difficulty 0.5 (and of the pretraining captions' images).
BOLD_FONT = "DejaVuSans-Bold.ttf"
#: The fonts of harder glyphs, one picked per image. All are files matplotlib ships, so the
#: task data are the same on every machine whatever fonts it has installed.
VARIED_FONTS = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
)
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

    #: examples ``_draw`` asks ``sample_many`` for at a time: more where they are cheaper
    #: made together (the GUI one's pages share a screenshot)
    batch: int = 1

    @abstractmethod
    def sample(self, rng: random.Random, difficulty: float) -> Example: ...

    def sample_many(self, rng: random.Random, lo: float, hi: float, n: int) -> list[Example]:
        """``n`` examples, each at a difficulty drawn from [lo, hi) just before it: the same
        examples, in the same order, for every way of cutting a stream into calls."""
        return [self.sample(rng, rng.uniform(lo, hi)) for _ in range(n)]

    def close(self) -> None:  # noqa: B027 - optional hook, most generators hold nothing
        """Release anything the generator holds (a browser, for instance)."""

    @classmethod  # noqa: B027 - optional hook, most generators need nothing
    def check_ready(cls) -> None:
        """Raise, saying what to install, when this machine lacks something the generator needs
        (the GUI one's browser): called before a build writes anything, so that a missing tool
        does not surface only when the build reaches its domain."""


def font_dir() -> Path:
    """matplotlib's bundled TrueType fonts (``mpl-data/fonts/ttf``)."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def font_path(name: str) -> str:
    """The path of one of matplotlib's bundled fonts; a clear error where it is missing."""
    path = font_dir() / name
    if not path.is_file():
        raise FileNotFoundError(
            f"the font {name} that the task images are drawn in is not at {path}, where "
            "matplotlib installs it; reinstall matplotlib (pip install --force-reinstall "
            "matplotlib)"
        )
    return str(path)


@lru_cache(maxsize=1)
def font_files() -> tuple[str, ...]:
    """The paths of ``VARIED_FONTS``, in their order."""
    return tuple(font_path(name) for name in VARIED_FONTS)


@lru_cache(maxsize=256)
def _font(path: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size)


def pick_font(rng: random.Random, size: int) -> ImageFont.FreeTypeFont:
    """One of ``VARIED_FONTS`` at ``size`` pixels, drawn from ``rng``."""
    return _font(rng.choice(font_files()), size)


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
    From 0.5 the canvas is ``min_size`` (widened, in whole cells, to the line and a cell more),
    the line starts on a random cell, and difficulty adds sub-cell jitter (up to half a cell),
    varied fonts and smaller glyphs, so that characters straddle tokens. The line moves as a
    whole: glyphs stay one cell apart, and on the canvas.
    """
    easy = difficulty < 0.5
    # from 0.5, a spare cell beside the line, so that its jitter has room on the canvas
    cols = len(text) if easy else max(min_size[0] // TOKEN_PX, len(text) + 1)
    rows = 1 if easy else max(1, min_size[1] // TOKEN_PX)
    img = Image.new("RGB", (cols * TOKEN_PX, rows * TOKEN_PX), "white")
    draw = ImageDraw.Draw(img)
    size = 24 - round(6 * max(0.0, difficulty - 0.5) * 2)
    font = _bold_font(size) if easy else pick_font(rng, size=size)
    jitter = 0 if easy else round(difficulty * TOKEN_PX / 2)
    col = rng.randint(0, cols - len(text))
    row = rng.randint(0, rows - 1)
    dx, dy = rng.randint(-jitter, jitter), rng.randint(-jitter, jitter)
    half = TOKEN_PX // 2
    first, last = col * TOKEN_PX + half, (col + len(text) - 1) * TOKEN_PX + half
    # the line moves as a whole and stays on the canvas: kept there glyph by glyph, a line
    # jittered past an edge piled its end glyphs onto each other there (W9KLLM read W9KLM)
    dx = min(max(dx, half - first), img.width - half - last)
    y = min(max(row * TOKEN_PX + half + dy, half), img.height - half)
    for i, ch in enumerate(text):
        draw.text((first + i * TOKEN_PX + dx, y), ch, fill=ink, font=font, anchor="mm")
    return img


def _bold_font(size: int) -> ImageFont.FreeTypeFont:
    return _font(font_path(BOLD_FONT), size)


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
